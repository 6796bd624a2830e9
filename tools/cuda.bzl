"""cuda_library: compiles .cu files with nvcc into a static library.

The objects carry sm_90 SASS plus compute_90 PTX (Hopper, with PTX for newer
GPUs). nvcc uses the same C++ standard as the host compiler (taken from
--cxxopt). The result is an ordinary CcInfo, so cc_library, cc_binary and
cc_test targets depend on it like on any other C++ library.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

_NVCC = "/usr/local/cuda/bin/nvcc"

_GENCODE = [
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_90,code=compute_90",
]

def _host_std_flags(ctx):
    return [o for o in ctx.fragments.cpp.cxxopts if o.startswith("-std=")]

def _cuda_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    dep_infos = [d[CcInfo] for d in ctx.attr.deps]
    dep_contexts = [i.compilation_context for i in dep_infos]

    include_flags = ["-I."]
    include_flags.append("-I" + ctx.bin_dir.path)
    for cc in dep_contexts:
        for d in cc.includes.to_list() + cc.quote_includes.to_list():
            include_flags.append("-I" + d)
        for d in cc.system_includes.to_list():
            include_flags.append("-isystem=" + d)
    define_flags = []
    for cc in dep_contexts:
        define_flags += ["-D" + d for d in cc.defines.to_list()]
    define_flags += ["-D" + d for d in ctx.attr.defines]

    header_inputs = depset(
        ctx.files.hdrs,
        transitive = [cc.headers for cc in dep_contexts],
    )

    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/{}/{}.o".format(ctx.label.name, src.basename))
        args = ctx.actions.args()
        args.add_all(_GENCODE)
        args.add_all(_host_std_flags(ctx))
        args.add_all(["-O3", "-lineinfo", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr"])
        args.add_all(ctx.attr.copts)
        args.add_all(include_flags)
        args.add_all(define_flags)
        args.add_all(["-c", src.path, "-o", obj.path])
        ctx.actions.run(
            executable = _NVCC,
            arguments = [args],
            inputs = depset([src], transitive = [header_inputs]),
            outputs = [obj],
            env = {"PATH": "/usr/local/cuda/bin:/usr/bin:/bin"},
            mnemonic = "NvccCompile",
            progress_message = "nvcc {}".format(src.short_path),
        )
        objects.append(obj)

    archive = ctx.actions.declare_file("lib{}.a".format(ctx.label.name))
    ar_args = ctx.actions.args()
    ar_args.add("rcs", archive)
    ar_args.add_all(objects)
    ctx.actions.run(
        executable = cc_toolchain.ar_executable,
        arguments = [ar_args],
        inputs = depset(objects, transitive = [cc_toolchain.all_files]),
        outputs = [archive],
        mnemonic = "CudaArchive",
    )

    library = cc_common.create_library_to_link(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        static_library = archive,
        alwayslink = True,
    )
    linking_context = cc_common.create_linking_context(
        linker_inputs = depset([cc_common.create_linker_input(
            owner = ctx.label,
            libraries = depset([library]),
        )]),
    )
    compilation_context = cc_common.create_compilation_context(
        headers = depset(ctx.files.hdrs),
    )
    own = CcInfo(
        compilation_context = compilation_context,
        linking_context = linking_context,
    )
    return [
        DefaultInfo(files = depset([archive])),
        cc_common.merge_cc_infos(direct_cc_infos = [own], cc_infos = dep_infos),
    ]

cuda_library = rule(
    implementation = _cuda_library_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "defines": attr.string_list(),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)
