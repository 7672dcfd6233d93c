"""A history must never cost a benchmark its result: each fault of the store, reproduced for real.

- Two runs that finish at once both land: two processes call ``record_runs`` at the same moment on
  a new store (SQLite, and a real PostgreSQL server).
- A run killed while writing leaves no half point: a process adding many runs in one transaction is
  sent a real SIGKILL inside it (paused there by an event hook of its own, after its rows are sent
  and, on SQLite, spilled into the WAL file); the store then holds none of that batch and is usable.
- None of these raises, and each is one line starting ``history not updated:`` that names why and
  how to add the run later: a store on a file system mounted read-only, on a full one (a small tmpfs
  filled up: root has no reserved blocks there), locked by another process longer than the busy
  timeout, a corrupt file, and a PostgreSQL server that is down (stopped, or a port nothing
  listens on). Mounts are made by a child in a mount namespace of its own (``unshare``): they vanish
  with it. Root is not stopped by file modes, so no test relies on chmod.
- A real ``run.py`` run of digits with a broken ``HISTORY`` writes its summary and report, exits as it
  would without a history, and says the one line; ``history import`` adds the run later.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import copy_inference_tree, local_host_yaml
from tests.infra.history_runs import store_url, write_case_run  # noqa: F401 - store_url: a fixture
from tests.infra.postgres import free_port, start_postgres
from tests.infra.series_runs import at
from utils.history import store as store_module
from utils.history.ingest import record_runs
from utils.history.store import Store, resolve_url, shown_url

REPO = Path(__file__).resolve().parents[1]
FIGURES = 8  # a digits run's (tests/infra/history_runs.py)
PRELUDE = f"import sys\nsys.path[:0] = [{str(REPO / 'inference')!r}, {str(REPO)!r}]\n"


def not_updated(line: str, run: Path, why: str) -> None:
    """``line`` is record_runs' one line for a store that could not be updated, saying ``why``."""
    assert line.startswith("history not updated: history "), line
    assert "\n" not in line and why in line, line
    assert line.endswith(f"; `run.py history import {run}` adds this run later"), line


def counts(url: str) -> tuple[int, int, int]:
    store = Store.open(url, create=False)
    try:
        return store.count()
    finally:
        store.close()


def points_per_run(url: str) -> dict[str, int]:
    """How many points each stored run has."""
    from sqlalchemy import func, select

    from utils.history.store import _schema

    _, _, runs, _, _, points = _schema()
    store = Store.open(url, create=False)
    try:
        with store.engine.connect() as conn:
            query = (
                select(runs.c.run_key, func.count(points.c.run_id))
                .select_from(runs.outerjoin(points, points.c.run_id == runs.c.id))
                .group_by(runs.c.run_key)
            )
            return dict(conn.execute(query).all())
    finally:
        store.close()


class Child:
    """A Python child running ``code`` (after PRELUDE) with ``args``; ended (SIGKILL) and reaped on exit."""

    def __init__(self, code: str, *args: str, wrap: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen(
            [*wrap, sys.executable, "-c", PRELUDE + code, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def line(self) -> str:
        """The child's next line of output (it waits for us after each)."""
        text = self.proc.stdout.readline() if self.proc.stdout else ""
        assert text, (
            f"the child ended early ({self.proc.wait()}): {self.proc.stderr.read() if self.proc.stderr else ''}"
        )
        return text.rstrip("\n")

    def say(self, text: str = "go") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


# ---- two runs that finish at once ----------------------------------------------------------------
RECORD_WHEN_TOLD = """
from pathlib import Path
from sqlalchemy import event
from sqlalchemy.engine import Engine
from utils.history.ingest import record_runs

looked = []

@event.listens_for(Engine, "after_cursor_execute")
def _tables_looked_for(conn, cursor, statement, parameters, context, executemany):
    if not looked and ("sqlite_master" in statement or "pg_class" in statement):
        looked.append(statement)  # the store was found to have no tables yet: wait for the other writer
        print("found no tables", flush=True)
        sys.stdin.readline()

print(record_runs([Path(sys.argv[1])], sys.argv[2]), flush=True)
"""


def test_two_runs_that_finish_at_once_both_land_in_a_new_store(store_url, tmp_path):
    """Both processes are held (module docstring) where each has found the new store without its tables,
    then let go together: each would create the store."""
    runs = [write_case_run(tmp_path / "runs", f"run{k}", qps=100.0 + k, started_at=at(k)) for k in (1, 2)]
    with (
        Child(RECORD_WHEN_TOLD, str(runs[0]), store_url) as one,
        Child(RECORD_WHEN_TOLD, str(runs[1]), store_url) as two,
    ):
        assert one.line() == two.line() == "found no tables"
        one.say()
        two.say()
        lines = [one.line(), two.line()]
    added = f"history: {FIGURES} figure(s) of 1 run(s) added to {shown_url(store_url)}"
    assert lines == [added, added]
    assert counts(store_url) == (2, FIGURES, 2 * FIGURES)
    assert points_per_run(store_url) == {"run1": FIGURES, "run2": FIGURES}


RECORD_AT_ONCE = """
from pathlib import Path
from utils.history.ingest import record_runs
from utils.history.points import run_entries

runs = [Path(p) for p in sys.argv[2:]]
run_entries(runs[0])  # everything imported, and the project's commit read (git), before the start
print("ready", flush=True)
sys.stdin.readline()
print(record_runs(runs, sys.argv[1]), flush=True)
"""


def test_two_processes_recording_at_once_into_a_store_both_land(store_url, tmp_path):
    """Many runs each, at the same moment, into a store that exists: every run lands, whole."""
    Store.open(store_url).close()
    runs = [write_case_run(tmp_path / "runs", f"run{k}", qps=100.0 + k, started_at=at(k)) for k in range(1, 21)]
    mine, theirs = [str(r) for r in runs[::2]], [str(r) for r in runs[1::2]]
    with Child(RECORD_AT_ONCE, store_url, *mine) as one, Child(RECORD_AT_ONCE, store_url, *theirs) as two:
        assert one.line() == two.line() == "ready"
        one.say()
        two.say()
        lines = [one.line(), two.line()]
    added = f"history: {10 * FIGURES} figure(s) of 10 run(s) added to {shown_url(store_url)}"
    assert lines == [added, added]
    assert points_per_run(store_url) == {f"run{k}": FIGURES for k in range(1, 21)}


# ---- killed while writing ------------------------------------------------------------------------
KILLED_WHILE_WRITING = """
import json, time
from pathlib import Path
from sqlalchemy import event
from utils.history.points import run_entries
from utils.history.store import Store

url, where, folders = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
entries = [e for folder in folders for e in run_entries(Path(folder), {"commit": "c"})]
store = Store.open(url)
if store.engine.dialect.name == "sqlite":  # a tiny page cache: the transaction's pages spill into the WAL file
    event.listen(store.engine, "connect", lambda dbapi, _r: dbapi.execute("PRAGMA cache_size=2"))

def pause(what):
    print(what, flush=True)
    sys.stdin.readline()  # killed here

@event.listens_for(store.engine, "after_cursor_execute")
def _after(conn, cursor, statement, parameters, context, executemany):
    if where == "midway" and statement.startswith("INSERT INTO inferperf_runs"):
        pause("paused with the run rows written and none of their points")

@event.listens_for(store.engine, "commit")
def _commit(conn):
    if where == "commit":
        pause("paused before COMMIT, every run row and point written")

store.add_runs(entries, batch=len(entries))
print("not killed", flush=True)
"""


@pytest.mark.parametrize("where", ["midway", "commit"])
def test_a_run_killed_while_writing_leaves_no_half_point(store_url, tmp_path, where):
    first = write_case_run(tmp_path / "runs", "run0", qps=100.0, started_at=at(0))
    assert record_runs([first], store_url).startswith("history: ")
    batch = [write_case_run(tmp_path / "runs", f"run{k}", qps=100.0 + k, started_at=at(k)) for k in range(1, 41)]
    with Child(KILLED_WHILE_WRITING, store_url, where, json.dumps([str(r) for r in batch])) as child:
        said = child.line()
        assert said.startswith("paused "), said
        if store_url.startswith("sqlite"):  # the batch is partly on disk, uncommitted, when it dies
            wal = Path(store_url.split(":///", 1)[1] + "-wal")
            assert wal.is_file() and wal.stat().st_size > 0
        os.kill(child.proc.pid, signal.SIGKILL)
        code, _, _ = child.finish()
    assert code == -signal.SIGKILL
    assert counts(store_url) == (1, FIGURES, FIGURES)  # none of the killed batch: no run, no point
    assert points_per_run(store_url) == {"run0": FIGURES}
    # the store is usable, and the runs killed in it can be added again
    line = record_runs(batch, store_url)
    assert line == f"history: {40 * FIGURES} figure(s) of 40 run(s) added to {shown_url(store_url)}"
    assert set(points_per_run(store_url).values()) == {FIGURES} and counts(store_url) == (41, FIGURES, 41 * FIGURES)


# ---- read-only and full: real file systems, in a mount namespace of the child's own -------------------
ON_A_TMPFS = """
import errno, os, subprocess
from pathlib import Path
from utils.history.ingest import record_runs

folder, fault, first, second = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
url = f"sqlite:///{folder}/history.sqlite"
print(record_runs([Path(first)], url), flush=True)
if fault == "read-only":
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    try:
        (folder / "probe").write_text("root")
    except OSError as exc:
        print(f"root cannot write: {errno.errorcode[exc.errno]}", flush=True)
else:
    try:
        with open(folder / "filler", "wb") as filler:
            while True:
                filler.write(bytes(65536))
    except OSError as exc:
        print(f"root cannot write: {errno.errorcode[exc.errno]}", flush=True)
print(record_runs([Path(second)], url), flush=True)
if fault == "read-only":  # the fault gone, the run is added later
    subprocess.run(["mount", "-o", "remount,rw", str(folder)], check=True)
else:
    os.remove(folder / "filler")
print(record_runs([Path(second)], url), flush=True)
"""


def unshare_mount() -> tuple[str, ...]:
    from tests.infra.docker_env import require

    found = shutil.which("unshare")
    require(os.geteuid() == 0 and found is not None, "a mount namespace (root and util-linux's unshare) is needed")
    return (str(found), "--mount", "--propagation", "private")


@pytest.mark.parametrize(
    "fault, errno_name, why",
    [
        ("read-only", "EROFS", "the store is read-only: its file system is mounted read-only"),
        ("full", "ENOSPC", "the disk is full: no space left on its file system"),
    ],
)
def test_a_store_on_a_read_only_or_full_file_system_is_one_line(tmp_path, fault, errno_name, why):
    wrap = unshare_mount()
    runs = [write_case_run(tmp_path / "runs", f"run{k}", qps=100.0, started_at=at(k)) for k in (1, 2)]
    folder = tmp_path / "store"
    folder.mkdir()
    url = f"sqlite:///{folder}/history.sqlite"
    with Child(ON_A_TMPFS, str(folder), fault, str(runs[0]), str(runs[1]), wrap=wrap) as child:
        code, out, err = child.finish()
    assert code == 0, err
    before, refused, line, later = out.splitlines()
    assert before == f"history: {FIGURES} figure(s) of 1 run(s) added to {url}"
    assert refused == f"root cannot write: {errno_name}"  # the fault is real, even for root
    not_updated(line, runs[1], why)
    assert later == f"history: {FIGURES} figure(s) of 1 run(s) added to {url}"
    assert list(folder.iterdir()) == []  # the tmpfs went with the child's namespace


# ---- locked, corrupt ---------------------------------------------------------------------------------
HOLD_THE_LOCK = """
import sqlite3
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT INTO inferperf_meta (key, value) VALUES ('holder', 'another process')")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
print("released", flush=True)
"""


def test_a_store_locked_longer_than_the_busy_timeout_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "history.sqlite"
    url = resolve_url(str(path), tmp_path)
    assert url is not None
    runs = [write_case_run(tmp_path / "runs", f"run{k}", qps=100.0, started_at=at(k)) for k in (1, 2)]
    assert record_runs([runs[0]], url).startswith("history: ")
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.5)
    with Child(HOLD_THE_LOCK, str(path)) as holder:
        assert holder.line() == "locked"
        line = record_runs([runs[1]], url)
        holder.say()
        assert holder.line() == "released"
    not_updated(line, runs[1], "the store stayed locked by another writer for 0.5 s (database is locked)")
    assert points_per_run(url) == {"run1": FIGURES}
    assert record_runs([runs[1]], url).startswith("history: ")  # added later, once the lock is gone
    assert points_per_run(url) == {"run1": FIGURES, "run2": FIGURES}


@pytest.mark.parametrize("damage", ["garbage", "torn pages"])
def test_a_corrupt_store_is_one_line_and_left_as_it_is(tmp_path, damage):
    path = tmp_path / "history.sqlite"
    url = resolve_url(str(path), tmp_path)
    assert url is not None
    runs = [write_case_run(tmp_path / "runs", f"run{k}", qps=100.0, started_at=at(k)) for k in (1, 2)]
    if damage == "garbage":
        path.write_bytes(b"\x13\x37 this is no database \xff" * 200)
        why = "the store is corrupt (file is not a database)"
    else:  # a real store whose pages after the first (its schema) are overwritten
        assert record_runs([runs[0]], url).startswith("history: ")
        data = bytearray(path.read_bytes())
        page = int.from_bytes(data[16:18], "big")
        data[page:] = b"\xa5" * (len(data) - page)
        path.write_bytes(bytes(data))
        why = "the store is corrupt (database disk image is malformed)"
    damaged = path.read_bytes()
    not_updated(record_runs([runs[1]], url), runs[1], why)
    assert path.read_bytes() == damaged  # nothing written over it


# ---- PostgreSQL down -----------------------------------------------------------------------------------
def test_a_postgresql_server_that_is_down_is_one_line(tmp_path):
    from tests.infra.docker_env import require
    from tests.infra.postgres import PostgresUnavailable

    runs = [write_case_run(tmp_path / "runs", f"run{k}", qps=100.0, started_at=at(k)) for k in (1, 2, 3)]
    try:
        server = start_postgres()
    except (PostgresUnavailable, OSError) as exc:
        require(False, f"PostgreSQL test server unavailable: {exc}")
        return
    try:
        url = resolve_url(server.new_database(), tmp_path)
        assert url is not None
        assert record_runs([runs[0]], url).startswith("history: ")
    finally:
        server.stop()  # the server that held the history is down
    not_updated(record_runs([runs[1]], url), runs[1], f"port {server.port} failed: Connection refused")
    nobody = resolve_url(f"postgresql://postgres@127.0.0.1:{free_port()}/inferperf", tmp_path)
    assert nobody is not None
    not_updated(record_runs([runs[2]], nobody), runs[2], "failed: Connection refused")


# ---- a real run with a broken history ---------------------------------------------------------------------
def test_a_real_run_with_a_corrupt_history_keeps_its_result_and_says_one_line(tmp_path, digits_data_dir):
    perf = copy_inference_tree(tmp_path / "inference")
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database, and never one " * 100)
    damaged = broken.read_bytes()
    config = local_host_yaml(tmp_path, perf, digits_data_dir, HISTORY=str(broken))
    proc = subprocess.run(
        [sys.executable, "run.py", "--config", str(config), "--set", "batch_sizes=[16]"],
        cwd=perf, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    (run,) = (tmp_path / "result").glob("run*")
    assert proc.returncode == 0, output[-3000:]  # what it exits without a history: every case succeeded
    summary = json.loads((run / "summary.json").read_text())
    assert [r["status"] for r in summary["results"]] == ["success"]
    assert (run / "report.html").is_file()
    expected = (
        f"history not updated: history sqlite:///{broken}: opening failed: the store is corrupt (file is not a "
        f"database); `run.py history import {run}` adds this run later"
    )
    assert output.count(expected) == 1, output[-3000:]
    assert (run / "summary.md").read_text().endswith(f"\n{expected}\n")
    assert broken.read_bytes() == damaged
    # the run is added later, once a history can take it
    good = tmp_path / "good.sqlite"
    added = subprocess.run(
        [sys.executable, "run.py", "history", "import", str(run), "--history", str(good)],
        cwd=perf, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.endswith(f"1 run(s), {FIGURES} figure(s) added; 0 folder(s) skipped\n"), added.stdout
