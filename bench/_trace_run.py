"""run.py with timestamps: wraps the executor's primitives, SSH/SFTP calls and every Docker
API request, then writes the events as JSON. Used by bench/orchestration_profile.py.

    cd <inference dir> && python3 /path/to/bench/_trace_run.py TRACE.json -- --config host.yaml

The parent passes INFERPERF_TRACE_T0 (time.time() just before it started this process)
so that the interpreter's own start-up shows as the first span.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time

T0 = float(os.environ.get("INFERPERF_TRACE_T0", time.time()))
EVENTS: list[dict] = []
_LOCK = threading.Lock()
_QUIET = threading.local()  # set while the tracer makes its own API calls


def record(name: str, start: float, end: float, **extra) -> None:
    if getattr(_QUIET, "on", False):
        return
    with _LOCK:
        EVENTS.append(
            {"name": name, "start": start - T0, "end": end - T0, "thread": threading.current_thread().name, **extra}
        )


def wrap(owner, attr: str, name: str | None = None, detail=None) -> None:
    original = getattr(owner, attr)
    label = name or f"{owner.__name__}.{attr}"

    @functools.wraps(original)
    def traced(*args, **kwargs):
        start = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            extra = {"detail": detail(*args, **kwargs)} if detail else {}
            record(label, start, time.time(), **extra)

    setattr(owner, attr, traced)


def install() -> None:
    import docker.api.client as api
    import paramiko
    import requests

    from entry import run_config
    from utils.cli import hosts as run_hosts
    from utils.cli import summary as run_end
    from utils.executors import base as hs
    from utils.executors import docker as ds
    from utils.executors import ssh as cm

    for attr in (
        "prepare",
        "case_log_dir",
        "start",
        "stop",
        "fetch",
        "end_case",
        "cleanup",
        "output_tail",
        "exit_detail",
        "_sync_code",
        "_ensure_image",
        "sweep_orphans",
    ):
        if hasattr(ds.DockerSession, attr):
            wrap(
                ds.DockerSession,
                attr,
                f"session.{attr}",
                detail=(lambda self, role, *a, **k: role) if attr == "start" else None,
            )
    for attr in ("run_case", "_dead_monitor", "_wait_pipeline"):
        wrap(hs.HostSession, attr, f"template.{attr}")
    for attr in ("connect", "run", "exists", "is_dir", "makedirs", "get_files", "remove_tree", "put_tree"):
        wrap(
            cm.SshHost,
            attr,
            f"ssh.{attr}",
            detail=(lambda self, argv, *a, **k: " ".join(argv)[:60]) if attr == "run" else None,
        )
    transport = getattr(ds, "LocalHost", None)
    if transport is not None:
        for attr in ("makedirs", "exists", "is_dir", "get_files", "remove_tree", "run"):
            wrap(transport, attr, f"local.{attr}")
    wrap(paramiko.Transport, "open_session", "ssh.open_session")

    def http_detail(self, method, url, *a, **k):
        path = url.split("://", 1)[-1]
        path = path[path.find("/") :] if "/" in path else path
        return f"{method} {path.split('?')[0][-70:]}"

    wrap(api.APIClient, "request", "docker.http", detail=http_detail)
    del requests
    # run.py's steps where they are looked up (entry/, utils/cli/), under the names the profile reads
    for owner, attr, label in (
        (run_config, "check_cases", "run.check_cases"),
        (run_hosts, "host_worker", "run.host_worker"),
        (run_end, "write_report_safely", "run._write_report"),
    ):
        wrap(owner, attr, label)
    from utils import executors

    wrap(executors, "create", "run.make_session")  # a host's session is made through it
    from utils.results import summary

    wrap(summary, "write_summary", "run.write_summary")


def main() -> int:
    out = sys.argv[1]
    argv = sys.argv[sys.argv.index("--") + 1 :]
    sys.path.insert(0, os.getcwd())
    started = time.time()
    import run  # noqa: F401 - the import time of run.py and what it pulls in

    record("import run.py", started, time.time())
    install()
    import run as run_module

    # Docker container timings (created, started, finished) before the removal, trace only.
    from utils.executors import docker as ds

    original_end = ds.DockerSession.end_case

    def end_case(self, spec):
        for container in list(getattr(self, "_containers", [])):
            try:
                _QUIET.on = True
                try:
                    attrs = container.client.api.inspect_container(container.id)
                finally:
                    _QUIET.on = False
                record(
                    "trace.inspect",
                    time.time(),
                    time.time(),
                    detail=container.name,
                    state={k: attrs["State"].get(k) for k in ("StartedAt", "FinishedAt")},
                    created=attrs.get("Created"),
                )
            except Exception:
                pass
        return original_end(self, spec)

    ds.DockerSession.end_case = end_case
    stacks = os.environ.get("INFERPERF_STACKS")  # seconds: dump every thread's stack then (a hang)
    if stacks:
        import faulthandler

        faulthandler.dump_traceback_later(
            float(stacks), exit=False, file=open(f"/tmp/inferperf-stacks-{os.getpid()}.txt", "w")
        )
    profile = os.environ.get("INFERPERF_PROFILE")  # a file: CPU profile of run.main (needs yappi)
    if profile:
        import yappi

        yappi.set_clock_type("cpu")
        yappi.start(builtins=False, profile_threads=True)
    start = time.time()
    code = 1
    try:
        code = run_module.main(argv)
    finally:
        record("run.main", start, time.time())
        if profile:
            yappi.stop()
            with open(profile, "w") as handle:
                yappi.get_func_stats().sort("tsub").print_all(
                    out=handle, columns={0: ("name", 60), 1: ("ncall", 8), 2: ("tsub", 8), 3: ("ttot", 8)}
                )
                yappi.get_thread_stats().print_all(out=handle)
        with open(out, "w") as handle:
            json.dump({"t0": T0, "exit": code, "events": EVENTS}, handle)
    return code


if __name__ == "__main__":
    sys.exit(main())
