#!/usr/bin/env bash
# Runs hf_parity_test.py with the test venv, which has the `tokenizers`
# library (tools/setup.sh installs it).
set -euo pipefail
exec /opt/verdict/python/bin/python3 "$@"
