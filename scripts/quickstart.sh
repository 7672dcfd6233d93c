#!/usr/bin/env bash
# Set up and run the default benchmark (configs/host.yaml: MODE local, vendor cpu).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" --runtime-only
PYTHON="$root/.venv/bin/python" bash "$root/scripts/prepare_data.sh"
cd "$root/inference"
exec "$root/.venv/bin/python" run.py "$@"
