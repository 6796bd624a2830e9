"""kernels/bench/verify_phase_trace.py on printed lines of known times."""
import importlib.util
import sys
import unittest

spec = importlib.util.spec_from_file_location("verify_phase_trace", sys.argv.pop(1))
trace = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace)


def line(row, rank, **ns):
    """A verify_phase line as the kernel prints it, -1 for phases not given."""
    return f"verify_phase row {row} rank {rank} " + " ".join(
        f"{p} {ns.get(p, -1)}" for p in trace.PHASES) + "\n"


class VerifyPhaseTraceTest(unittest.TestCase):
    def test_medians_and_durations_over_launches(self):
        lines = ["device: some header the benchmark prints\n"]
        # Three launches of a plain row: streamed, merged, mass, filtered,
        # decided, drawn, end (ns since the row's start).
        for streamed, merged, end in ((6000, 9000, 15000), (7000, 9500, 16000),
                                      (5000, 8000, 20000)):
            lines.append(line(0, 15, streamed=streamed, merged=merged, mass=merged + 1000,
                              filtered=merged + 1000, decided=merged + 1500,
                              drawn=merged + 4000, end=end))
        summary = trace.summarise(trace.parse(lines))
        plain = ("streamed", "merged", "mass", "filtered", "decided", "drawn", "end")
        self.assertEqual(list(summary), [(0, 15, plain)])
        s = summary[(0, 15, plain)]
        self.assertEqual((s["launches"], s["of"]), (3, 3))
        by_phase = {p["phase"]: p for p in s["phases"]}
        self.assertEqual(list(by_phase), ["streamed", "merged", "mass", "filtered", "decided",
                                          "drawn", "end"])
        self.assertAlmostEqual(by_phase["streamed"]["end_us"], 6.0)
        self.assertAlmostEqual(by_phase["streamed"]["took_us"], 6.0)
        # merged - streamed: 3000, 2500, 3000 ns.
        self.assertAlmostEqual(by_phase["merged"]["took_us"], 3.0)
        # end - drawn: 2000, 2500, 8000 ns.
        self.assertAlmostEqual(by_phase["end"]["took_us"], 2.5)
        self.assertAlmostEqual(by_phase["end"]["end_us"], 16.0)

    def test_launches_that_took_another_path_are_summarised_apart(self):
        # The residual ran in two of three launches of this row.
        lines = [line(2, 0, streamed=1000, residual_summed=5000, end=9000),
                 line(2, 0, streamed=1000, end=8000),
                 line(2, 0, streamed=2000, residual_summed=8000, end=10000)]
        summary = trace.summarise(trace.parse(lines))
        residual = (2, 0, ("streamed", "residual_summed", "end"))
        plain = (2, 0, ("streamed", "end"))
        # The more common path first.
        self.assertEqual(list(summary), [residual, plain])
        self.assertEqual((summary[residual]["launches"], summary[residual]["of"]), (2, 3))
        self.assertEqual((summary[plain]["launches"], summary[plain]["of"]), (1, 3))
        took = {p["phase"]: p["took_us"] for p in summary[residual]["phases"]}
        # residual_summed - streamed: 4000, 6000 ns; end - residual_summed: 4000, 2000.
        self.assertAlmostEqual(took["residual_summed"], 5.0)
        self.assertAlmostEqual(took["end"], 3.0)
        # The plain launch's end counts from the last phase it passed.
        self.assertAlmostEqual(summary[plain]["phases"][1]["took_us"], 7.0)

    def test_rows_and_ranks_are_kept_apart(self):
        lines = [line(0, 0, end=1000), line(0, 15, end=2000), line(1, 0, end=3000)]
        self.assertEqual([key[:2] for key in trace.summarise(trace.parse(lines))],
                         [(0, 0), (0, 15), (1, 0)])

    def test_a_malformed_line_is_an_error(self):
        with self.assertRaises(ValueError):
            trace.parse(["verify_phase row 0 rank 0 streamed 5 merged\n"])


if __name__ == "__main__":
    unittest.main()
