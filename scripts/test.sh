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
# Three jobs run beside setup.sh, none needing another: the base image (debootstrap, minutes on a
# fresh machine) and the serving vendors' venvs for their end-to-end tests (scripts/vendor_venvs.sh,
# each reused once made): vLLM's CPU build (.venv-vllm, 1-3 min, mostly download) and llama.cpp's
# (.venv-llamacpp: under 1 min where pip's wheel cache holds its build, about 4 min of both cores to
# compile it first). Each one's output is shown when it is done, and its failure stops the run.
# Lint and type check need only .venv, so they run while the jobs finish. A run that stops early
# stops the jobs too.
jobs_dir="$(mktemp -d)"
job_pids=()
job_names=()
kill_tree() {  # a job and every process under it (pip, cmake, debootstrap)
    local child
    for child in $(pgrep -P "$1" || true); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
stop_jobs() {
    for pid in "${job_pids[@]}"; do kill_tree "$pid"; done
    rm -rf "$jobs_dir"
}
trap stop_jobs EXIT
job() {  # job NAME COMMAND...: run in the background, its output in $jobs_dir/NAME.log
    local name="$1"
    shift
    "$@" >"$jobs_dir/$name.log" 2>&1 &
    job_pids+=("$!")
    job_names+=("$name")
}
job base bash "$root/scripts/build_base_image.sh"
job vllm bash "$root/scripts/vendor_venvs.sh" vllm
job llamacpp bash "$root/scripts/vendor_venvs.sh" llamacpp
bash "$root/scripts/setup.sh"
cd "$root"
# Lint and format first (configured in pyproject.toml): a finding fails the run.
"$root/.venv/bin/ruff" check inference tests bench scripts
"$root/.venv/bin/ruff" format --check inference tests bench scripts
# The type checker on the framework's rooms (pyproject.toml [tool.mypy]: common/, tools/, utils/,
# the engine bases and run.py; the case and vendor plug-ins are read, not reported): no error passes.
"$root/.venv/bin/mypy"
failed=0
for i in "${!job_pids[@]}"; do
    job_status=0
    wait "${job_pids[$i]}" || job_status=$?
    cat "$jobs_dir/${job_names[$i]}.log"
    [ "$job_status" = 0 ] || failed="$job_status"
done
job_pids=()
rm -rf "$jobs_dir"
[ "$failed" = 0 ] || exit "$failed"
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
