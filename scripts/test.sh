#!/usr/bin/env bash
# Set up everything the test suite needs and run it: Debian packages (docker.io,
# openssh-server, debootstrap), the Python environment, dockerd, the local
# base image, and vLLM's and llama.cpp's venvs for the vendor tests; ruff (lint, format) and
# mypy; then the tests (in parallel, then the serial ones) and the 15 slowest.
# Extra arguments go to pytest (both parts).
# Needs root: run as root, or as a user it runs itself again with sudo (scripts/root.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/root.sh"
as_root "${BASH_SOURCE[0]}" "$@"
bash "$root/scripts/install_system_deps.sh"
bash "$root/scripts/start_dockerd.sh"
# The base image (debootstrap, minutes on a fresh machine) builds while setup.sh fills the venv:
# neither needs the other. Its output is shown when it is done, and its failure stops the run.
base_log="$(mktemp)"
bash "$root/scripts/build_base_image.sh" >"$base_log" 2>&1 &
base_pid=$!
# So do the serving vendors' venvs for their end-to-end tests (scripts/vendor_venvs.sh, each reused
# once made): vLLM's CPU build (.venv-vllm, 1-3 min, mostly download) and llama.cpp's (.venv-llamacpp:
# under 1 min where pip's wheel cache holds its build, about 4 min of both cores to compile it first).
vendor_log="$(mktemp)"
bash "$root/scripts/vendor_venvs.sh" vllm llamacpp >"$vendor_log" 2>&1 &
vendor_pid=$!
bash "$root/scripts/setup.sh"
base_status=0
wait "$base_pid" || base_status=$?
cat "$base_log"
rm -f "$base_log"
vendor_status=0
wait "$vendor_pid" || vendor_status=$?
cat "$vendor_log"
rm -f "$vendor_log"
[ "$base_status" = 0 ] || exit "$base_status"
[ "$vendor_status" = 0 ] || exit "$vendor_status"
cd "$root"
# Lint and format first (configured in pyproject.toml): a finding fails the run.
"$root/.venv/bin/ruff" check inference tests bench scripts
"$root/.venv/bin/ruff" format --check inference tests bench scripts
# The type checker on the framework's rooms (pyproject.toml [tool.mypy]: common/, tools/, utils/,
# the engine bases and run.py; the case and vendor plug-ins are read, not reported): no error passes.
"$root/.venv/bin/mypy"
# The tests, in two parts; both always run, and the run fails if either does.
# 1. Everything that tolerates a busy neighbour, on several workers (pytest-xdist):
#    tests of one file share a worker (their module fixtures are built once), and
#    the Slurm tests share one (one session cluster); see tests/conftest.py.
# 2. The tests marked `serial` (they judge whether the machine is quiet: the CPU-hog
#    contention checks), alone afterwards.
# Then the 15 slowest tests of both parts (scripts/slowest.py).
workers="${TEST_WORKERS:-$(($(nproc) < 4 ? 3 : 4))}"
# TEST_REPORTS=DIR keeps the two JUnit reports there (default: a temporary folder, removed).
if [ -n "${TEST_REPORTS:-}" ]; then
    reports="$TEST_REPORTS"
    mkdir -p "$reports"
else
    reports="$(mktemp -d)"
    trap 'rm -rf "$reports"' EXIT
fi
status=0
"$root/.venv/bin/python" -m pytest -n "$workers" --dist loadgroup -m "not serial" --junitxml="$reports/parallel.xml" "$@" || status=$?
serial=0
"$root/.venv/bin/python" -m pytest -m serial --junitxml="$reports/serial.xml" "$@" || serial=$?
"$root/.venv/bin/python" "$root/scripts/slowest.py" -n 15 "$reports"/*.xml
# Exit 5 is pytest's "no tests collected": a selection (-k, a file) may leave one part empty.
[ "$status" = 5 ] && status=0
[ "$serial" = 5 ] && serial=0
[ "$status" != 0 ] && exit "$status"
exit "$serial"
