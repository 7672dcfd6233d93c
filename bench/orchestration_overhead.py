"""What does run.py cost beyond the pipeline? MODE docker over real sshd on loopback
addresses and the real Docker engine, with the image, code and engine caches warm.

    python3 -m bench.orchestration_overhead [--rounds 2] [--hosts 1,4] [--set KEY=VALUE]   (repository root, as root)

For 1 host and for 4 hosts it prints run.py's wall time, the slowest host's
in-container pipeline time (result.json "e2e_time(second)") and the difference
(the orchestration overhead: SSH, Docker API, monitors, container start/stop,
fetch, merge), then the ratio of the 4-host wall time to the 1-host wall time.
With ``--against REV`` the same runs are made, interleaved round by round (A B, then B A), with
``inference/`` as commit REV had it (``git archive``): the two trees' overheads side by side in one run.
Each round also measures the floor, which no orchestration of this design can go below: one OpenSSH
command to the first host that starts a container of the case's image running Python with the
imports the case container makes before its pipeline's clock, and removes it (``docker run --rm``).
The report gives the 1-host overhead less that floor: what InferPerf adds to it.
Targets: overhead <= 1 s for one host (issue 42); 4 hosts <= 1.3x one host. The digits case
runs with repeat 1 so that the pipeline itself is small; on a 2-core machine the
4 pipelines still compete for CPU, which the pipeline-time column shows.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench._case_set import add_set_argument, overrides
from tests.infra.docker_env import ensure_base_image, ensure_docker
from tests.infra.sshd import start_sshd_hosts, stop_all

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"


def make_tree(tmp: Path, source: Path = INFERENCE, changes: dict | None = None) -> Path:
    perf = tmp / "inference"
    shutil.copytree(source, perf, ignore=shutil.ignore_patterns("onnxs", "result", "__pycache__"))
    path = perf / "configs" / "digits" / "configurations.yaml"
    config = yaml.safe_load(path.read_text())
    config.update(repeat=1, log_freq=0)
    config.update(changes or {})  # --set KEY=VALUE
    path.write_text(yaml.safe_dump(config))
    return perf


def against_tree(tmp: Path, rev: str, changes: dict | None = None) -> Path:
    """``inference/`` as commit ``rev`` had it, set up as ``make_tree`` sets up this one."""
    import io
    import tarfile

    archive = subprocess.run(["git", "archive", rev, "inference"], cwd=REPO, capture_output=True, check=False)
    if archive.returncode != 0:
        sys.exit(f"--against {rev}: git archive failed: {archive.stderr.decode(errors='replace').strip()}")
    source = tmp / "against-source"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    (tmp / "against").mkdir()
    return make_tree(tmp / "against", source / "inference", changes)


def write_config(tmp: Path, perf: Path, hosts, data: Path, wheels: Path | None, name: str = "") -> Path:
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
    path = tmp / f"{name}host{len(hosts)}.yaml"
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


# What run_inference.py imports before the pipeline's clock starts (its Pipeline's construction).
FLOOR_IMPORTS = "import run_inference, loguru, tools.logger, common.lifetime, tools.pipeline"


def case_image(result_dir: Path) -> str:
    """The image the last run's case container ran: a "reused image TAG" of its build logs, the case
    layer's (build_HOST_cases.log) where the case has one, else the vendor image's (build_HOST.log)."""
    runs = sorted(result_dir.glob("run*/"), key=lambda p: p.stat().st_mtime)
    logs = sorted(runs[-1].glob("build_*.log"), key=lambda p: p.name.endswith("_cases.log"))
    tags = re.findall(r"reused image (\S+),", "".join(p.read_text() for p in logs))
    if not tags:
        sys.exit(f"no 'reused image' line in {runs[-1]}/build_*.log: the floor needs the case's image")
    return tags[-1]


FLOOR = "floor: one ssh + docker run --rm of the case's image with its Python imports"
# Its parts, each timed alone: what SSH costs, and what a container with a bare Python costs.
FLOOR_PARTS = ("part: ssh HOST true", "part: docker run --rm IMAGE python -c pass")


def floor_once(host, image: str, perf: Path) -> dict[str, float]:
    """Seconds for one OpenSSH command to ``host`` that runs, and removes, a container of ``image``
    importing FLOOR_IMPORTS from ``perf`` (read-only): the SSH, engine, container and Python start-up
    that one case on one host cannot avoid (``FLOOR``); and for its two parts alone (``FLOOR_PARTS``:
    the host is on this machine's engine, so the container part runs here)."""
    docker_run = ["docker", "run", "--rm", "--network", "host"]
    mounted = [*docker_run, "-v", f"{perf}:/perf:ro", "-w", "/perf", "-e", "PYTHONDONTWRITEBYTECODE=1"]
    commands = {
        FLOOR: host.ssh_command(shlex.join([*mounted, image, "python", "-c", FLOOR_IMPORTS])),
        FLOOR_PARTS[0]: host.ssh_command("true"),
        FLOOR_PARTS[1]: [*docker_run, image, "python", "-c", "pass"],
    }
    seconds = {}
    for name, argv in commands.items():
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        seconds[name] = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"the floor's command {shlex.join(argv)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hosts", default="1,4", help="the host counts run, from 1 and 4 (default both)")
    parser.add_argument("--against", metavar="REV", help="also run inference/ as this commit had it, interleaved")
    add_set_argument(parser)
    args = parser.parse_args()
    given = tuple(dict.fromkeys(c.strip() for c in args.hosts.split(",")))
    if not set(given) <= {"1", "4"}:
        sys.exit(f"--hosts {args.hosts}: expected 1, 4 or 1,4")
    counts = tuple(int(c) for c in given)
    changes = overrides(args.set)
    ensure_base_image(client=ensure_docker())
    with tempfile.TemporaryDirectory(prefix="inferperf-orch-") as tmp_name:
        tmp = Path(tmp_name)
        perf = make_tree(tmp, changes=changes)
        data = tmp / "digits"
        subprocess.run(
            [sys.executable, "-m", "benchmarks.digits.pytorch.prepare", str(data)],
            cwd=perf,
            check=True,
            capture_output=True,
        )
        wheels = Path("/opt/wheels") if any(Path("/opt/wheels").glob("torch-2.13.0*.whl")) else None
        trees = {"this tree": perf}
        if args.against:
            trees[args.against] = against_tree(tmp, args.against, changes)
        hosts = start_sshd_hosts(tmp / "ssh", max(counts))
        try:
            rows, floors = measure(tmp, trees, hosts, data, wheels, args.rounds, counts)
        finally:
            stop_all(hosts)
    report(rows, args.rounds, floors)


def measure(
    tmp: Path, trees: dict[str, Path], hosts, data: Path, wheels: Path | None, rounds: int, counts=(1, 4)
) -> tuple[dict, dict[str, list[float]]]:
    """(tree, hosts) -> [(wall, pipeline)] over ``rounds``, the trees in A B / B A order round by round,
    and the floor (``floor_once``) once a round, after the round's runs."""
    configs = {}
    for index, (name, perf) in enumerate(trees.items()):
        for count in counts:
            configs[name, count] = (write_config(tmp, perf, hosts[:count], data, wheels, f"t{index}-"), perf)
    print("warming caches (image build, code upload, ONNX and engine) ...", flush=True)
    for config, perf in configs.values():
        timed_run(config, perf)
    rows: dict = {key: [] for key in configs}
    floors: dict[str, list[float]] = {}
    first = next(iter(trees))
    image = ""
    for round_ in range(rounds):
        names = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for count in counts:
            for name in names:
                config, perf = configs[name, count]
                rows[name, count].append(timed_run(config, perf))
                if not image and name == first:  # a run after the warm-up: it reused this tree's image
                    image = case_image(tmp / "result")
        for part, seconds in floor_once(hosts[0], image, trees[first]).items():
            floors.setdefault(part, []).append(seconds)
    return rows, floors


def report(rows: dict, rounds: int, floors: dict[str, list[float]] | None = None) -> None:
    head = f"{'tree':>12} {'hosts':>5} {'wall s':>8} {'pipeline s':>11} {'overhead s':>11}"
    print(f"{head}   (median of {rounds} rounds)")
    walls = {}
    for (name, count), samples in rows.items():
        wall = statistics.median(w for w, _ in samples)
        pipeline = statistics.median(p for _, p in samples)
        overheads = sorted(w - p for w, p in samples)
        walls[name, count] = wall
        spread = f"[{overheads[0]:.2f}, {overheads[-1]:.2f}]"
        print(f"{name:>12} {count:>5} {wall:>8.2f} {pipeline:>11.2f} {wall - pipeline:>11.2f}   rounds {spread}")
    if floors:
        for part, values in floors.items():
            print(
                f"{part} {statistics.median(values):.2f} s "
                f"(median of {len(values)}, rounds [{min(values):.2f}, {max(values):.2f}])"
            )
        floor = statistics.median(floors[FLOOR])
        for (name, count), samples in rows.items():
            if count == 1:
                overhead = statistics.median(w for w, _ in samples) - statistics.median(p for _, p in samples)
                print(f"{name}: 1-host overhead less the floor {overhead - floor:.2f} s")
    for name in dict.fromkeys(name for name, _ in rows):
        if (name, 4) not in walls or (name, 1) not in walls:
            continue
        ratio = walls[name, 4] / walls[name, 1]
        print(f"{name}: 4-host wall / 1-host wall {ratio:.2f} (target <= 1.3); 1-host overhead target <= 1 s")


if __name__ == "__main__":
    main()
