# Sourced by the scripts that need root (apt-get, dockerd, debootstrap); not run on its own.
#
# As root (a container, a CI runner, a minimal image without sudo): nothing changes.
# As a user: the step runs under sudo when sudo is installed. Neither: one line, exit 1.
#
#   as_root "${BASH_SOURCE[0]}" "$@"   # run this whole script again as root (exec), or go on
#   root_run apt-get install -y ...     # run one command as root
#
# sudo resets the environment; the settings these scripts and pytest read are
# passed on (TORCH_INDEX_URL, PYTHON, CI, PIP_*, DEBIAN_*, INFERPERF_*, PYTEST_*,
# FORCE_REBUILD, proxies), through `env` so that no sudoers SETENV right is needed.

_root_env() {
    local name
    _ROOT_ENV=()
    for name in $(compgen -e); do
        case "$name" in
            TORCH_INDEX_URL | PYTHON | CI | FORCE_REBUILD | PIP_* | DEBIAN_* | INFERPERF_* | PYTEST_* | \
                http_proxy | https_proxy | no_proxy | HTTP_PROXY | HTTPS_PROXY | NO_PROXY)
                _ROOT_ENV+=("$name=${!name}")
                ;;
        esac
    done
}

_root_sudo_or_fail() {
    if ! command -v sudo >/dev/null 2>&1; then
        echo "$1: ERROR: needs root: run it as root (there is no sudo here to ask)" >&2
        exit 1
    fi
    _root_env
}

as_root() {
    local script=$1
    shift
    [ "$(id -u)" -eq 0 ] && return 0
    _root_sudo_or_fail "$(basename "$script")"
    echo "$(basename "$script"): not root; running it again with sudo" >&2
    exec sudo env "${_ROOT_ENV[@]}" bash "$script" "$@"
}

root_run() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
        return
    fi
    _root_sudo_or_fail "$(basename "$0")"
    sudo env "${_ROOT_ENV[@]}" "$@"
}
