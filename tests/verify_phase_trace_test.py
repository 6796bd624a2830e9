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
        self.assertEqual(list(summary), [(0, 15)])
        s = summary[(0, 15)]
        self.assertEqual(s["launches"], 3)
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

    def test_a_phase_missed_in_some_launch_is_left_out(self):
        lines = [line(2, 0, streamed=1000, residual_summed=5000, end=9000),
                 line(2, 0, streamed=1000, end=8000)]
        s = trace.summarise(trace.parse(lines))[(2, 0)]
        self.assertEqual([p["phase"] for p in s["phases"]], ["streamed", "end"])
        # end's duration counts from the last phase the launch passed.
        self.assertAlmostEqual(s["phases"][1]["took_us"], (4000 + 7000) / 2 / 1000)

    def test_rows_and_ranks_are_kept_apart(self):
        lines = [line(0, 0, end=1000), line(0, 15, end=2000), line(1, 0, end=3000)]
        self.assertEqual(list(trace.summarise(trace.parse(lines))), [(0, 0), (0, 15), (1, 0)])

    def test_a_malformed_line_is_an_error(self):
        with self.assertRaises(ValueError):
            trace.parse(["verify_phase row 0 rank 0 streamed 5 merged\n"])


if __name__ == "__main__":
    unittest.main()
