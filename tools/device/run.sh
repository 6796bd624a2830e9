#!/usr/bin/env bash
# Runs on the GPU machine: every GPU test of a bundle (tools/device/bundle.sh),
# from the repository root so tests find their data files. Prints one line
# per test and a summary; full logs go to $OUT (or /tmp) as gpu_tests.log.
#
#   tools/device/run.sh [BUNDLE_DIR] [TEST_FILTER_REGEX]
set -uo pipefail
cd "$(dirname "$0")/../.."
bundle=${1:-.bundle}
filter=${2:-.}
source "$bundle/env.sh"
log=${OUT:-/tmp}/gpu_tests.log
: >"$log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log"
pass=0 fail=0
while read -r test; do
  [[ "$test" =~ $filter ]] || continue
  start=$(date +%s%N)
  if "$bundle/bin/$test" >>"$log" 2>&1; then
    result=PASSED; pass=$((pass + 1))
  else
    result=FAILED; fail=$((fail + 1))
  fi
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  printf '%-60s %s in %d ms\n' "//${test%/*}:${test##*/}" "$result" "$elapsed_ms" | tee -a "$log"
done <"$bundle/gpu_tests.txt"
echo "gpu tests: $pass passed, $fail failed" | tee -a "$log"
((fail == 0))
