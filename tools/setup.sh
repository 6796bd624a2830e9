#!/usr/bin/env bash
# Installs every Debian package that building and testing verdict needs.
# Idempotent and non-interactive: packages already present are skipped.
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
if ! "$venv/bin/python3" -c "import openai, matplotlib, tokenizers, jinja2
assert openai.__version__ == \"3.57.0\" and matplotlib.__version__ == \"3.11.2\"
assert tokenizers.__version__ == \"0.23.3\" and jinja2.__version__ == \"3.1.6\"" 2>/dev/null; then
  echo "setup: creating $venv with the openai client, matplotlib, tokenizers and jinja2"
  "${sudo_cmd[@]}" mkdir -p "$(dirname "$venv")"
  "${sudo_cmd[@]}" /usr/bin/python3 -m venv "$venv"
  "${sudo_cmd[@]}" "$venv/bin/pip" install -q --disable-pip-version-check \
    "openai==3.57.0" "matplotlib==3.11.2" "tokenizers==0.23.3" "jinja2==3.1.6"
fi

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: CUDA 13 is missing at /usr/local/cuda (nvcc, cudart, cuBLAS, NCCL)" >&2
  exit 1
fi
