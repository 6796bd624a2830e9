#!/usr/bin/env bash
# GPU machine: hunts for a verify sampler launch that never finishes (a
# cluster barrier some CTA never reaches). Runs the benchmark of a bundle
# (tools/device/bundle.sh; it launches the kernel thousands of times a
# setting) once per setting, split and round, each under a timeout, then
# the GPU test under compute-sanitizer's racecheck and synccheck, and
# prints one line per run and a count of the runs that timed out. A run
# past its timeout is the finding: its setting is in the line, and the
# kernel log (dmesg) follows for an Xid.
#
#   tools/device/verify_kernel_stalls.sh [BUNDLE_DIR]
#
# Environment: ROUNDS (default 3), SECONDS_PER_RUN (default 25), SPLITS
# (--tiles_per_cta values, default ",2,4,8,16": the launch's own choice
# first), SANITIZE=0 to leave the sanitizer out. Logs land in $OUT (or
# /tmp)/stalls.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bundle=${1:-.bundle}
source "$bundle/env.sh"
out=${OUT:-/tmp}/stalls
mkdir -p "$out"
bench="$bundle/bin/kernels/bench/verify_sampler_benchmark"
settings=("--temperature=1" "--top_k=50" "--top_p=0.9" "--top_k=50 --top_p=0.95" "--min_p=0.05")
IFS=',' read -ra splits <<<"${SPLITS:-,2,4,8,16}"
runs=0 stalled=0 failed=0
for round in $(seq "${ROUNDS:-3}"); do
  for setting in "${settings[@]}"; do
    for split in "${splits[@]}"; do
      runs=$((runs + 1))
      name="r$round-$(sed 's/--//g; s/ /+/g' <<<"$setting")${split:+-tiles$split}"
      # shellcheck disable=SC2086
      timeout "${SECONDS_PER_RUN:-25}" "$bench" --vocab_sizes=32000,151936 --requests=0,1,64,341 \
        --repeats=3 $setting ${split:+--tiles_per_cta=$split} --json_out="$out/$name.json" \
        >"$out/$name.log" 2>&1
      rc=$?
      case $rc in
        0) result=ok ;;
        124 | 137) result=STALLED; stalled=$((stalled + 1)) ;;
        *) result="FAILED rc $rc"; failed=$((failed + 1)) ;;
      esac
      printf '%-50s %s\n' "$name" "$result"
    done
  done
done
echo "verify stalls: $runs runs, $stalled stalled, $failed failed"
if [[ "${SANITIZE:-1}" != 0 ]] && command -v compute-sanitizer >/dev/null; then
  for tool in racecheck synccheck; do
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$bundle/bin/kernels/verify_sampler_gpu_test" >"$out/$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc $? ($(grep -c 'ERROR SUMMARY: 0' "$out/$tool.log") clean summaries)"
  done
fi
if ((stalled > 0)); then dmesg 2>/dev/null | grep -i xid | tail -5; fi
((stalled == 0 && failed == 0))
