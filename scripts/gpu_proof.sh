#!/usr/bin/env bash
# The GPU proof (docs/gpu_proof.md): every nvidia path once on one GPU, in at most 8 minutes,
# its tables under $OUT. `--dry-run` resolves every step on any machine and runs none.
#   bash scripts/gpu_proof.sh --dry-run
#   OUT=/some/dir bash scripts/gpu_proof.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
if ! command -v "$python" >/dev/null 2>&1; then
  echo "gpu_proof: ERROR: no Python interpreter '$python' (set PYTHON)" >&2
  exit 2
fi
# Wheels carried to a machine without network (.whl/, git-ignored) go into a private folder on PYTHONPATH.
if [ -d "$root/.whl" ] && compgen -G "$root/.whl/*.whl" >/dev/null; then
  site="${TMPDIR:-/tmp}/gpu_proof_site"
  if [ ! -d "$site" ]; then
    "$python" -m pip install --quiet --no-index --no-deps --target "$site" "$root"/.whl/*.whl
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "$python" "$root/scripts/gpu_proof.py" "$@"
