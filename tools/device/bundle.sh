#!/usr/bin/env bash
# Builds every GPU test and benchmark (targets tagged "gpu" or "benchmark")
# and the verdict binary, and collects them, with the shared libraries the GPU machine lacks, into
# one folder (default .bundle/, git-ignored) that tools/device/run.sh runs
# there. The GPU machine has CUDA 13 (cuBLAS), NCCL and a driver, but no
# Bazel and none of our Debian libraries.
#
#   tools/device/bundle.sh [OUT_DIR] [TARGET_PATTERN...]
#
# VERDICT_BUNDLE_BAZEL_ARGS adds build flags (for example
# --config=verify_phase_trace, the verify kernel's phase timing).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.bundle}
shift || true
patterns=("$@")
if ((${#patterns[@]} == 0)); then patterns=("//..."); fi

query="attr(tags, '\\bgpu\\b|\\bbenchmark\\b', kind('cc_binary|cc_test', $(IFS=+; echo "${patterns[*]}")))"
mapfile -t targets < <(bazel query "$query" 2>/dev/null)
if ((${#targets[@]} == 0)); then
  echo "bundle: no gpu or benchmark targets under ${patterns[*]}" >&2
  exit 1
fi
# The product binary travels too: the GPU machine runs the engine and the
# server on the CUDA backend with it (VERDICT_BUNDLE_VERDICT=0 leaves it out,
# for bundles of kernel tests and benchmarks alone).
if [[ "${VERDICT_BUNDLE_VERDICT:-1}" != 0 ]]; then targets+=(//runtime/cli:verdict); fi
read -ra extra_args <<<"${VERDICT_BUNDLE_BAZEL_ARGS:-}"
bazel build "${extra_args[@]}" "${targets[@]}"
bin_root=$(bazel info "${extra_args[@]}" bazel-bin 2>/dev/null)

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do
  pkg=${t#//}; pkg=${pkg%%:*}; name=${t##*:}
  mkdir -p "$out/bin/$pkg"
  cp "$bin_root/$pkg/$name" "$out/bin/$pkg/$name"
  chmod u+w "$out/bin/$pkg/$name"
  strip --strip-debug "$out/bin/$pkg/$name"
  # Data files next to the binaries (runfiles) are not bundled: GPU tests
  # take their inputs from the repository copy that travels with each run.
  if bazel query "attr(tags, '\\bgpu\\b', kind(cc_test, $t))" 2>/dev/null | grep -q .; then
    echo "$pkg/$name" >>"$out/gpu_tests.txt"
  fi
done

# Shared libraries the GPU machine does not have: everything ldd resolves
# outside the C runtime, CUDA and NCCL (those are installed there).
system_libs='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libcublasLt|libnccl|libz\.)'
needs_mpi=0
for bin in $(find "$out/bin" -type f); do
  if ldd "$bin" | grep -q "not found"; then
    echo "bundle: $bin needs a library that is not found:" >&2
    ldd "$bin" | grep "not found" >&2
    exit 1
  fi
  while read -r lib path; do
    [[ -z "$path" || "$path" == "not" ]] && continue
    if [[ "$lib" =~ $system_libs ]]; then continue; fi
    # Open MPI and its own libraries come as one set (below).
    if [[ "$lib" =~ ^(libmpi|libopen-rte|libopen-pal|libhwloc|libevent|libpmix) ||
          "$path" == */openmpi/* ]]; then
      needs_mpi=1
      continue
    fi
    cp -n "$path" "$out/lib/" 2>/dev/null || true
  done < <(ldd "$bin" | awk '/=>/ {print $1, $3}')
done

# Open MPI: the Debian build and its plugins, unpacked (toolchain.md).
# VERDICT_BUNDLE_MPI=0 leaves it out (single-rank runs can use the GPU
# machine's own libmpi.so.40).
if ((needs_mpi)) && [[ "${VERDICT_BUNDLE_MPI:-1}" != 0 ]]; then
  mpi_debs=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15
            libevent-core-2.1-7 libevent-pthreads-2.1-7 libmunge2 libnl-3-200
            libnl-route-3-200 libfabric1 libpsm-infinipath1 libpsm2-2 libibverbs1
            librdmacm1 libucx0 libxnvctrl0)
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download "${mpi_debs[@]}" >/dev/null 2>&1 ||
     apt-get download openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 \
       libevent-core-2.1-7 libevent-pthreads-2.1-7 libmunge2 libnl-3-200 libnl-route-3-200 >/dev/null)
  mkdir -p "$out/mpi"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$out/mpi"; done
  rm -rf "$tmp" "$out/mpi/usr/share/doc" "$out/mpi/usr/share/man"
  ln -sf orterun "$out/mpi/usr/bin/mpirun"
fi
cp tools/device/env.sh "$out/env.sh"
echo "bundle: ${#targets[@]} targets, $(du -sh "$out" | cut -f1) in $out"
