#!/usr/bin/env bash
# GPU machine: the verify sampler of .carry/verify-new against the one of
# .carry/verify-old (tools/device/verify_kernel_bundles.sh), in one run.
# Stages, in this order (default: all):
#
#   parity  the new kernel's GPU test against its CPU twin
#   bench   both benchmarks at the default split, back to back
#   sweep   the new benchmark at other splits (TILES, default 8,16,64)
#   top_p   both benchmarks with top-p 0.9 (the selection passes)
#   filters both benchmarks with top_k 50, top_p 0.95 + top_k 50 and (new
#           only: the old kernel has none) min_p 0.05; the draft sampler's
#           benchmark of the new tree
#   peers   PyTorch eager and FlashInfer on the same inputs, with the new
#           kernel's table for docs/PERF.md (kernels/bench/run_on_gpu.sh)
#   phases  where the new kernel's time goes: the phase-timed benchmark of
#           .carry/verify-trace at one and six rows, temperature 1, top_p
#           0.9 and top_k 50, summarised by kernels/bench/verify_phase_trace.py
#   stalls  why: Nsight Compute's warp states and stall samples (with the
#           source lines) of one launch of the new kernel at the same
#           settings, a CSV and an ncu-rep report each
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
trace=.carry/verify-trace
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
    parity) OUT=$out/new tools/device/run.sh "$new" sampler || status=1 ;;
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
    filters)
      bench "$old" old/top_k --top_k=50 --json_out="$out/old/top_k.json"
      bench "$new" new/top_k --top_k=50 --json_out="$out/new/top_k.json"
      bench "$old" old/top_k_top_p --top_k=50 --top_p=0.95 --json_out="$out/old/top_k_top_p.json"
      bench "$new" new/top_k_top_p --top_k=50 --top_p=0.95 --json_out="$out/new/top_k_top_p.json"
      bench "$new" new/min_p --min_p=0.05 --json_out="$out/new/min_p.json"
      (source "$new/env.sh" &&
         "$new/bin/kernels/bench/draft_sampler_benchmark" --json_out="$out/new/draft.json" 2>&1 |
         tee "$out/new/draft.log")
      ;;
    peers)
      OUT=$out/new kernels/bench/run_on_gpu.sh "$new/bin/kernels/bench/verify_sampler_benchmark" \
        "$new/bin/kernels/bench/libverdict_verify_sample.so" .whl || status=1
      ;;
    phases)
      mkdir -p "$out/new/phases"
      for setting in --temperature=1 --top_p=0.9 --top_k=50; do
        for requests in 0 1; do
          name=${setting#--}_requests$requests
          name=${name//=/_}
          (source "$trace/env.sh" &&
             "$trace/bin/kernels/bench/verify_sampler_benchmark" --vocab_sizes=151936 \
               --requests="$requests" --launches=2 --repeats=3 "$setting" \
               --json_out="$out/new/phases/$name.json" > "$out/new/phases/$name.log" 2>&1) ||
            status=1
          echo "-- $setting, $requests requests"
          python3 kernels/bench/verify_phase_trace.py "$out/new/phases/$name.log" \
            --json "$out/new/phases/$name.summary.json" || status=1
        done
      done
      ;;
    stalls)
      mkdir -p "$out/new/stalls"
      ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      for setting in --temperature=1 --top_p=0.9 --top_k=50; do
        for requests in 0 1; do
          name=${setting#--}_requests$requests
          name=${name//=/_}
          # Launch 4: after the benchmark's warm-up launches on each input copy.
          (source "$new/env.sh" &&
             "$ncu" -k regex:VerifySample --launch-skip 4 --launch-count 1 \
               --section WarpStateStats --section SchedulerStats --section SourceCounters \
               --section LaunchStats --import-source yes -o "$out/new/stalls/$name" -f \
               "$new/bin/kernels/bench/verify_sampler_benchmark" --vocab_sizes=151936 \
               --requests="$requests" --launches=2 --repeats=1 "$setting" --json_out=/dev/null \
               > "$out/new/stalls/$name.log" 2>&1 &&
             "$ncu" --import "$out/new/stalls/$name.ncu-rep" --csv --page details \
               > "$out/new/stalls/$name.csv") || status=1
          echo "-- $setting, $requests requests"
          python3 -c 'import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["Section Name"] in ("Warp State Statistics", "Scheduler Statistics"):
        print(" ", r["Metric Name"], r["Metric Value"], r["Metric Unit"])' \
            "$out/new/stalls/$name.csv" || status=1
        done
      done
      ;;
    *) echo "unknown stage $stage" >&2; status=1 ;;
  esac
done
exit "$status"
