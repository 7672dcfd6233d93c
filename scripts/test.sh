#!/usr/bin/env bash
# Set up everything the test suite needs and run it: Debian packages (docker.io,
# openssh-server, debootstrap), the Python environment, dockerd, and the local
# base image; ruff (lint, format); then the tests. Extra arguments go to pytest.
# Needs root: run as root, or as a user it runs itself again with sudo (scripts/root.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/root.sh"
as_root "${BASH_SOURCE[0]}" "$@"
bash "$root/scripts/install_system_deps.sh"
bash "$root/scripts/setup.sh"
bash "$root/scripts/start_dockerd.sh"
bash "$root/scripts/build_base_image.sh"
cd "$root"
# Lint and format first (configured in pyproject.toml): a finding fails the run.
"$root/.venv/bin/ruff" check inference tests bench
"$root/.venv/bin/ruff" format --check inference tests bench
exec "$root/.venv/bin/python" -m pytest "$@"
