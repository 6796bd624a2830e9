#!/usr/bin/env bash
# Runs a Python test with the environment tools/setup.sh makes (gguf,
# ml_dtypes, safetensors and tokenizers for the GGUF converter).
set -euo pipefail
python=/opt/verdict/python/bin/python3
if ! "$python" -c "import gguf, ml_dtypes, safetensors, tokenizers" 2>/dev/null; then
  echo "$0: $python lacks gguf, ml_dtypes, safetensors or tokenizers; run tools/setup.sh" >&2
  exit 1
fi
exec "$python" "$@"
