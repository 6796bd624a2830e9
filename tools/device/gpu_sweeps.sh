#!/usr/bin/env bash
# Runs on the GPU machine inside a bundle (tools/device/bundle.sh): the load
# sweeps of docs/PERF.md on the CUDA backend, through tools/bench/sweep.py.
#
#   tools/device/gpu_sweeps.sh SET [OUT_DIR]
#
# SET picks the models and the sweep:
#   bundled      the bundled pair (real weights), every mode + speculation off
#   8b-1b-0.8    Llama-3.1-8B / Llama-3.2-1B shapes, dummy weights,
#   8b-1b-0.6    simulated acceptance 0.8 or 0.6, every mode + speculation off
# Environment: TP (default 1), OVERLAP (default "off,on"), CONCURRENCY
# (default 1,4,16,64), MAX_TOKENS (default 256), MODES (default all three),
# BASELINE=0 (leave out speculation off), TEMPERATURE (default 0), REPEATS
# (default 1: interleaved rounds of every configuration, see sweep.py),
# REFERENCE (a configuration to compare with the best of the others),
# EXTRA_SERVER_ARGS (e.g. a cost table), CONFIGS (flag sets to compare
# instead of MODES, ';'-separated NAME=FLAGS, e.g.
# "nccl=--verify-mode=static;one-shot=--verify-mode=static --one-shot-all-reduce=on").
set -euo pipefail
cd "$(dirname "$0")/../.."
set_name=${1:?usage: gpu_sweeps.sh SET [OUT_DIR]}
out=${2:-${OUT:-/tmp}/sweep-$set_name}
bundle=${BUNDLE:-.bundle}
source "$bundle/env.sh"

concurrency=${CONCURRENCY:-1,4,16,64}
# Every client of the largest point decodes at once (the engine's default
# runs 64 and queues the rest).
max_clients=$(tr ',' '\n' <<<"$concurrency" | sort -n | tail -1)
server_args="--backend=cuda --max-running-requests=$((max_clients > 64 ? max_clients : 64))"
case "$set_name" in
  bundled) ;;
  8b-1b-*)
    rate=${set_name#8b-1b-}
    server_args+=" --model=builtin:llama-3.1-8b --draft=builtin:llama-3.2-1b"
    server_args+=" --load-format=dummy --simulate-acceptance=$rate --max-model-len=4096"
    ;;
  *) echo "gpu_sweeps: unknown set '$set_name'" >&2; exit 2 ;;
esac

configs=()
if [[ -n "${CONFIGS:-}" ]]; then
  IFS=';' read -ra entries <<<"$CONFIGS"
  for entry in "${entries[@]}"; do configs+=(--config "$entry"); done
fi

python3 tools/bench/sweep.py --verdict "$bundle/bin/runtime/cli/verdict" "${configs[@]}" \
  --tp "${TP:-1}" --overlap "${OVERLAP:-off,on}" --modes "${MODES:-static,cap-accept,compact}" \
  --concurrency "$concurrency" --max-tokens "${MAX_TOKENS:-256}" \
  --temperature "${TEMPERATURE:-0}" --repeats "${REPEATS:-1}" --server-args "$server_args ${EXTRA_SERVER_ARGS:-}" --no-plot \
  $([[ "${BASELINE:-1}" == 0 ]] && echo --no-baseline) \
  $([[ -n "${REFERENCE:-}" ]] && echo --reference "$REFERENCE") \
  --out "$out"
