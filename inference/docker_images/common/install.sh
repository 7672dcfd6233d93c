#!/bin/sh
# InferPerf's shared image-build step: the pip install that its own Dockerfiles (docker_images/<vendor>/
# <framework>/) share. utils/executors/images.py adds this folder to every image's build context as
# common/ (a vendor folder with its own common/ keeps it) and covers it in the image's tag, so editing
# it rebuilds every image. A vendor's Dockerfile need not use it: FlagPerf's contract stays one file,
# docker_images/VENDOR/FRAMEWORK/Dockerfile (COPY . copies the extra folder along, nothing more).
#
# Build context (what utils/executors/images.py sends):
#   Dockerfile, requirements.txt  the image folder's own files
#   common/install.sh             this script
#   wheels/                       optional: local wheels, used with --find-links; for "venv" it must hold
#                                 torch-2.13.0+cpu-*.whl unless the index (e.g. PIP_EXTRA_INDEX_URL=
#                                 https://download.pytorch.org/whl/cpu) serves it
#   ca-certificates.crt           optional: CA bundle pip uses (PIP_CERT) to reach the index, e.g. the
#                                 host's /etc/ssl/certs/ca-certificates.crt
# Build args the Dockerfile declares (ARG) and this script reads from the environment: PIP_INDEX_URL
# (default PyPI), PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST, PIP_NO_INDEX (1 = offline, wheels/ only) and,
# for "venv", TORCH_REQUIREMENT (torch==2.13.0+cpu: "+cpu" on purpose, a plain torch==2.13.0 may
# resolve to the CUDA build on PyPI and download gigabytes of nvidia-* wheels). Build args are visible
# in `docker history`: no credentials in index URLs. Build with host networking (network_mode="host"):
# the engine runs with --iptables=false, so the default bridge has no outside access. No heredocs in
# the Dockerfiles: the Docker SDK's legacy builder does not support them.
#
# Usage, after `COPY . /tmp/ctx` (the Dockerfile removes /tmp/ctx and /root/.cache after its own check):
#   sh /tmp/ctx/common/install.sh venv [ARG...]
#       python3 -m venv /opt/venv (bookworm's system Python is "externally managed", PEP 668), then
#       pip install ${TORCH_REQUIREMENT} -r requirements.txt [ARG...] into it. .pyc files are kept on
#       purpose: containers are throwaway, so without them every run would recompile torch on import.
#       Multi-stage Dockerfiles run it in their builder stage: the legacy builder has no RUN --mount,
#       and a COPY of the context would keep the ~200 MB torch wheel in a layer forever.
#   sh /tmp/ctx/common/install.sh download REQUIREMENT DIR
#       pip download the source distribution of REQUIREMENT (no dependencies) into DIR, with the same
#       index, cert and wheels/ as the installs: for an image that needs the source itself as well
#       (cpu/llamacpp: llama.cpp's GGUF converter ships only in llama-cpp-python's sdist).
#   sh /tmp/ctx/common/install.sh system REGEX
#       pip install -r requirements.txt into the base image's own Python (PIP_BREAK_SYSTEM_PACKAGES:
#       NGC's and vLLM's images install into the system Python, which PEP 668 protects), with the base
#       image's packages whose `pip list --format=freeze` line matches REGEX pinned as constraints, so
#       no dependency resolution can replace its CUDA build of torch (or vLLM) with a PyPI wheel.
set -eu
ctx=/tmp/ctx
[ -n "${PIP_EXTRA_INDEX_URL:-}" ] || unset PIP_EXTRA_INDEX_URL
[ -n "${PIP_TRUSTED_HOST:-}" ] || unset PIP_TRUSTED_HOST
[ -n "${PIP_NO_INDEX:-}" ] || unset PIP_NO_INDEX
if [ -f $ctx/ca-certificates.crt ]; then export PIP_CERT=$ctx/ca-certificates.crt; fi
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
links=
if [ -d $ctx/wheels ]; then links="--find-links $ctx/wheels"; fi
mode=${1:?usage: install.sh venv [ARG...] | download REQUIREMENT DIR | system REGEX}
shift
case "$mode" in
venv)
    python3 -m venv /opt/venv
    # shellcheck disable=SC2086 # $links is empty or two words
    /opt/venv/bin/pip install --no-cache-dir $links "${TORCH_REQUIREMENT}" -r $ctx/requirements.txt "$@" \
    || { echo "inferperf: pip install failed. torch must come from a CPU wheel in the" \
              "build context's wheels/ (e.g. torch-2.13.0+cpu-cp311-*.whl) or from" \
              "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu; behind a" \
              "TLS-intercepting proxy put the host CA bundle in the context as" \
              "ca-certificates.crt; offline: all wheels in wheels/ and PIP_NO_INDEX=1." >&2; \
         exit 1; }
    ;;
download)
    # shellcheck disable=SC2086 # $links is empty or two words
    # --no-binary names the project alone: with :all: pip would build REQUIREMENT's build tools from source too
    python3 -m pip download --no-deps --no-binary "${1%%[=<>!~ []*}" $links -d "${2:?install.sh download: name the DIR}" "$1"
    ;;
system)
    export PIP_BREAK_SYSTEM_PACKAGES=1
    python3 -m pip list --format=freeze | grep -iE "${1:?install.sh system: name the REGEX of the base image's pins}" \
        > $ctx/constraints.txt || true
    python3 -m pip install --no-cache-dir -c $ctx/constraints.txt -r $ctx/requirements.txt
    ;;
*)
    echo "inferperf: install.sh: unknown mode '$mode' (venv, download or system)" >&2
    exit 2
    ;;
esac
