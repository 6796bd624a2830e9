#!/usr/bin/env bash
# Checks the mpirun command line that deploy/launch.sh builds.
set -euo pipefail
launch="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$launch" --tp 4 --binary /opt/verdict --dry-run -- --model /m --port 9000)
[[ "$out" == "mpirun -np 4 --bind-to none "* ]] || fail "unexpected prefix: $out"
[[ "$out" == *"-x NCCL_NVLS_ENABLE"* ]] || fail "NCCL_NVLS_ENABLE not exported: $out"
[[ "$out" == *"/opt/verdict serve --tp 4 --model /m --port 9000"* ]] || fail "bad tail: $out"

out=$("$launch" --tp 8 --hostfile hosts.txt --binary v --dry-run)
[[ "$out" == *"--hostfile hosts.txt --map-by slot"* ]] || fail "hostfile not passed: $out"

if "$launch" --tp 0 --dry-run 2>/dev/null; then fail "--tp 0 accepted"; fi
if "$launch" --bogus --dry-run 2>/dev/null; then fail "unknown option accepted"; fi
echo PASS
