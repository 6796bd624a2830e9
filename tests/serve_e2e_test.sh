#!/usr/bin/env bash
# Runs serve_e2e_test.py with the Python environment tools/setup.sh makes
# (it holds the official openai client).
set -euo pipefail
python=/opt/verdict/python/bin/python3
if ! "$python" -c "import openai" 2>/dev/null; then
  echo "serve_e2e_test: $python with the openai package is missing; run tools/setup.sh" >&2
  exit 1
fi
exec "$python" "$@"
