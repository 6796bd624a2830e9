#!/usr/bin/env bash
# Runs on the GPU machine inside a bundle (tools/device/bundle.sh): planned
# drafting (the default server) against the same server drafting every
# request gamma tokens each step, in static and compact mode, and against
# speculation off, on one cost table, c1 to c512, in interleaved repeats
# (docs/PERF.md, "The sweep: the default against always-drafting static and
# compact, and speculation off").
#
#   tools/device/drafting_sweeps.sh SET [OUT_DIR]
#
# SET as gpu_sweeps.sh: bundled, 8b-1b-0.6 or 8b-1b-0.8.
# The table: TABLE if set, else this GPU's bundled table for the set
# (deploy/cost_tables/<h100|h200>-<pair>-tp<TP>-split.json), else one that
# `verdict profile` measures first into OUT_DIR/table.json (about a minute),
# which then belongs in deploy/cost_tables under that name. The
# always-drafting configurations run on the same table with its draft split
# taken out (draft_passes, draft_pass_seconds, one_pass_draft_seconds): a
# table without the split makes every request draft its cap, as before the
# draft planner.
# Environment: CONCURRENCY (default 1,4,16,64,128,256,512), MAX_TOKENS
# (default 64), REPEATS (default 2), CONFIG_SET=small (default,
# static-always and off; without it compact and compact-always too), TP,
# BUNDLE, EXTRA_SERVER_ARGS as gpu_sweeps.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
set_name=${1:?usage: drafting_sweeps.sh SET [OUT_DIR]}
out=${2:-${OUT:-/tmp}/drafting-$set_name}
bundle=${BUNDLE:-.bundle}
tp=${TP:-1}
verdict="$bundle/bin/runtime/cli/verdict"
mkdir -p "$out"

case "$set_name" in
  bundled)
    pair=bundled-pair
    model_args=()
    profile_args=(--kv-cache-tokens=131072 --profile-batch-sizes=1,8,32,128,256,512)
    ;;
  8b-1b-*)
    pair=llama-3.1-8b-draft-llama-3.2-1b
    # The profile's steps draft and verify whatever the acceptance: the
    # simulated rate is the sweep's (gpu_sweeps.sh), not the table's.
    model_args=(--model=builtin:llama-3.1-8b --draft=builtin:llama-3.2-1b --load-format=dummy
                --max-model-len=4096)
    profile_args=(--kv-cache-tokens=196608 --profile-batch-sizes=1,8,32,128,256,512)
    ;;
  *) echo "drafting_sweeps: unknown set '$set_name'" >&2; exit 2 ;;
esac

table=${TABLE:-}
if [[ -z "$table" ]]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  case "$gpu" in
    *H100*) gpu=h100 ;;
    *H200*) gpu=h200 ;;
    *) gpu=unknown ;;
  esac
  table="deploy/cost_tables/$gpu-$pair-tp$tp-split.json"
  if [[ ! -f "$table" ]]; then
    table="$out/table.json"
    echo "drafting_sweeps: no bundled table for $gpu, measuring $table" >&2
    "$verdict" profile --backend=cuda --max-running-requests=512 "${model_args[@]}" \
      "${profile_args[@]}" --profile-fractions=0,0.5,1 --profile-repeats=5 \
      --profile-out="$table" >"$out/profile.log" 2>&1
  fi
fi
always="$out/$(basename "$table" .json)-always-drafting.json"
python3 - "$table" "$always" <<'EOF'
import json, sys
table = json.load(open(sys.argv[1]))
for key in ("draft_passes", "draft_pass_seconds", "one_pass_draft_seconds"):
    table.pop(key, None)
json.dump(table, open(sys.argv[2], "w"), indent=1)
EOF
echo "drafting_sweeps: table $table" >&2

configs="default=--cost-table=$table"
configs+=";static-always=--verify-mode=static --cost-table=$always"
if [[ "${CONFIG_SET:-all}" != small ]]; then
  configs+=";compact=--verify-mode=compact --cost-table=$table"
  configs+=";compact-always=--verify-mode=compact --cost-table=$always"
fi
configs+=";off=--speculation=off"

CONFIGS="$configs" BASELINE=0 OVERLAP=on TP="$tp" BUNDLE="$bundle" \
  CONCURRENCY="${CONCURRENCY:-1,4,16,64,128,256,512}" MAX_TOKENS="${MAX_TOKENS:-64}" \
  REPEATS="${REPEATS:-2}" \
  EXTRA_SERVER_ARGS="--max-connections-per-client=0 ${EXTRA_SERVER_ARGS:-}" \
  REFERENCE=default \
  tools/device/gpu_sweeps.sh "$set_name" "$out/sweep"
