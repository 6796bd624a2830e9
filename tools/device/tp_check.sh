#!/usr/bin/env bash
# Runs on a GPU machine with at least TP GPUs, inside a bundle
# (tools/device/bundle.sh, with Open MPI): the CUDA backend across
# tensor-parallel ranks over NCCL.
#
#   tools/device/tp_check.sh [TP]
#
#  0. The communicators' own tests over TP ranks (NCCL, the one-shot NVLink
#     all-reduce), and their latency side by side.
#  1. Greedy tokens: TP ranks, speculative in every verify mode with overlap
#     off and on (all-reduces one-shot by default; and compact with a whole
#     draft per rank, --draft-tp=1, and with NCCL's all-reduce),
#     against one rank's autoregressive output, on several prompts of the
#     bundled pair.
#  2. A killed rank: `verdict serve` under mpirun, rank 1 gets SIGKILL once
#     the server is ready; the job must end, with a message, within seconds.
# Prints one line per check and exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
tp=${1:-2}
bundle=${BUNDLE:-.bundle}
source "$bundle/env.sh"
verdict="$bundle/bin/runtime/cli/verdict"
session=$(mktemp -d /tmp/verdict_tp.XXXXXX)
mpirun=(mpirun -np "$tp" --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader
        --mca btl_vader_single_copy_mechanism none -x NCCL_NVLS_ENABLE=0 -x LD_LIBRARY_PATH)
failures=0

ids() {  # the completion's token ids from a `verdict generate` run
  "$@" --print-token-ids 2>&1 | sed -n 's/^completion_token_ids=//p' | tail -1
}

# The communicators themselves, one rank per GPU: NCCL (sums, gathers,
# broadcasts, a captured all-reduce, a peer that never arrives) and the
# one-shot NVLink all-reduce (bit for bit against its CPU twin, graphs).
for test in nccl_communicator_tp_gpu_test nvlink_all_reduce_gpu_test; do
  log_file="${OUT:-/tmp}/tp_check_$test.log"
  # A bounded run: a collective that never completes must fail, not hang.
  if TMPDIR=$session timeout 180 "${mpirun[@]}" "$bundle/bin/comm/$test" --gtest_color=no \
      >"$log_file" 2>&1; then
    echo "PASS $test tp$tp: $(grep -c '^\[       OK' "$log_file") test results OK over $tp ranks"
  else
    echo "FAIL $test tp$tp (log: $(basename "$log_file"))"
    grep -E "Failure|FAILED|error" "$log_file" | head -8 | sed 's/^/  /'
    failures=$((failures + 1))
  fi
done
# Their latency side by side (not a check): NCCL against the one-shot.
if [[ -x "$bundle/bin/comm/all_reduce_benchmark" ]]; then
  TMPDIR=$session timeout 180 "${mpirun[@]}" "$bundle/bin/comm/all_reduce_benchmark" \
    --out="${OUT:-/tmp}/all_reduce_tp$tp.md" 2>&1 | tail -10
fi

prompts=("Once upon a time" "The capital of France is" "def fibonacci(n):"
         "Speculative decoding verifies several draft tokens")
prompts=("${prompts[@]:0:${PROMPTS:-${#prompts[@]}}}")  # PROMPTS=N: the first N
for prompt in "${prompts[@]}"; do
  common=(generate --backend=cuda --temperature=0 --max-tokens=64 "--prompt=$prompt")
  reference=$(ids "$verdict" "${common[@]}" --speculation=off)
  # Every mode with overlap off and on, the draft sharded and the default
  # all-reduce (one-shot on one host); then a whole draft on every rank
  # (--draft-tp=1), and NCCL's all-reduce (--one-shot-all-reduce=off).
  configs=()
  for mode in static cap-accept compact; do
    for overlap in off on; do configs+=("$mode $overlap 0 auto"); done
  done
  configs+=("compact on 1 auto" "compact on 0 off")
  for config in "${configs[@]}"; do
    read -r mode overlap draft_tp one_shot <<<"$config"
    name="$mode overlap-$overlap$([[ $draft_tp == 1 ]] && echo ' draft-tp-1')"
    name+="$([[ $one_shot == off ]] && echo ' nccl-all-reduce')"
    run=$(TMPDIR=$session timeout 300 "${mpirun[@]}" "$verdict" "${common[@]}" --tp="$tp" \
      --verify-mode="$mode" --overlap="$overlap" --draft-tp="$draft_tp" \
      --one-shot-all-reduce="$one_shot" --plan-check-interval=1 --print-token-ids 2>&1)
    got=$(sed -n 's/^completion_token_ids=//p' <<<"$run" | tail -1)
    # Passes replayed from graphs, target/draft: at TP > 1 the collectives
    # are captured too, so the target must replay some.
    replays=$(grep -o 'graph_replays=[0-9]*/[0-9]*' <<<"$run" | tail -1)
    replays=${replays#graph_replays=}
    # Unless NCCL's was asked for, the models must have used the one-shot
    # all-reduce (every rank is on this host, over NVLink).
    one_shots=$(grep -o 'one_shot_all_reduces=[0-9]*' <<<"$run" | tail -1)
    one_shots=${one_shots#one_shot_all_reduces=}
    used=1
    [[ $one_shot != off && ! "${one_shots:-0}" -gt 0 ]] && used=0
    [[ $one_shot == off && "${one_shots:-0}" != 0 ]] && used=0
    if [[ -n "$reference" && "$got" == "$reference" && "${replays%%/*}" -gt 0 && $used == 1 ]]; then
      echo "PASS greedy tp$tp $name: '$prompt' ($(tr ',' '\n' <<<"$got" | wc -l) tokens = tp1 autoregressive; graph replays $replays; one-shot all-reduces ${one_shots:-0})"
    else
      echo "FAIL greedy tp$tp $name: '$prompt'"
      echo "  tp1 autoregressive: $reference"
      echo "  tp$tp speculative:  $got"
      echo "  graph replays (target/draft): ${replays:-none reported}; one-shot all-reduces: ${one_shots:-none reported}"
      failures=$((failures + 1))
    fi
  done
done

# A killed rank.
port=18431
log="${OUT:-/tmp}/tp_check_dead_rank.log"
TMPDIR=$session "${mpirun[@]}" "$verdict" serve --backend=cuda --tp="$tp" --port=$port \
  --metrics-port=0 >"$log" 2>&1 &
job=$!
for _ in $(seq 1 240); do
  curl -sf "localhost:$port/ready" >/dev/null 2>&1 && break
  sleep 0.5
done
ranks=$(pgrep -P "$job" -f "runtime/cli/verdict serve" | sort -n)
victim=$(sed -n 2p <<<"$ranks")
start=$(date +%s%N)
kill -9 "$victim"
timeout 60 tail --pid="$job" -f /dev/null
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
if kill -0 "$job" 2>/dev/null; then
  echo "FAIL dead rank tp$tp: the job still runs 60 s after SIGKILL of rank pid $victim"
  kill -9 "$job"; failures=$((failures + 1))
else
  wait "$job"; code=$?
  echo "PASS dead rank tp$tp: mpirun exited $code ${elapsed_ms} ms after SIGKILL of pid $victim"
  grep -iE "exited on signal|abort|error" "$log" | head -3 | sed 's/^/  /'
fi
rm -rf "$session"
echo "tp_check: $failures failures"
((failures == 0))
