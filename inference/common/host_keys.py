"""host.yaml's keys, defined once for both sides.

The host side maps each to a field of ``utils/host_config.py::HostConfig`` (None:
accepted from FlagPerf's files and ignored); the container side
(``contract/config/``) refuses them in case configs.
"""

from __future__ import annotations

KEY_FIELDS: dict[str, str | None] = {
    "MODE": "mode",
    "FLAGPERF_PATH": "flagperf_path",
    "FLAGPERF_LOG_PATH": "log_path",
    "VENDOR": "vendor",
    "FLAGPERF_LOG_LEVEL": "log_level",
    "SSH_PORT": "ssh_port",
    "HOSTS": "hosts",
    "CASES": "cases",
    "SHM_SIZE": "shm_size",
    "ACCE_CONTAINER_OPT": "container_opt",
    "PIP_SOURCE": "pip_source",
    "CLEAR_CACHES": "clear_caches",
    "ACCE_VISIBLE_DEVICE_ENV_NAME": "visible_device_env",
    "SSH_USER": "ssh_user",
    "SSH_KEY_FILE": "ssh_key_file",
    "TRUST_ON_FIRST_USE": "trust_on_first_use",
    "KNOWN_HOSTS": "known_hosts",
    "CASE_TIMEOUT": "case_timeout",
    "MONITOR_INTERVAL": "monitor_interval",
    "BASE_IMAGE": "base_image",
    "PIP_WHEELS_DIR": "pip_wheels_dir",
    "CA_BUNDLE": "ca_bundle",
    "REMOTE_WORKDIR": "remote_workdir",
    "LOG_CALL_INFORMATION": "log_call_information",
    "DOCKER_LOCAL": "docker_local",
    "BACKEND_REQUIREMENTS": "backend_requirements",
    "HOST_PIP_CONFIG": "host_pip_config",
    "SLURM_SHARED_DIR": "slurm_shared_dir",
    "SLURM_PARTITION": "slurm_partition",
    "SLURM_ACCOUNT": "slurm_account",
    "SLURM_GPUS_PER_NODE": "slurm_gpus_per_node",
    "SLURM_PENDING_TIMEOUT": "slurm_pending_timeout",
    "SLURM_PYTHON": "slurm_python",
    "SLURM_CONTAINER": "slurm_container",
    "ENDPOINT": "endpoint",
    "HISTORY": "history",
    "HOSTS_PORTS": None,
    "MASTER_PORT": None,
}
HOST_KEYS = tuple(KEY_FIELDS)
