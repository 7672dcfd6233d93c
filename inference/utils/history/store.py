"""The results history's store: every run's figures, one point per series and run, in SQLite or PostgreSQL.

Built on SQLAlchemy Core (one table definition and one set of queries for both backends; its URL
parser gives a malformed ``HISTORY`` its one line; the per-dialect ``INSERT ... ON CONFLICT DO
NOTHING`` makes an import idempotent) with psycopg 3 as PostgreSQL's driver. The embedded default
is one SQLite file, ``<FLAGPERF_LOG_PATH>/history.sqlite``, in WAL mode with a 30-s busy timeout,
so two runs that finish at once both land.

Tables (``docs/history.md`` has the schema and its migration path):

- ``inferperf_meta``: ``schema_version``;
- ``inferperf_runs``: one row per run folder added (``run_key`` unique: the run id, ``-A``/``-B``
  for the sides of ``run.py ab``);
- ``inferperf_series``: what must be equal for two figures to be compared (``SeriesKey``);
- ``inferperf_software``: each distinct software description once (framework, runtime, driver,
  image, the project's commit), by hash;
- ``inferperf_points``: a figure of a series in a run: value, 95 % interval, repetitions, valid.

A run's points are written in one transaction with its run row: a run killed while writing
leaves nothing of itself, and adding the same run again adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

from common.errors import InferPerfError

SCHEMA_VERSION = 1
DEFAULT_FILE = "history.sqlite"
BUSY_TIMEOUT_S = 30.0
WRITER_LOCK = 0x1F_E2_F0_4C_0B  # PostgreSQL's advisory lock key of the history's writers
OFF = ("off", "none", "false")


class HistoryError(InferPerfError):
    """The store cannot be used (unreachable, read-only, full, locked, corrupt, another schema):
    one line naming it. A run goes on without it; ``run.py history`` exits 2."""

    exit_code = 2


@dataclass(frozen=True)
class SeriesKey:
    """What must be equal for two figures to be compared: the host's hardware fingerprint, the case,
    the figure (row and name), the resolved case config's hash, the vendor and the compiler."""

    fingerprint: str
    case: str
    row: str
    figure: str
    config_hash: str
    vendor: str
    compiler: str

    @property
    def digest(self) -> str:
        text = json.dumps(
            [self.fingerprint, self.case, self.row, self.figure, self.config_hash, self.vendor, self.compiler]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def label(self) -> str:
        return f"{self.case} {self.row} {self.figure} ({self.vendor}/{self.compiler})"


@dataclass(frozen=True)
class Series:
    """A series as stored: its key, the host's name as the run called it, the figure's unit and
    direction, and the config that was hashed (shown where a step's changes are listed)."""

    key: SeriesKey
    host: str
    unit: str
    higher_is_better: bool
    config: dict[str, Any] = field(default_factory=dict, compare=False)
    id: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Point:
    """One figure of one series in one run."""

    series: Series
    at: str  # ISO 8601 UTC: when the run started
    value: float
    low: float | None = None  # the 95 % interval (across repetitions, or the window's own)
    high: float | None = None
    n: int = 1  # repetitions
    valid: bool = True
    software: dict[str, Any] = field(default_factory=dict)
    run_key: str = ""
    report: str | None = None  # the run's report.html


@dataclass(frozen=True)
class RunEntry:
    """A run folder's identity and where its files are."""

    run_key: str
    started_at: str
    run_dir: str
    report: str | None = None
    mode: str | None = None


def _tables():
    """The schema (built on first use: SQLAlchemy is imported only where the history is used)."""
    from sqlalchemy import (
        Boolean,
        Column,
        Float,
        ForeignKey,
        Integer,
        MetaData,
        PrimaryKeyConstraint,
        String,
        Table,
        Text,
    )

    metadata = MetaData()
    meta = Table("inferperf_meta", metadata, Column("key", String(64), primary_key=True), Column("value", String(256)))
    runs = Table(
        "inferperf_runs",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("run_key", String(200), nullable=False, unique=True),
        Column("started_at", String(40), nullable=False),
        Column("run_dir", Text, nullable=False),
        Column("report", Text),
        Column("mode", String(32)),
        Column("added_at", String(40), nullable=False),
    )
    series = _series_table(metadata)
    software = Table(
        "inferperf_software",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("digest", String(32), nullable=False, unique=True),
        Column("description", Text, nullable=False),
    )
    points = Table(
        "inferperf_points",
        metadata,
        Column("series_id", Integer, ForeignKey("inferperf_series.id"), nullable=False),
        Column("run_id", Integer, ForeignKey("inferperf_runs.id"), nullable=False),
        Column("software_id", Integer, ForeignKey("inferperf_software.id"), nullable=False),
        Column("at", String(40), nullable=False),
        Column("value", Float, nullable=False),
        Column("low", Float),
        Column("high", Float),
        Column("n", Integer, nullable=False),
        Column("valid", Boolean, nullable=False),
        PrimaryKeyConstraint("series_id", "run_id"),
    )
    return metadata, meta, runs, series, software, points


def _series_table(metadata):
    """A series: one figure of one case's row on one host (its fingerprint) and config."""
    from sqlalchemy import Boolean, Column, Integer, String, Table, Text

    return Table(
        "inferperf_series",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("digest", String(32), nullable=False, unique=True),
        Column("fingerprint", String(64), nullable=False),
        Column("host", String(255), nullable=False),
        Column("case_name", String(255), nullable=False),
        Column("row_label", String(255), nullable=False),
        Column("figure", String(64), nullable=False),
        Column("config_hash", String(64), nullable=False),
        Column("vendor", String(64), nullable=False),
        Column("compiler", String(128), nullable=False),
        Column("unit", String(32), nullable=False),
        Column("higher_is_better", Boolean, nullable=False),
        Column("config", Text, nullable=False),
    )


_SCHEMA: tuple | None = None
_SCHEMA_LOCK = threading.Lock()  # built once even while ``warm`` builds it on another thread


def _schema():
    global _SCHEMA
    with _SCHEMA_LOCK:
        if _SCHEMA is None:
            _SCHEMA = _tables()
        return _SCHEMA


def warm(url: str) -> None:
    """Ahead of ``Store.open(url)``: import SQLAlchemy and ``url``'s dialect and driver, and build the
    tables' declaration, connecting to nothing, for a caller with time to spare before the run's end
    (utils/cli/hosts.py). Raises what the import or the URL raises; ``open`` says it again, in one line."""
    from sqlalchemy import create_engine, inspect, select  # noqa: F401 - what open and add_runs use
    from sqlalchemy.pool import NullPool

    _schema()
    create_engine(url, poolclass=NullPool).dispose()  # loads the dialect and its DBAPI module; no connection


def resolve_url(value: Any, log_path: Path) -> str | None:
    """host.yaml's ``HISTORY`` as a SQLAlchemy URL: absent, the SQLite file under the log path;
    ``off`` (or false), None; a file path, that SQLite file; ``sqlite:///…`` or ``postgresql://…``
    as given (PostgreSQL through psycopg 3). A ValueError (one line) for anything else, and for a
    password in the URL: a secret does not belong in host.yaml (libpq reads PGPASSWORD or ~/.pgpass)."""
    if value is None:
        return f"sqlite:///{Path(log_path) / DEFAULT_FILE}"
    if value is False or (isinstance(value, str) and value.strip().lower() in OFF):
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a PostgreSQL or SQLite URL, a file path or 'off', got {value!r}")
    text = value.strip()
    if "://" not in text:
        path = Path(text).expanduser()
        return f"sqlite:///{path if path.is_absolute() else Path(log_path) / path}"
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(text)
    except (ArgumentError, ValueError) as exc:
        raise ValueError(f"is not a database URL ({exc})") from None
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(f"names the backend {backend!r}: use postgresql://… or sqlite:///…")
    if url.password:
        raise ValueError("holds a password: a secret does not belong in host.yaml (use PGPASSWORD or ~/.pgpass)")
    if backend == "postgresql":
        if not url.host and "host" not in url.query:
            raise ValueError(f"names no PostgreSQL host: {url.render_as_string(hide_password=True)}")
        if url.port is not None and not 0 < url.port < 65536:
            raise ValueError(f"has port {url.port}, outside 1-65535")
        url = url.set(drivername="postgresql+psycopg")
    elif not url.database:
        raise ValueError("names no SQLite file: use sqlite:////absolute/path.sqlite")
    return url.render_as_string(hide_password=False)


def shown_url(url: str) -> str:
    """The URL as it may be printed: never a password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL that does not parse is shown without its credentials part
        return url.split("@")[-1]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:32]


class Store:
    """An open history: ``Store.open(url)``; ``add_runs`` writes, ``series`` and ``points`` read."""

    def __init__(self, engine: Any, url: str) -> None:
        self.engine = engine
        self.url = url

    @property
    def where(self) -> str:
        return shown_url(self.url)

    # ---- opening ------------------------------------------------------------------------------
    @classmethod
    def open(cls, url: str, create: bool = True) -> "Store":
        """Connect, create the tables if the store is new (``create``), and check the schema version;
        a ``HistoryError`` naming the store for anything that stops it."""
        from sqlalchemy import create_engine, event
        from sqlalchemy.pool import NullPool

        is_sqlite = url.startswith("sqlite")
        if is_sqlite:
            path = Path(url.split(":///", 1)[1])
            if not create and not path.is_file():
                raise HistoryError(f"history {path}: no such file (no run has been recorded there yet)")
            if create:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise HistoryError(f"history {path}: cannot create its folder: {exc.strerror or exc}") from None
            engine = create_engine(url, poolclass=NullPool, connect_args={"timeout": BUSY_TIMEOUT_S})

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001 - SQLAlchemy's hook
                cursor = dbapi_connection.cursor()
                cursor.execute("PRAGMA foreign_keys=ON")
                cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
                cursor.close()
        else:
            engine = create_engine(
                url, poolclass=NullPool, connect_args={"connect_timeout": 10, "application_name": "inferperf"}
            )
        store = cls(engine, url)
        store._prepare(create, is_sqlite)
        return store

    def _prepare(self, create: bool, is_sqlite: bool) -> None:
        metadata, meta, *_ = _schema()
        from sqlalchemy import inspect, select

        with self._failures("opening"):
            if is_sqlite and create:
                with self.engine.connect() as conn:  # WAL: readers never wait for the writer
                    conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            with self.engine.begin() as conn:
                if "inferperf_meta" not in set(inspect(conn).get_table_names()):
                    if not create:
                        raise HistoryError(f"history {self.where}: not an InferPerf history (no inferperf_meta table)")
                    # A new store: created under the writers' lock, in one transaction, so that two runs
                    # that finish at once on a new store do not both create it (the second waits, then
                    # finds it whole).
                    self._lock_for_writing(conn)
                    if "inferperf_meta" not in set(inspect(conn).get_table_names()):
                        metadata.create_all(conn)
                        conn.execute(meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
                        return
                found = conn.execute(select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
        try:
            version = int(found)
        except (TypeError, ValueError):
            raise HistoryError(f"history {self.where}: schema_version {found!r} is not a number") from None
        if version != SCHEMA_VERSION:
            side = "newer" if version > SCHEMA_VERSION else "older"
            raise HistoryError(
                f"history {self.where}: schema version {version} is {side} than this InferPerf's "
                f"({SCHEMA_VERSION}); see docs/history.md, 'Schema versions', for the migration"
            )

    def _lock_for_writing(self, conn: Any) -> None:
        """Take the store's one writer lock for the rest of ``conn``'s transaction: SQLite's write lock
        (``BEGIN IMMEDIATE``: waits up to the busy timeout), PostgreSQL's transaction-level advisory
        lock. Writers then run one after another, each reading what the one before it committed."""
        if self.engine.dialect.name == "sqlite":
            if not conn.connection.dbapi_connection.in_transaction:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITER_LOCK})")

    def _failures(self, doing: str):
        folder = Path(self.url.split(":///", 1)[1]).parent if self.url.startswith("sqlite") else None
        return _Failures(self.where, doing, folder)

    def close(self) -> None:
        self.engine.dispose()

    # ---- writing ------------------------------------------------------------------------------
    def add_runs(self, runs: Iterable[tuple[RunEntry, list[Point]]], batch: int = 500) -> tuple[int, int]:
        """Add each run with its points, ``batch`` runs a transaction (a run is never split);
        a run whose key is already stored adds nothing. Returns (runs added, points added)."""
        added_runs = added_points = 0
        pending: list[tuple[RunEntry, list[Point]]] = []
        for item in runs:
            pending.append(item)
            if len(pending) >= batch:
                r, p = self._add_batch(pending)
                added_runs, added_points, pending = added_runs + r, added_points + p, []
        if pending:
            r, p = self._add_batch(pending)
            added_runs, added_points = added_runs + r, added_points + p
        return added_runs, added_points

    def _insert_ignore(self, table: Any) -> Any:
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table).on_conflict_do_nothing()
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).on_conflict_do_nothing()

    def _add_batch(self, items: list[tuple[RunEntry, list[Point]]]) -> tuple[int, int]:
        from sqlalchemy import select

        _, _, runs, series, software, points = _schema()
        with self._failures("writing"), self.engine.begin() as conn:
            self._lock_for_writing(conn)  # the runs already stored are read under the lock they are written under
            known: set[str] = set()
            for chunk in _chunks(list({entry.run_key for entry, _ in items}), 500):
                known.update(conn.execute(select(runs.c.run_key).where(runs.c.run_key.in_(chunk))).scalars())
            fresh = []
            for entry, pts in items:  # a run named twice in one batch (a folder and its parent): the first
                if entry.run_key not in known:
                    known.add(entry.run_key)
                    fresh.append((entry, pts))
            if not fresh:
                return 0, 0
            # Each series' and software description's digest once: a batch's points share a few of each.
            key_digests: dict[SeriesKey, str] = {}
            series_rows: dict[str, dict[str, Any]] = {}
            software_digests: dict[int, str] = {}  # by id(): a run's points share one software dict
            descriptions: dict[str, dict[str, str]] = {}
            for _, pts in fresh:
                for p in pts:
                    if p.series.key not in key_digests:
                        key_digests[p.series.key] = digest = p.series.key.digest
                        series_rows.setdefault(digest, _series_row(p.series))
                    if id(p.software) not in software_digests:
                        software_digests[id(p.software)] = digest = _digest(p.software)
                        descriptions.setdefault(
                            digest, {"digest": digest, "description": json.dumps(p.software, sort_keys=True)}
                        )
            series_ids = self._ids(conn, series, series_rows)
            software_ids = self._ids(conn, software, descriptions)
            now = _now()
            conn.execute(
                runs.insert(),
                [{"run_key": entry.run_key, "started_at": entry.started_at, "run_dir": entry.run_dir,
                  "report": entry.report, "mode": entry.mode, "added_at": now} for entry, _ in fresh],
            )  # fmt: skip
            run_ids: dict[str, int] = {}
            for chunk in _chunks([entry.run_key for entry, _ in fresh], 500):
                run_ids.update(conn.execute(select(runs.c.run_key, runs.c.id).where(runs.c.run_key.in_(chunk))).all())
            rows = []
            for entry, pts in fresh:
                run_id = run_ids[entry.run_key]
                seen: set[int] = set()
                for p in pts:
                    sid = series_ids[key_digests[p.series.key]]
                    if sid in seen:  # one point per series and run: the first wins
                        continue
                    seen.add(sid)
                    software_id = software_ids[software_digests[id(p.software)]]
                    rows.append(
                        {"series_id": sid, "run_id": run_id, "software_id": software_id, "at": p.at,
                         "value": p.value, "low": p.low, "high": p.high, "n": p.n, "valid": p.valid}
                    )  # fmt: skip
            if rows:
                conn.execute(points.insert(), rows)
        return len(fresh), len(rows)

    def _ids(self, conn: Any, table: Any, rows: dict[str, dict]) -> dict[str, int]:
        """The ids of ``rows`` by digest, inserting those that are new."""
        from sqlalchemy import select

        if not rows:
            return {}
        digests = list(rows)
        ids: dict[str, int] = {}
        for chunk in _chunks(digests, 500):
            ids.update(
                (d, i) for d, i in conn.execute(select(table.c.digest, table.c.id).where(table.c.digest.in_(chunk)))
            )
        missing = [rows[d] for d in digests if d not in ids]
        if missing:
            conn.execute(self._insert_ignore(table), missing)
            for chunk in _chunks([d for d in digests if d not in ids], 500):
                ids.update(
                    (d, i) for d, i in conn.execute(select(table.c.digest, table.c.id).where(table.c.digest.in_(chunk)))
                )
        return ids

    # ---- reading ------------------------------------------------------------------------------
    def all_series(self) -> list[Series]:
        from sqlalchemy import select

        _, _, _, series, _, _ = _schema()
        with self._failures("reading"), self.engine.connect() as conn:
            return [_series_of(row) for row in conn.execute(select(series)).mappings()]

    def points(self, chosen: Iterable[Series]) -> dict[int, list[Point]]:
        """Every point of each series in ``chosen``, oldest first (by run start, then run key)."""
        from sqlalchemy import select

        _, _, runs, series, software, points = _schema()
        by_id = {s.id: s for s in chosen if s.id is not None}
        out: dict[int, list[Point]] = {sid: [] for sid in by_id}
        query = (
            select(
                points.c.series_id, points.c.at, points.c.value, points.c.low, points.c.high, points.c.n,
                points.c.valid, points.c.software_id, runs.c.run_key, runs.c.report,
            )
            .join(runs, runs.c.id == points.c.run_id)
            .order_by(points.c.series_id, points.c.at, runs.c.run_key)
        )  # fmt: skip
        with self._failures("reading"), self.engine.connect() as conn:
            # each software description once (a few per history), not once per point
            descriptions = {
                i: json.loads(text) for i, text in conn.execute(select(software.c.id, software.c.description))
            }
            for chunk in _chunks(list(by_id), 500):
                for sid, at, value, low, high, n, valid, software_id, run_key, report in conn.execute(
                    query.where(points.c.series_id.in_(chunk))
                ):
                    out[sid].append(
                        Point(
                            by_id[sid], at, value, low, high, n, bool(valid), descriptions[software_id], run_key, report
                        )
                    )
        return out

    def count(self) -> tuple[int, int, int]:
        """(runs, series, points) stored."""
        from sqlalchemy import func, select

        _, _, runs, series, _, points = _schema()
        with self._failures("reading"), self.engine.connect() as conn:
            return tuple(  # type: ignore[return-value]
                conn.execute(select(func.count()).select_from(t)).scalar_one() for t in (runs, series, points)
            )


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _series_row(s: Series) -> dict[str, Any]:
    k = s.key
    return {
        "digest": k.digest, "fingerprint": k.fingerprint, "host": s.host, "case_name": k.case, "row_label": k.row,
        "figure": k.figure, "config_hash": k.config_hash, "vendor": k.vendor, "compiler": k.compiler,
        "unit": s.unit, "higher_is_better": s.higher_is_better, "config": json.dumps(s.config, sort_keys=True),
    }  # fmt: skip


def _series_of(row: Any) -> Series:
    key = SeriesKey(
        row["fingerprint"], row["case_name"], row["row_label"], row["figure"], row["config_hash"], row["vendor"],
        row["compiler"],
    )  # fmt: skip
    return Series(key, row["host"], row["unit"], bool(row["higher_is_better"]), json.loads(row["config"]), row["id"])


class _Failures:
    """Any database or file-system failure of the store as one ``HistoryError`` line naming it."""

    def __init__(self, where: str, doing: str, folder: Path | None = None) -> None:
        self.where, self.doing, self.folder = where, doing, folder

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, _tb: Any) -> Literal[False]:
        if exc is None or isinstance(exc, (HistoryError, KeyboardInterrupt, SystemExit)):
            return False
        from sqlalchemy.exc import SQLAlchemyError

        if isinstance(exc, (SQLAlchemyError, OSError)):
            raise HistoryError(f"history {self.where}: {self.doing} failed: {_reason(exc, self.folder)}") from None
        return False


def _reason(exc: BaseException, folder: Path | None = None) -> str:
    """The driver's own message, first line, without SQLAlchemy's statement dump and link; where that
    does not say why (SQLite on a read-only or full file system says "unable to open database file" or
    "disk I/O error"), what the SQLite file's ``folder`` shows."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    lowered = text.lower()
    if "readonly" in lowered or "read-only" in lowered:
        return f"the store is read-only ({text})"
    if "database or disk is full" in lowered or "no space" in lowered:
        return f"the disk is full ({text})"
    if "locked" in lowered:
        return f"the store stayed locked by another writer for {BUSY_TIMEOUT_S:g} s ({text})"
    if "not a database" in lowered or "malformed" in lowered:
        return f"the store is corrupt ({text})"
    state = _file_system(folder)
    if state == "read-only":
        return f"the store is read-only: its file system is mounted read-only ({text})"
    if state == "full":
        return f"the disk is full: no space left on its file system ({text})"
    return text


def _file_system(folder: Path | None) -> str | None:
    """``read-only`` or ``full`` when the SQLite store's folder is on such a file system; else None."""
    import os

    if folder is None:
        return None
    try:
        stat = os.statvfs(folder)
    except OSError:
        return None
    if stat.f_flag & os.ST_RDONLY:
        return "read-only"
    if stat.f_bavail == 0:
        return "full"
    return None
