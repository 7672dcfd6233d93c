#!/usr/bin/env bash
# Install the Debian packages InferPerf's real infrastructure needs:
#   docker.io (engine + CLI), openssh-server/-client (test hosts, remote
#   targets), debootstrap (builds the base image without a registry),
#   procps, iproute2, chromium (tests/test_report.py renders report.html headless),
#   slurm-wlm + munge (MODE slurm; tests/infra/slurm.py starts its own munged,
#   slurmctld and slurmd, never the distro services), postgresql (the results
#   history's PostgreSQL backend; tests/infra/postgres.py runs its own initdb and
#   postgres from /usr/lib/postgresql/*/bin, never the distro's cluster service).
# Idempotent: when every package is already installed it does nothing, so
# re-running it is instant.  Needs root to install: as a user it runs itself
# again with sudo (scripts/root.sh).
# It never relies on (and tries to prevent) distro services being started by
# package postinst scripts: dockerd is started by scripts/start_dockerd.sh,
# test sshd instances by tests/infra/sshd.py and test PostgreSQL servers by
# tests/infra/postgres.py.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/root.sh"

PACKAGES=(docker.io openssh-server openssh-client debootstrap procps iproute2
          debian-archive-keyring ca-certificates chromium
          slurm-wlm munge postgresql)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg -s "$pkg" >/dev/null 2>&1; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install_system_deps: all packages already installed (${PACKAGES[*]})"
    exit 0
fi

as_root "${BASH_SOURCE[0]}" "$@"

# Keep postinst scripts from starting services (sshd on :22, dockerd with
# its default iptables setup).  Only installed when no policy exists yet and
# always removed again afterwards.
POLICY=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    if [ "$created_policy" -eq 1 ]; then
        rm -f "$POLICY"
    fi
}
trap cleanup EXIT
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$POLICY"
    chmod 755 "$POLICY"
    created_policy=1
fi

echo "install_system_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q \
    --no-install-recommends "${PACKAGES[@]}"

# sshd refuses to start without its privilege-separation directory.
mkdir -p /run/sshd
chmod 0755 /run/sshd

echo "install_system_deps: done"
