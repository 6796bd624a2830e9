#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root: the verify sampler's
# benchmark (C++), then its peer comparison (PyTorch eager and FlashInfer on
# the same inputs as our kernel, verify_sample_peers.py), and prints the
# Markdown table for docs/PERF.md. Results go to $OUT (or /tmp).
#
#   kernels/bench/run_on_gpu.sh BENCHMARK_BINARY [CAPI_SO] [WHEEL_DIR]
#
# BENCHMARK_BINARY: verify_sampler_benchmark (in a tools/device/bundle.sh
# bundle: .bundle/bin/kernels/bench/verify_sampler_benchmark). CAPI_SO
# defaults to libverdict_verify_sample.so next to it; WHEEL_DIR (default
# .whl) holds the flashinfer-python and apache-tvm-ffi wheels, installed
# into /tmp/site. Extra benchmark flags: VERIFY_BENCH_FLAGS; extra script
# flags: VERIFY_PEERS_FLAGS (e.g. "--requests=0,1,8,64 --vocab_sizes=151936").
set -uo pipefail
cd "$(dirname "$0")/../.."
bench=${1:?usage: run_on_gpu.sh BENCHMARK_BINARY [CAPI_SO] [WHEEL_DIR]}
capi=${2:-$(dirname "$bench")/libverdict_verify_sample.so}
wheels=${3:-.whl}
out=${OUT:-/tmp}
bundle_env=$(cd "$(dirname "$bench")/../../.." 2>/dev/null && pwd)/env.sh
[[ -f "$bundle_env" ]] && source "$bundle_env"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader

echo "== C++ benchmark"
"$bench" --json_out="$out/verify_sampler_benchmark.json" ${VERIFY_BENCH_FLAGS:-} \
  2>&1 | tee "$out/verify_sampler_benchmark.log"
bench_status=${PIPESTATUS[0]}

echo "== peers (PyTorch eager, FlashInfer) on the same inputs"
if compgen -G "$wheels/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
# FlashInfer compiles its sampling kernels on first use, for this GPU only.
export FLASHINFER_CUDA_ARCH_LIST=9.0 TORCH_CUDA_ARCH_LIST=9.0 FLASHINFER_NVCC_THREADS=8
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
capi_flag=()
[[ -f "$capi" ]] && capi_flag=(--capi "$capi")
PYTHONUNBUFFERED=1 python3 kernels/bench/verify_sample_peers.py "${capi_flag[@]}" \
  --cpp_json "$out/verify_sampler_benchmark.json" \
  --out_md "$out/verify_sample_perf.md" --out_json "$out/verify_sample_peers.json" \
  ${VERIFY_PEERS_FLAGS:-} 2>&1 | tee "$out/verify_sample_peers.log"
peers_status=${PIPESTATUS[0]}
echo "benchmark exit $bench_status, peers exit $peers_status; table: $out/verify_sample_perf.md"
((bench_status == 0 && peers_status == 0))
