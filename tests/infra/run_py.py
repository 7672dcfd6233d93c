"""run.py in a subprocess for the fault tests: a host.yaml, a case config to break, the run with the
CPU seconds it took, and the one config error line it must end in."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import yaml

# "within seconds": the faults used to hang or run for minutes. Counted in the child's CPU seconds
# (user + system), which a loaded machine does not stretch as it stretches the wall clock; a hang
# that burns no CPU ends at subprocess.run's timeout instead
CPU_SECONDS = 30


def host_yaml(tmp_path: Path, perf: Path, extra_text: str = "", **overrides) -> Path:
    config = {
        "MODE": "local",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
        "HOSTS": ["127.0.0.1"],
        "CASES": {"digits:pytorch": str(tmp_path / "data")},
    }
    config.update(overrides)
    for key in [k for k, v in config.items() if v is DROP]:
        del config[key]
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config, width=1 << 30) + extra_text)
    return path


DROP = object()


def run_py(
    perf: Path, config: Path, *extra: str, memory: int | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    command = [sys.executable, "run.py", "--config", str(config), *extra]
    return run_counting_cpu(command, cwd=perf, preexec_fn=limit if memory else None)


def run_counting_cpu(command: list[str], **options) -> tuple[subprocess.CompletedProcess, float]:
    """``command``'s completed process and the CPU seconds (user + system) it and its children took: a
    bound in CPU time holds on a loaded machine, where the wall clock stretches."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, **options)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def assert_one_config_error(
    proc: subprocess.CompletedProcess, cpu_seconds: float, tmp_path: Path, *fragments: str
) -> str:
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output and "MemoryError" not in output, output[-3000:]
    assert proc.returncode == 2, output[-3000:]
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output[-3000:]
    line = lines[0]
    assert "| ERROR" in line and len(line) < 700, line[:1000]
    for fragment in fragments:
        assert fragment in line, line
    assert cpu_seconds < CPU_SECONDS, f"took {cpu_seconds:.1f} CPU seconds"
    assert not (tmp_path / "result").exists(), "a run directory was written"
    return line


def set_key(path: Path, key: str, text: str) -> Path:
    """Replace (or add) ``key: text`` in a YAML file, as a user edits it."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith(f"{key}:")]
    path.write_text("\n".join(lines) + f"\n{key}: {text}\n")
    return path


def case_file(perf: Path, which: str) -> Path:
    root = perf / "configs" / "digits"
    return {
        "base": root / "configurations.yaml",
        "params": root / "parameters.yaml",
        "vendor": root / "vendor_config" / "cpu_configurations.yaml",
    }[which]
