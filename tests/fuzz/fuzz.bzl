"""fuzz_target: one parser of outside input, fuzzed and regression-tested.

    fuzz_target(name = "cost_table", srcs = ["cost_table_fuzz.cc"], deps = [...])

makes two targets from a file that defines LLVMFuzzerTestOneInput:
  - NAME_regression_test: a cc_test that runs every file of corpus/NAME/
    (the seeds and every input that ever crashed) through the function, in
    the ordinary build; `bazel test //...` runs it.
  - NAME_fuzzer: the libFuzzer binary (tagged manual), built only with
    `--config=fuzz` (clang, AddressSanitizer, UndefinedBehaviorSanitizer);
    tools/fuzz/run.sh builds and runs them all.
"""

def fuzz_target(name, srcs, deps = [], data = []):
    corpus = native.glob(["corpus/%s/*" % name])
    native.cc_test(
        name = name + "_regression_test",
        size = "small",
        srcs = srcs,
        args = ["tests/fuzz/corpus/" + name],
        data = corpus + data,
        testonly = True,
        deps = deps + [":regression_main"],
    )
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = srcs,
        data = data,
        testonly = True,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
        deps = deps,
    )
