"""What does run.py cost beyond the pipeline? MODE docker over real sshd on loopback
addresses and the real Docker engine, with the image, code and engine caches warm.

    python3 -m bench.orchestration_overhead [--rounds 2]      (from the repository root, as root)

For 1 host and for 4 hosts it prints run.py's wall time, the slowest host's
in-container pipeline time (result.json "e2e_time(second)") and the difference
(the orchestration overhead: SSH, Docker API, monitors, container start/stop,
fetch, merge), then the ratio of the 4-host wall time to the 1-host wall time.
Targets: overhead <= 3 s for one host (issue 12); 4 hosts <= 1.3x one host. The digits case
runs with repeat 1 so that the pipeline itself is small; on a 2-core machine the
4 pipelines still compete for CPU, which the pipeline-time column shows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.infra.docker_env import ensure_base_image, ensure_docker
from tests.infra.sshd import start_sshd_hosts, stop_all

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"


def make_tree(tmp: Path) -> Path:
    perf = tmp / "inference"
    shutil.copytree(INFERENCE, perf, ignore=shutil.ignore_patterns("onnxs", "result", "__pycache__"))
    path = perf / "configs" / "digits" / "configurations.yaml"
    config = yaml.safe_load(path.read_text())
    config.update(repeat=1, log_freq=0)
    path.write_text(yaml.safe_dump(config))
    return perf


def write_config(tmp: Path, perf: Path, hosts, data: Path, wheels: Path | None) -> Path:
    config = {
        "MODE": "docker",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(tmp / "result"),
        "FLAGPERF_LOG_LEVEL": "WARNING",
        "HOSTS": [f"{h.address}:{h.port}" for h in hosts],
        "SSH_USER": hosts[0].user,
        "SSH_KEY_FILE": hosts[0].client_key_path,
        "KNOWN_HOSTS": hosts[0].known_hosts_path,
        "SHM_SIZE": "256m",
        "CASES": {"digits:pytorch": str(data)},
        "BASE_IMAGE": "inferperf/debian-python:bookworm",
        "CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
        "REMOTE_WORKDIR": str(tmp / "remote"),
    }
    if wheels is not None:
        config["PIP_WHEELS_DIR"] = str(wheels)
    path = tmp / f"host{len(hosts)}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def timed_run(config: Path, perf: Path) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "run.py", "--config", str(config)], cwd=perf, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"run.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    summaries = sorted(Path(config.parent / "result").glob("run*/summary.json"), key=lambda p: p.stat().st_mtime)
    results = json.loads(summaries[-1].read_text())["results"]
    return wall, max(r["e2e_time(second)"] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ensure_base_image(client=ensure_docker())
    with tempfile.TemporaryDirectory(prefix="inferperf-orch-") as tmp_name:
        tmp = Path(tmp_name)
        perf = make_tree(tmp)
        data = tmp / "digits"
        subprocess.run(
            [sys.executable, "-m", "benchmarks.digits.pytorch.prepare", str(data)],
            cwd=perf,
            check=True,
            capture_output=True,
        )
        wheels = Path("/opt/wheels") if any(Path("/opt/wheels").glob("torch-2.13.0*.whl")) else None
        hosts = start_sshd_hosts(tmp / "ssh", 4)
        try:
            one, four = write_config(tmp, perf, hosts[:1], data, wheels), write_config(tmp, perf, hosts, data, wheels)
            print("warming caches (image build, code upload, ONNX and engine) ...", flush=True)
            timed_run(one, perf)
            timed_run(four, perf)
            rows = {1: [], 4: []}
            for _ in range(args.rounds):
                for count, config in ((1, one), (4, four)):
                    rows[count].append(timed_run(config, perf))
        finally:
            stop_all(hosts)
    print(f"{'hosts':>5} {'wall s':>8} {'pipeline s':>11} {'overhead s':>11}   (median of {args.rounds} rounds)")
    walls = {}
    for count, samples in rows.items():
        wall = statistics.median(w for w, _ in samples)
        pipeline = statistics.median(p for _, p in samples)
        walls[count] = wall
        print(f"{count:>5} {wall:>8.2f} {pipeline:>11.2f} {wall - pipeline:>11.2f}")
    print(f"4-host wall / 1-host wall: {walls[4] / walls[1]:.2f} (target <= 1.3); 1-host overhead target <= 3 s")


if __name__ == "__main__":
    main()
