#!/usr/bin/env bash
# Runs prometheus_e2e_test.py; needs Debian's prometheus (server and
# promtool) and Open MPI, which tools/setup.sh installs.
set -euo pipefail
for tool in prometheus promtool mpirun python3; do
  if ! command -v "$tool" > /dev/null; then
    echo "prometheus_e2e_test: $tool is missing; run tools/setup.sh" >&2
    exit 1
  fi
done
exec python3 "$@"
