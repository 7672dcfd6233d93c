#!/usr/bin/env bash
# Make sure a local Docker engine answers on unix:///var/run/docker.sock.
#
#  * If `docker info` already works (system service, CI runner, earlier run)
#    it exits 0 immediately.
#  * Otherwise it starts `dockerd --iptables=false --ip6tables=false`
#    detached from this shell (setsid + nohup), logging to
#    /var/log/inferperf-dockerd.log, and waits up to 60 s (override with
#    INFERPERF_DOCKERD_TIMEOUT) for the engine to answer.
#  * If the first start fails (e.g. overlayfs or bridge networking not
#    available in a sandbox) it retries once with
#    `--storage-driver=vfs --bridge=none` (slow but works almost anywhere).
#    InferPerf containers use host networking only, so neither iptables nor
#    the bridge are needed.
#  * Extra dockerd flags can be given with INFERPERF_DOCKERD_ARGS.
# On failure it prints one line starting with "start_dockerd: ERROR" and
# exits 1.  Needs root to start dockerd: as a user it runs itself again with
# sudo (scripts/root.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/root.sh"

SOCK=/var/run/docker.sock
LOG=${INFERPERF_DOCKERD_LOG:-/var/log/inferperf-dockerd.log}
TIMEOUT=${INFERPERF_DOCKERD_TIMEOUT:-60}
PIDFILE=/var/run/docker.pid

engine_ok() {
    # Always probe the *local* engine, whatever DOCKER_HOST/context says.
    DOCKER_HOST="unix://$SOCK" DOCKER_CONTEXT= timeout 10 docker info >/dev/null 2>&1
}

fail() {
    echo "start_dockerd: ERROR: $*" >&2
    exit 1
}

command -v docker >/dev/null 2>&1 || fail "docker CLI not found (run scripts/install_system_deps.sh)"

if engine_ok; then
    echo "start_dockerd: Docker engine already running"
    exit 0
fi

command -v dockerd >/dev/null 2>&1 || fail "dockerd not found (run scripts/install_system_deps.sh)"
as_root "${BASH_SOURCE[0]}" "$@"

dockerd_pid() {
    # PID of a live dockerd recorded in its pidfile, if any.
    local pid
    [ -f "$PIDFILE" ] || return 1
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && \
        grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null && { echo "$pid"; return 0; }
    return 1
}

# Wait until the engine answers or the given dockerd process dies.
# Returns 0 when up, 1 when the process died, 2 on timeout.
wait_for_engine() {
    local pid=$1 deadline=$((SECONDS + TIMEOUT))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if [ -S "$SOCK" ] && engine_ok; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        sleep 0.5
    done
    return 2
}

start_and_wait() {
    local pid rc
    mkdir -p "$(dirname "$LOG")"
    echo "=== $(date -u +%FT%TZ) starting: dockerd $* ===" >>"$LOG"
    # setsid: own session, survives the caller (pytest, CI step) exiting.
    setsid nohup dockerd "$@" </dev/null >>"$LOG" 2>&1 &
    pid=$!
    rc=0
    wait_for_engine "$pid" || rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "start_dockerd: Docker engine started (pid $pid, log $LOG, args: $*)"
        return 0
    fi
    if [ "$rc" -eq 2 ]; then
        # Hung rather than died: do not leave a half-started daemon behind.
        kill "$pid" 2>/dev/null || true
        sleep 2
    fi
    return "$rc"
}

# A dockerd that is still starting up (e.g. started by a parallel test run).
if pid=$(dockerd_pid); then
    echo "start_dockerd: dockerd pid $pid already running, waiting for it"
    if wait_for_engine "$pid"; then
        echo "start_dockerd: Docker engine ready"
        exit 0
    fi
    fail "dockerd (pid $pid) is running but the engine did not answer within ${TIMEOUT}s; see $LOG"
fi

# shellcheck disable=SC2206
EXTRA=(${INFERPERF_DOCKERD_ARGS:-})
BASE_ARGS=(--iptables=false --ip6tables=false)

if start_and_wait "${BASE_ARGS[@]}" "${EXTRA[@]}"; then
    exit 0
fi
echo "start_dockerd: first start failed, retrying with --storage-driver=vfs --bridge=none" >&2
rm -f "$PIDFILE"
if start_and_wait "${BASE_ARGS[@]}" --storage-driver=vfs --bridge=none "${EXTRA[@]}"; then
    exit 0
fi
fail "could not start dockerd (died or no answer within ${TIMEOUT}s), see $LOG; last lines: $(tail -n 3 "$LOG" | tr '\n' ' ')"
