"""mpi_test: runs a binary under mpirun with NP ranks as a test.

The test is an sh_test around //tests:mpirun_test.sh, which sets up mpirun
for this host (root, oversubscribed cores, shared memory only, a hang
timeout) and checks the outcome. Example:

    load("//tools:mpi_test.bzl", "mpi_test")

    mpi_test(
        name = "engine_np2",
        binary = "//tests:engine_multirank_test",
        np = 2,
    )

A binary that must end badly names the exit status and the output it
expects, and can bound the wall time:

    mpi_test(
        name = "dead_rank_np4",
        binary = "//comm:mpi_dead_rank_check",
        np = 4,
        expect_exit = 3,
        expect_output = ["rank 1: dying"],
        max_seconds = 20,
    )
"""

def _quote(arg):
    # sh_test args go through Make-variable expansion ($) and Bourne shell
    # tokenization (spaces, quotes).
    if "'" in arg:
        fail("mpi_test: single quotes are not supported in arguments: " + arg)
    return "'" + arg.replace("$", "$$") + "'"

def mpi_test(
        name,
        binary,
        np,
        args = [],
        expect_exit = 0,
        expect_output = [],
        max_seconds = None,
        size = "medium",
        tags = [],
        **kwargs):
    """An sh_test that runs `binary` under mpirun with `np` ranks.

    Args:
      name: the test's name.
      binary: label of the executable (a cc_binary, testonly is fine).
      np: the number of ranks; more than the cores is fine.
      args: arguments passed to every rank.
      expect_exit: mpirun's exit status that passes.
      expect_output: extended regular expressions, each of which some line
        of the combined output must match.
      max_seconds: fail when the job takes longer (whole seconds).
      size: the test size; its timeout bounds the job (minus 15 s).
      tags: extra tags; "mpi" is always added.
      **kwargs: passed to sh_test (visibility, flaky, ...).
    """
    launcher_args = ["--expect-exit=%d" % expect_exit]
    for pattern in expect_output:
        launcher_args.append(_quote("--expect-output=" + pattern))
    if max_seconds != None:
        launcher_args.append("--max-seconds=%d" % max_seconds)
    native.sh_test(
        name = name,
        srcs = ["//tests:mpirun_test.sh"],
        args = launcher_args + [str(np), "$(rootpath %s)" % binary] + [_quote(a) for a in args],
        data = [binary],
        size = size,
        tags = tags + ["mpi"],
        **kwargs
    )
