#!/usr/bin/env bash
# Build the InferPerf base image WITHOUT any image registry:
#   debootstrap a minimal Debian bookworm (python3, venv, pip, CA certs)
#   into a temp dir, then `tar | docker import` it.
#
# Usage: scripts/build_base_image.sh [IMAGE_NAME]
#   IMAGE_NAME defaults to inferperf/debian-python:bookworm.
# Environment:
#   DEBIAN_MIRROR   Debian mirror (default http://deb.debian.org/debian;
#                   point it at a local mirror when air-gapped)
#   DEBIAN_SUITE    default bookworm
#   FORCE_REBUILD=1 rebuild even if the image exists
# Idempotent: exits 0 immediately when the image already exists.
# Needs debootstrap and a running Docker engine (scripts/install_system_deps.sh,
# scripts/start_dockerd.sh), and root to build: as a user it runs itself again
# with sudo (scripts/root.sh).  ~1 minute.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/root.sh"

IMAGE=${1:-inferperf/debian-python:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${DEBIAN_SUITE:-bookworm}
INCLUDE=python3,python3-venv,python3-pip,ca-certificates

fail() {
    echo "build_base_image: ERROR: $*" >&2
    exit 1
}

command -v docker >/dev/null 2>&1 || fail "docker CLI not found (run scripts/install_system_deps.sh)"
if [ "${FORCE_REBUILD:-0}" != "1" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "build_base_image: image $IMAGE already exists"
    exit 0
fi
as_root "${BASH_SOURCE[0]}" "$@"
docker info >/dev/null 2>&1 || fail "Docker engine not reachable (run scripts/start_dockerd.sh)"

command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || \
    fail "debootstrap not found (run scripts/install_system_deps.sh)"
export PATH="$PATH:/usr/sbin:/sbin"

ROOTFS=$(mktemp -d /tmp/inferperf-rootfs.XXXXXX)
cleanup() {
    # debootstrap may leave /proc etc. mounted inside the target on failure.
    for m in proc sys dev/pts dev; do
        umount -l "$ROOTFS/$m" 2>/dev/null || true
    done
    rm -rf --one-file-system "$ROOTFS"
}
trap cleanup EXIT

start=$SECONDS
echo "build_base_image: debootstrap $SUITE from $MIRROR into $ROOTFS"
if ! debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$ROOTFS" "$MIRROR" \
        >"$ROOTFS.log" 2>&1; then
    tail -n 20 "$ROOTFS.log" >&2
    rm -f "$ROOTFS.log"
    fail "debootstrap failed"
fi
rm -f "$ROOTFS.log"

# Trim what a container never needs (apt lists and caches).
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*

echo "build_base_image: importing into docker as $IMAGE"
tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$IMAGE" >/dev/null
docker run --rm --network host "$IMAGE" python3 --version >/dev/null || \
    fail "imported image $IMAGE cannot run python3"
echo "build_base_image: built $IMAGE in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
