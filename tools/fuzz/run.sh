#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz with clang and libFuzzer (with
# AddressSanitizer and UndefinedBehaviorSanitizer) and fuzzes each, starting
# from its corpus, for a number of runs or seconds. A crash leaves its input
# in OUT_DIR/NAME/ and fails the script: add that file to
# tests/fuzz/corpus/NAME/, so that `bazel test` replays it from then on.
#
#   tools/fuzz/run.sh [--runs N | --seconds S] [--seed K] [--out OUT_DIR]
#                     [--rss-limit-mb MB] [--resume] [NAME...]
#
# With --runs and --seed a run is repeatable (CI uses both). With --resume
# a target starts from the corpus an earlier run left in OUT_DIR/NAME/corpus
# (the repository's seeds added), so that a long campaign can run in parts;
# without it the corpus starts from the seeds. --rss-limit-mb
# (default 2048) is libFuzzer's memory limit: http_request's long runs need
# more, since its RSS grows by about 260 bytes an execution under ASan
# (docs/RELIABILITY.md).
#
# The build uses an output base of its own, so that the compiler switch does
# not invalidate the ordinary build's cache. civetweb is built from Debian's
# source of the packaged version, instrumented too (tools/fuzz/civetweb.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=""
seconds=30
seed=0
out=/tmp/verdict-fuzz
rss_limit_mb=2048
resume=0
names=()
while (($#)); do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --rss-limit-mb) rss_limit_mb=$2; shift 2 ;;
    --resume) resume=1; shift ;;
    *) names+=("$1"); shift ;;
  esac
done
if ((${#names[@]} == 0)); then
  mapfile -t names < <(ls tests/fuzz/corpus)
fi
if ! command -v clang > /dev/null; then
  echo "fuzz: clang is missing (tools/setup.sh installs it)" >&2
  exit 1
fi

targets=()
for n in "${names[@]}"; do targets+=("//tests/fuzz:${n}_fuzzer"); done
bazel_fuzz=(bazel --output_base="${VERDICT_FUZZ_OUTPUT_BASE:-/tmp/verdict-fuzz-output-base}")
# No bazel-* links: they would point the checkout's links at this output
# base, and `bazel test //...` would then walk into it.
# civetweb from source, instrumented, so that its request parser guides the
# HTTP targets; without it (no network, say) they fuzz against the system's
# uninstrumented library, as the message says.
civetweb_opts=()
if civetweb_lib=$(tools/fuzz/civetweb.sh); then
  civetweb_opts=(--linkopt=-L"$civetweb_lib")
  echo "fuzz: civetweb instrumented, from $civetweb_lib"
else
  echo "fuzz: civetweb could not be built from source; the HTTP targets link the system's uninstrumented library" >&2
fi
"${bazel_fuzz[@]}" build --config=fuzz --symlink_prefix=/ "${civetweb_opts[@]}" "${targets[@]}"
bin=$("${bazel_fuzz[@]}" info --config=fuzz bazel-bin 2>/dev/null)

status=0
mkdir -p "$out"
for n in "${names[@]}"; do
  work="$out/$n"
  if ((resume)); then
    rm -f "$work/log"
  else
    rm -rf "$work"
  fi
  mkdir -p "$work/corpus"
  cp tests/fuzz/corpus/"$n"/* "$work/corpus/"
  limit=(-max_total_time="$seconds")
  if [[ -n "$runs" ]]; then limit=(-runs="$runs"); fi
  echo "fuzz: $n (${limit[*]})"
  if ! LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp" "$bin/tests/fuzz/${n}_fuzzer" "${limit[@]}" -rss_limit_mb="$rss_limit_mb" -max_len=65536 -seed="$seed" \
       -artifact_prefix="$work/" -print_final_stats=1 "$work/corpus" > "$work/log" 2>&1; then
    echo "fuzz: $n FAILED; the input is in $work/ (log: $work/log)" >&2
    tail -30 "$work/log" >&2
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ *DONE" "$work/log" | tr '\n' ' '
  echo
done
"${bazel_fuzz[@]}" shutdown > /dev/null 2>&1 || true
exit "$status"
