"""Where does run.py's time go beyond the pipeline? One digits case (repeat 1) on one host,
caches warm, run.py traced with timestamps (bench/_trace_run.py).

    python3 -m bench.orchestration_profile [--runs 2] [--local] [--set KEY=VALUE]     (repository root, as root)

Without --local the host is a real sshd on 127.0.0.2 (MODE docker over SSH); with
--local it is HOSTS: ["localhost"] (the local engine through the SDK, no SSH).
Prints, for the last run, the phases in order with their durations, the count and
time of Docker API requests, SSH channels and SFTP calls, and the case container's
own timeline (created -> started -> pipeline start -> pipeline end -> exit).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import yaml

from bench._case_set import add_set_argument, overrides
from bench.orchestration_overhead import make_tree, write_config
from tests.infra.docker_env import ensure_base_image, ensure_docker
from tests.infra.sshd import start_sshd_hosts, stop_all

TRACER = Path(__file__).resolve().parent / "_trace_run.py"


def traced_run(config: Path, perf: Path, out: Path) -> tuple[float, dict]:
    env = dict(os.environ, INFERPERF_TRACE_T0=repr(time.time()))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(TRACER), str(out), "--", "--config", str(config)],
        cwd=perf,
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"run.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return wall, json.loads(out.read_text())


def _iso(text: str) -> float:
    text = text.rstrip("Z")
    if "." in text:
        head, frac = text.split(".", 1)
        frac = "".join(ch for ch in frac if ch.isdigit())[:6]
        text = f"{head}.{frac}"
    zone = "+00:00" if "+" not in text[10:] else ""
    return datetime.fromisoformat(text + zone).timestamp()


def report(wall: float, trace: dict, result: dict) -> None:
    t0, events = trace["t0"], trace["events"]
    first = lambda name: next((e for e in events if e["name"] == name), None)  # noqa: E731
    spans = [e for e in events if e["name"].startswith(("run.", "session.", "template.", "import"))]
    print(
        f"\nrun.py wall {wall:.2f} s, pipeline e2e {result['e2e_time(second)']:.2f} s, overhead "
        f"{wall - result['e2e_time(second)']:.2f} s"
    )
    print(f"{'start':>7} {'dur':>6}  span")
    for e in sorted(spans, key=lambda e: e["start"]):
        if e["name"] in ("session.output_tail",):
            continue
        detail = f" [{e['detail']}]" if e.get("detail") else ""
        print(f"{e['start']:7.3f} {e['end'] - e['start']:6.3f}  {e['name']}{detail}")
    main_end = first("run.main")["end"]
    print(f"{main_end:7.3f} {wall - main_end:6.3f}  (interpreter exit)")
    counts: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e["name"].startswith(("docker.", "ssh.", "local.")):
            counts[e["name"]].append(e["end"] - e["start"])
    print("\ncalls (count, total s):")
    for name, durations in sorted(counts.items()):
        print(f"  {name:<22} {len(durations):>4} {sum(durations):7.3f}")
    for e in events:
        if e["name"] == "trace.inspect" and e["detail"].endswith("-case"):
            created, started, finished = (
                _iso(e["created"]) - t0,
                _iso(e["state"]["StartedAt"]) - t0,
                _iso(e["state"]["FinishedAt"]) - t0,
            )
            pipe_start = finished - result["e2e_time(second)"]  # result.json's started_at has whole seconds only
            print(
                f"\ncase container: created {created:.3f}, started {started:.3f}, "
                + f"pipeline start ~{pipe_start:.3f} (python+imports ~{pipe_start - started:.2f} s), "
                + f"pipeline e2e {result['e2e_time(second)']:.2f} s, exited {finished:.3f}"
            )
    by_run = [e for e in events if e["name"] == "docker.http"]
    print(f"\ndocker API requests: {len(by_run)}")
    for e in sorted(by_run, key=lambda e: e["start"]):
        print(f"  {e['start']:7.3f} {e['end'] - e['start']:6.3f} {e['detail']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="traced runs after the warm-up; the last one is shown")
    parser.add_argument("--local", action="store_true", help='HOSTS: ["localhost"]: the local engine, no SSH')
    parser.add_argument(
        "--hosts", type=int, default=1, help="sshd hosts (without --local): with more than one, a per-host table"
    )
    parser.add_argument(
        "--sleepy",
        type=float,
        default=None,
        metavar="S",
        help="profile bench/scaling.py's sleep-bound case (S seconds) instead of digits",
    )
    add_set_argument(parser)
    args = parser.parse_args()
    ensure_base_image(client=ensure_docker())
    with tempfile.TemporaryDirectory(prefix="inferperf-prof-") as tmp_name:
        tmp = Path(tmp_name)
        if args.sleepy is None:
            perf = make_tree(tmp, changes=overrides(args.set))
            data = tmp / "digits"
            subprocess.run(
                [sys.executable, "-m", "benchmarks.digits.pytorch.prepare", str(data)],
                cwd=perf,
                check=True,
                capture_output=True,
            )
        else:
            from bench.scaling import make_tree as sleepy_tree

            perf, _ = sleepy_tree(tmp, args.sleepy, 1)
            data = tmp / "data"
            data.mkdir()
        wheels = Path("/opt/wheels") if any(Path("/opt/wheels").glob("torch-2.13.0*.whl")) else None
        hosts = [] if args.local else start_sshd_hosts(tmp / "ssh", args.hosts)
        try:
            case = "digits:pytorch" if args.sleepy is None else "sleepy:pytorch"
            if args.local:
                config = write_local_config(tmp, perf, data, wheels, case)
            else:
                config = write_config(tmp, perf, hosts, data, wheels)
                if args.sleepy is not None:
                    values = yaml.safe_load(config.read_text())
                    values["CASES"] = {case: str(data)}
                    config.write_text(yaml.safe_dump(values))
            print("warming caches ...", flush=True)
            traced_run(config, perf, tmp / "trace.json")
            walls = []
            for _ in range(args.runs):
                wall, trace = traced_run(config, perf, tmp / "trace.json")
                walls.append(wall)
            summaries = sorted((tmp / "result").glob("run*/summary.json"), key=lambda p: p.stat().st_mtime)
            record = json.loads(summaries[-1].read_text())["results"][0]
            result = json.loads((Path(record["log_dir"]) / "result.json").read_text())
        finally:
            stop_all(hosts)
    print("walls: " + ", ".join(f"{w:.2f}" for w in walls))
    report(walls[-1], trace, result)
    if args.hosts > 1:
        per_host(trace)


def per_host(trace: dict) -> None:
    """One line per host thread: when each step of its case began and how long it took."""
    rows: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for e in trace["events"]:
        if e["thread"].startswith("host") and e["name"].startswith(("session.", "template.", "run.host_worker")):
            key = e["name"].split(".", 1)[1] + (f"[{e['detail']}]" if e.get("detail") else "")
            rows[e["thread"]].setdefault(key, (e["start"], e["end"] - e["start"]))
    columns = [
        "prepare",
        "start[mon-sys]",
        "start[mon-cpu]",
        "_dead_monitor",
        "start[case]",
        "_wait_pipeline",
        "fetch",
        "end_case",
    ]
    print("\nper host: start time +duration (s)")
    print(f"{'thread':<8} " + " ".join(f"{c[:15]:>15}" for c in columns))
    for thread, spans in sorted(rows.items()):
        print(
            f"{thread:<8} "
            + " ".join(f"{spans[c][0]:7.2f}+{spans[c][1]:<7.2f}" if c in spans else f"{'-':>15}" for c in columns)
        )
    main = [e for e in trace["events"] if e["name"] in ("session.cleanup", "run.write_summary", "run._write_report")]
    print(
        "teardown on the main thread: "
        + ", ".join(f"{e['name']} {e['start']:.2f}+{e['end'] - e['start']:.2f}" for e in main)
    )


def write_local_config(tmp: Path, perf: Path, data: Path, wheels: Path | None, case: str = "digits:pytorch") -> Path:
    known = tmp / "known_hosts"
    known.touch()
    config = {
        "MODE": "docker",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(tmp / "result"),
        "FLAGPERF_LOG_LEVEL": "WARNING",
        "HOSTS": ["localhost"],
        "KNOWN_HOSTS": str(known),
        "SHM_SIZE": "256m",
        "CASES": {case: str(data)},
        "BASE_IMAGE": "inferperf/debian-python:bookworm",
        "CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
        "REMOTE_WORKDIR": str(tmp / "remote"),
    }
    if wheels is not None:
        config["PIP_WHEELS_DIR"] = str(wheels)
    path = tmp / "host_local.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


if __name__ == "__main__":
    main()
