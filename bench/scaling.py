"""Does run.py scale flat with hosts? MODE docker over real sshd on loopback addresses
(tests/infra/sshd.py) and the real Docker engine -- or MODE slurm on a real Slurm
cluster of N slurmd on this machine (tests/infra/slurm.py, ``--mode slurm``) -- with a
case whose work sleeps instead of computing, so that N hosts on one small machine
measure the controller, not N pipelines competing for its cores.

    python3 -m bench.scaling [--mode docker|slurm|slurm-docker] [--hosts 1,4,8] [--sleep 10] [--cases 1] [--rounds 2]
    (repository root, as root)

The "sleepy" case exists only in a temporary copy of inference/ made here: its
benchmark and config folders are copies of digits' (so run.py's checks pass), and
the copy's run_inference.py is replaced by a stub that sleeps --sleep seconds and
writes a result.json. The real pipeline would import torch (about 1.3 CPU-seconds
per container), which with 8 hosts on 2 cores measures the cores. Monitors,
containers, SSH, SFTP and the Docker API are all real.

Printed per host count (median of --rounds): run.py's wall time, its ratio to the
1-host wall time, the overhead (wall - sleep), and run.py's own CPU time
(resource.getrusage(RUSAGE_CHILDREN) around the subprocess; run.py starts no local
processes in MODE docker) in total, per host per case, and marginal (the CPU an
extra host adds, per case). Targets: 8 hosts <= 1.15x the wall of 1; controller CPU
<= 0.3 s per host per case.

MODE slurm: one job per case x host, each on its own node (HOSTS lists the first N
of max(--hosts) nodes); the stub, the monitors and their ``srun`` steps are real,
and the code reaches the nodes through SLURM_SHARED_DIR. The controller's CPU then
counts what run.py starts here: the Slurm client commands (sbatch, squeue,
scontrol, scancel) and one ``srun`` per step (they are its children). Not counted,
shown apart as "slurm daemons": slurmctld's and the slurmd's own CPU. Every node
declares this machine's CPUs, so the nodes share its cores: fine for a case that
sleeps, not for one that computes. ``--mode slurm-docker`` is MODE slurm with
SLURM_CONTAINER: docker: a prepare job per node, then the case job whose ``srun ...
docker system dial-stdio`` steps carry the Docker API to the node's engine (this
machine's, for every node).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.infra.docker_env import ensure_base_image, ensure_docker
from tests.infra.slurm import SlurmCluster, start_slurm
from tests.infra.sshd import start_sshd_hosts, stop_all

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"

STUB = '''"""Benchmark-only stand-in for run_inference.py (bench/scaling.py): sleep, then write result.json,
a ``common.record.CaseResult`` (the record the host reads) with every figure unmeasured."""
import argparse
import os
import sys
import time
from datetime import datetime, timezone

from common.files import write_json_atomic
from common.record import RESULT_FILE, CaseResult, Verdict

SLEEP_S = {sleep!r}

parser = argparse.ArgumentParser()
for name in ("--perf_dir", "--data_dir", "--log_dir", "--vendor", "--case", "--framework", "--log_level"):
    parser.add_argument(name)
parser.add_argument("--set", action="append", default=[])
args, _ = parser.parse_known_args()
started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
started = time.perf_counter()
print(f"sleepy: {{args.case}} sleeping {{SLEEP_S}} s", flush=True)
time.sleep(SLEEP_S)
e2e = time.perf_counter() - started
unmeasured = dict.fromkeys(
    ("flops", "val_whole_qps", "val_core_qps", "infer_whole_qps", "infer_core_qps", "val_average_acc",
     "infer_average_acc", "accuracy_note", "achieved_tflops", "validation", "inference", "best", "numeric",
     "llm", "baseline", "engine", "raw_latencies")
)
result = CaseResult(
    vendor=args.vendor, compiler=None, precision="fp32", batchsize=None, e2e_time_s=round(e2e, 3), ci95={{}},
    verdict=Verdict((), ()), case=args.case, framework=args.framework, performance=(), audits=[],
    performance_notes=[], cache={{}}, steps={{}}, config={{}}, env={{"in_container": os.path.exists("/.dockerenv")}},
    started_at=started_at, finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), **unmeasured,
)
write_json_atomic(os.path.join(args.log_dir, RESULT_FILE), result.to_json())
print(f"sleepy: done in {{e2e:.2f}} s", flush=True)
sys.exit(0)
'''


def make_tree(tmp: Path, sleep: float, cases: int) -> tuple[Path, list[str]]:
    perf = tmp / "inference"
    shutil.copytree(INFERENCE, perf, ignore=shutil.ignore_patterns("onnxs", "result", "__pycache__"))
    names = [f"sleepy{i}" if cases > 1 else "sleepy" for i in range(1, cases + 1)]
    for name in names:
        shutil.copytree(perf / "benchmarks" / "digits", perf / "benchmarks" / name)
        shutil.copytree(perf / "configs" / "digits", perf / "configs" / name)
    (perf / "run_inference.py").write_text(STUB.format(sleep=sleep))
    return perf, names


def write_config(tmp: Path, perf: Path, hosts, data: Path, names: list[str], wheels: Path | None) -> Path:
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
        "SHM_SIZE": "64m",
        "CASES": {f"{name}:pytorch": str(data) for name in names},
        "BASE_IMAGE": "inferperf/debian-python:bookworm",
        "CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
        "REMOTE_WORKDIR": str(tmp / "remote"),
    }
    if wheels is not None:
        config["PIP_WHEELS_DIR"] = str(wheels)
    path = tmp / f"hosts{len(hosts)}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def write_slurm_config(
    tmp: Path, perf: Path, cluster: SlurmCluster, count: int, data: Path, names: list[str], container: bool = False
) -> Path:
    config = {
        "MODE": "slurm",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(tmp / "result"),
        "FLAGPERF_LOG_LEVEL": "WARNING",
        "HOSTS": cluster.nodes[:count],
        "CASES": {f"{name}:pytorch": str(data) for name in names},
        "SLURM_SHARED_DIR": cluster.shared_dir,
        "SLURM_PARTITION": cluster.default_partition,
        "SLURM_PENDING_TIMEOUT": 120,
    }
    if container:  # SLURM_CONTAINER: docker: the stub and the monitors in the vendor image, on each node's engine
        wheels = Path("/opt/wheels") if any(Path("/opt/wheels").glob("torch-2.13.0*.whl")) else None
        config.update(
            SLURM_CONTAINER="docker",
            SHM_SIZE="64m",
            BASE_IMAGE="inferperf/debian-python:bookworm",
            CA_BUNDLE="/etc/ssl/certs/ca-certificates.crt",
            **({"PIP_WHEELS_DIR": str(wheels)} if wheels is not None else {}),
        )
    path = tmp / f"hosts{count}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def process_cpu_s(pids: list[int]) -> float:
    """user + system CPU seconds of these processes themselves (not their children)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


Rows = dict[
    int, list[tuple[float, float, float, float]]
]  # hosts -> (wall, cpu, slurm daemons cpu, rest of machine cpu) per round


def machine_cpu_s() -> float:
    """CPU seconds every core of this machine has been busy (not idle, not iowait), /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def timed_run(
    config: Path, perf: Path, expected: int, env: dict | None = None, daemons: list[int] = ()
) -> tuple[float, float, float, float]:
    """run.py's wall time, its own CPU time (user + system, its children included) and
    the CPU time the processes ``daemons`` spent meanwhile, and the CPU the rest of this
    machine spent meanwhile (the hosts' sshd, dockerd, containerd, containers, Slurm, and
    anything else running: on real hosts that work is done on their own cores)."""
    daemons_before = process_cpu_s(list(daemons))
    machine_before = machine_cpu_s()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    command = [sys.executable, "run.py", "--config", str(config)]
    if os.environ.get("INFERPERF_STACKS"):  # debugging a hang: bench/_trace_run.py dumps the stacks
        command = [
            sys.executable,
            str(Path(__file__).resolve().parent / "_trace_run.py"),
            f"/tmp/inferperf-trace-{config.stem}-{time.time():.0f}.json",
            "--",
            *command[2:],
        ]
    proc = subprocess.run(command, cwd=perf, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    daemons_cpu = process_cpu_s(list(daemons)) - daemons_before
    machine = machine_cpu_s() - machine_before
    if proc.returncode != 0:
        sys.exit(f"run.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    summaries = sorted(Path(config.parent / "result").glob("run*/summary.json"), key=lambda p: p.stat().st_mtime)
    summary = json.loads(summaries[-1].read_text())
    if summary["succeeded"] != expected:
        sys.exit(f"expected {expected} successes: {summary}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, daemons_cpu, machine - cpu


def measure_docker(tmp: Path, perf: Path, names: list[str], counts: list[int], rounds: int) -> Rows:
    ensure_base_image(client=ensure_docker())
    data = tmp / "data"
    data.mkdir()
    wheels = Path("/opt/wheels") if any(Path("/opt/wheels").glob("torch-2.13.0*.whl")) else None
    hosts = start_sshd_hosts(tmp / "ssh", max(counts))
    try:
        configs = {n: write_config(tmp, perf, hosts[:n], data, names, wheels) for n in counts}
        print(f"warming caches (image, code upload) with {max(counts)} hosts ...", flush=True)
        timed_run(configs[max(counts)], perf, max(counts) * len(names))
        rows: Rows = {n: [] for n in counts}
        for _ in range(rounds):
            for n in counts:
                rows[n].append(timed_run(configs[n], perf, n * len(names)))
    finally:
        stop_all(hosts)
    return rows


def measure_slurm(
    tmp: Path, perf: Path, names: list[str], counts: list[int], rounds: int, container: bool = False
) -> Rows:
    if container:
        ensure_base_image(client=ensure_docker())
    print(f"starting a Slurm cluster of {max(counts)} nodes ...", flush=True)
    cluster = start_slurm(tmp / "slurm", nodes=max(counts))
    try:
        env = cluster.client_env()
        daemons = [proc.pid for name, proc in cluster.processes.items() if name.startswith("slurm")]
        data = Path(cluster.shared_dir) / "data"
        data.mkdir()
        configs = {n: write_slurm_config(tmp, perf, cluster, n, data, names, container) for n in counts}
        print(f"warming caches (code copy to the shared dir) with {max(counts)} hosts ...", flush=True)
        timed_run(configs[max(counts)], perf, max(counts) * len(names), env, daemons)
        rows: Rows = {n: [] for n in counts}
        for _ in range(rounds):
            for n in counts:
                cluster.wait_idle(60)
                rows[n].append(timed_run(configs[n], perf, n * len(names), env, daemons))
    finally:
        cluster.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = ("docker", "slurm", "slurm-docker")  # slurm-docker: MODE slurm with SLURM_CONTAINER: docker
    parser.add_argument("--mode", choices=modes, default="docker", help="MODE of the runs (default %(default)s)")
    parser.add_argument("--hosts", default="1,4,8", help="comma-separated host counts (default %(default)s)")
    parser.add_argument(
        "--sleep", type=float, default=10.0, help="seconds each case sleeps in its container (slurm: in its job)"
    )
    parser.add_argument("--cases", type=int, default=1, help="cases per run (each host runs them one after another)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.hosts.split(",")})
    with tempfile.TemporaryDirectory(prefix="inferperf-scale-") as tmp_name:
        tmp = Path(tmp_name)
        perf, names = make_tree(tmp, args.sleep, args.cases)
        if args.mode == "docker":
            rows = measure_docker(tmp, perf, names, counts, args.rounds)
        else:
            rows = measure_slurm(tmp, perf, names, counts, args.rounds, container=args.mode == "slurm-docker")
    per_case = args.sleep * len(names)
    slurm = args.mode.startswith("slurm")
    print(
        f"\nMODE {args.mode}: sleep {args.sleep:g} s x {len(names)} case(s) per host; median of {args.rounds} round(s)"
    )
    print(
        f"{'hosts':>5} {'wall s':>7} {'x 1 host':>8} {'overhead s':>10} {'cpu s':>6} {'cpu/host/case':>13} "
        f"{'marginal cpu/host/case':>22}"
        + (f" {'slurm daemons cpu s':>19}" if slurm else "")
        + f" {'rest of machine cpu s':>21}"
    )
    walls = {n: statistics.median(r[0] for r in samples) for n, samples in rows.items()}
    cpus = {n: statistics.median(r[1] for r in samples) for n, samples in rows.items()}
    daemons = {n: statistics.median(r[2] for r in samples) for n, samples in rows.items()}
    others = {n: statistics.median(r[3] for r in samples) for n, samples in rows.items()}
    base = min(counts)
    for n in counts:
        marginal = (cpus[n] - cpus[base]) / ((n - base) * len(names)) if n != base else None
        print(
            f"{n:>5} {walls[n]:>7.2f} {walls[n] / walls[base]:>8.2f} {walls[n] - per_case:>10.2f} {cpus[n]:>6.2f} "
            f"{cpus[n] / (n * len(names)):>13.3f} {('-' if marginal is None else f'{marginal:.3f}'):>22}"
            + (f" {daemons[n]:>19.2f}" if slurm else "")
            + f" {others[n]:>21.2f}"
        )
    top = max(counts)
    print(
        f"{top} hosts / {base} host wall: {walls[top] / walls[base]:.2f} (target <= 1.15); "
        f"controller CPU per host per case at {top} hosts: {cpus[top] / (top * len(names)):.3f} s (target <= 0.3)"
    )


if __name__ == "__main__":
    main()
