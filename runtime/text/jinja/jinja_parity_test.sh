#!/usr/bin/env bash
# Runs jinja_parity_test.py with the Python environment tools/setup.sh
# makes (it holds jinja2).
set -euo pipefail
python=/opt/verdict/python/bin/python3
if ! "$python" -c "import jinja2" 2>/dev/null; then
  echo "jinja_parity_test: $python with the jinja2 package is missing; run tools/setup.sh" >&2
  exit 1
fi
exec "$python" "$@"
