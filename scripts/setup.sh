#!/usr/bin/env bash
# Create .venv and install InferPerf's Python dependencies into it (idempotent).
# torch is pinned to 2.13.0: pip takes the CPU wheel from a local wheel folder
# when pip is configured with one (find-links), otherwise from the index
# (see TORCH_INDEX_URL below).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/root.sh"
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: Python >= 3.11 is required (found $("$python" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$root/.venv/bin/python" ]; then
  if ! "$python" -m venv "$root/.venv" 2>/dev/null; then
    # Debian/Ubuntu ship venv separately (root's step: sudo as a user, see scripts/root.sh).
    if command -v apt-get >/dev/null; then
      echo "setup: $python -m venv failed; installing python3-venv" >&2
      root_run apt-get update -qq && root_run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    "$python" -m venv "$root/.venv"
  fi
fi
"$root/.venv/bin/python" -m pip install -q --upgrade pip >/dev/null
extra=()
# e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu: a CPU-only torch
# instead of PyPI's CUDA build (gigabytes) on machines without a local wheel.
if [ -n "${TORCH_INDEX_URL:-}" ]; then extra=(--extra-index-url "$TORCH_INDEX_URL"); fi
# --runtime-only (the quick start): without the test extra's tools (pytest, mypy, ruff, ...);
# scripts/test.sh's setup adds them to the same venv.
target="$root[test]"
if [ "${1:-}" = "--runtime-only" ]; then target="$root"; fi
"$root/.venv/bin/python" -m pip install -q "${extra[@]}" "$target"
# Each case's own packages (benchmarks/<case>/<framework>/requirements.txt,
# spec §3.2.0), with the torch just installed pinned so none can replace it.
(cd "$root/inference" && PIP_QUIET=1 "$root/.venv/bin/python" -m utils.requirements install)
echo "setup: Python environment ready in $root/.venv"
