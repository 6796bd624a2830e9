#!/usr/bin/env bash
# Runs a Python test of the benchmark tools with the environment
# tools/setup.sh makes (it holds matplotlib, for the chart), or with the
# system Python 3, which lacks it.
set -euo pipefail
python=/opt/verdict/python/bin/python3
[[ -x $python ]] || python=python3
exec "$python" "$@"
