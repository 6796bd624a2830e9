#!/usr/bin/env bash
# GPU machine: the verify sampler of .carry/verify-new against the one of
# .carry/verify-old (tools/device/verify_kernel_bundles.sh), in one run.
# Stages, in this order (default: all):
#
#   parity  the new kernel's GPU test against its CPU twin
#   bench   both benchmarks at the default split, back to back
#   sweep   the new benchmark at other splits (TILES, default 8,16,64)
#   top_p   both benchmarks with top-p 0.9 (the selection passes)
#   peers   PyTorch eager and FlashInfer on the same inputs, with the new
#           kernel's table for docs/PERF.md (kernels/bench/run_on_gpu.sh)
#
#   tools/device/verify_kernel_compare.sh [STAGE...]
#
# Results land in $OUT (or /tmp): old/ and new/ hold each benchmark's log
# and JSON. The peers' wheels (.whl) are large beside the working tree: run
# `peers` in a call of its own, carrying .carry/verify-new and .whl, and the
# other stages carrying the two bundles.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
new=.carry/verify-new
old=.carry/verify-old
out=${OUT:-/tmp}
stages=("$@")
((${#stages[@]} == 0)) && stages=(parity bench sweep top_p peers)
mkdir -p "$out/old" "$out/new"
status=0

bench() {  # bench BUNDLE NAME FLAGS...
  local bundle=$1 name=$2
  shift 2
  (source "$bundle/env.sh" &&
     "$bundle/bin/kernels/bench/verify_sampler_benchmark" "$@" 2>&1 | tee "$out/$name.log")
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) || status=1
}

for stage in "${stages[@]}"; do
  echo "== $stage"
  case "$stage" in
    parity) OUT=$out/new tools/device/run.sh "$new" verify_sampler || status=1 ;;
    bench)
      bench "$old" old/bench --json_out="$out/old/bench.json"
      bench "$new" new/bench --json_out="$out/new/bench.json"
      ;;
    sweep)
      bench "$new" new/sweep --tiles_per_cta="${TILES:-8,16,64}" --json_out="$out/new/sweep.json"
      ;;
    top_p)
      bench "$old" old/top_p --top_p=0.9 --json_out="$out/old/top_p.json"
      bench "$new" new/top_p --top_p=0.9 --json_out="$out/new/top_p.json"
      ;;
    peers)
      OUT=$out/new kernels/bench/run_on_gpu.sh "$new/bin/kernels/bench/verify_sampler_benchmark" \
        "$new/bin/kernels/bench/libverdict_verify_sample.so" .whl || status=1
      ;;
    *) echo "unknown stage $stage" >&2; status=1 ;;
  esac
done
exit "$status"
