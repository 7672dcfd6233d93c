"""Start a REAL PostgreSQL server for tests (Debian's ``postgresql`` package), no distro service.

:func:`start_postgres` runs ``initdb`` and then ``postgres`` from the newest
``/usr/lib/postgresql/<version>/bin`` in a temporary directory of its own: the cluster's data
directory, its unix socket and its log. It listens on 127.0.0.1 at a free port and on that socket,
with ``trust`` authentication for local connections only (the superuser ``postgres``, no password).
Nothing under /etc, /run or /var/lib/postgresql is used, and Debian's cluster service is never
started, so any other PostgreSQL on this machine is unaffected.

PostgreSQL refuses to run as root. Run as root (the test suite is), ``initdb`` and ``postgres`` run
as the ``postgres`` user the package creates: the directory is made in /tmp (which that user can
reach), owned by it, and each binary is executed as that user directly (``subprocess``'s
``user=``/``group=``: no ``su``/``runuser`` in between, so the process started IS the postmaster
and stopping it needs no signal forwarding). Run as any other user, they run as that user.

Typical use::

    server = start_postgres()
    try:
        url = server.new_database()  # postgresql://postgres@127.0.0.1:PORT/t1, a fresh database
        ...
    finally:
        server.stop()  # fast shutdown; the directory is removed; nothing is left running

or the pytest fixtures below: ``postgres_server`` (one server per test session; under ``CI=true``
a server that does not come up FAILS the tests that use it, otherwise they are skipped with the
reason) and ``postgres_url`` (a fresh, empty database of that server for each test).

Requirements: Debian's ``postgresql`` (scripts/install_system_deps.sh); psycopg 3 (the project's
own PostgreSQL driver) to wait for the server and create databases.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from tests.infra.slurm import free_port

BIN_GLOB = "/usr/lib/postgresql/*/bin"
SERVICE_USER = "postgres"  # the user Debian's package creates; the server's superuser role too
SUPERUSER = "postgres"


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL binaries are missing, or the server did not come up."""


def find_bin() -> Path:
    """The newest installed ``/usr/lib/postgresql/<version>/bin`` that has ``initdb`` and ``postgres``."""

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    for found in sorted(glob.glob(BIN_GLOB), key=version, reverse=True):
        if os.access(Path(found) / "initdb", os.X_OK) and os.access(Path(found) / "postgres", os.X_OK):
            return Path(found)
    raise PostgresUnavailable(
        f"no PostgreSQL server under {BIN_GLOB}; install postgresql (scripts/install_system_deps.sh)"
    )


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        return f"({path.name}: no log)"


@dataclass
class PostgresServer:
    """A running test server. ``url(db)`` is a SQLAlchemy/libpq URL to one of its databases."""

    root: str  # the temporary directory: data/, the socket, the log
    bin_dir: str
    port: int
    host: str = "127.0.0.1"
    process: Optional[subprocess.Popen] = field(default=None, repr=False)
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    @property
    def data_dir(self) -> Path:
        return Path(self.root) / "data"

    @property
    def socket_dir(self) -> str:
        return self.root

    @property
    def log_path(self) -> Path:
        return Path(self.root) / "postgres.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def connect(self, database: str = "postgres"):  # noqa: ANN201 - a psycopg connection
        import psycopg

        return psycopg.connect(
            host=self.host, port=self.port, user=SUPERUSER, dbname=database, connect_timeout=5, autocommit=True
        )

    def new_database(self, prefix: str = "t") -> str:
        """A fresh, empty database (``<prefix><n>``); its URL."""
        name = f"{prefix}{next(self._numbers)}"
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database ``new_database`` made (its connections are ended first)."""
        name = url.rsplit("/", 1)[1]
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self, timeout: float = 20.0, remove: bool = True) -> None:
        """Fast shutdown (SIGINT: open sessions are ended, then the server exits), SIGKILL if that
        takes longer than ``timeout``; then every process of its session is ended and, with
        ``remove``, the directory removed. Idempotent."""
        proc = self.process
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=timeout)
            try:  # its backends are its children, in the session it leads: none may outlive it
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process = None
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _as_service_user() -> dict:
    """``subprocess`` arguments that run a binary as the ``postgres`` user when we are root."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise PostgresUnavailable(
            f"running as root and there is no {SERVICE_USER!r} user to run PostgreSQL as "
            "(Debian's postgresql creates it)"
        ) from None
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _env(root: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C", "LC_ALL": "C", "HOME": str(root), "TZ": "UTC"}


def _ready(server: PostgresServer) -> bool:
    import psycopg

    try:
        with server.connect() as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def start_postgres(parent: Optional[str] = None, timeout: float = 60.0, retries: int = 3) -> PostgresServer:
    """Initialise a cluster in a new directory under ``parent`` (default: the system's temporary
    folder, which the ``postgres`` user can reach) and start its server (module docstring).
    Raises :class:`PostgresUnavailable` with the log when it does not come up."""
    bin_dir = find_bin()
    as_user = _as_service_user()
    root = Path(tempfile.mkdtemp(prefix="inferperf-pg-", dir=parent))
    try:
        if as_user:
            os.chown(root, as_user["user"], as_user["group"])
        os.chmod(root, 0o700)
        data = root / "data"
        init = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
             "--locale=C", "--no-sync", "--no-instructions"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=root, env=_env(root), **as_user,
        )  # fmt: skip
        if init.returncode != 0:
            raise PostgresUnavailable(f"initdb failed ({init.returncode}): {init.stdout.strip()[-2000:]}")
        # Local connections only (the socket, and 127.0.0.1), trusted: nothing listens elsewhere.
        (data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n", encoding="utf-8")
        last = ""
        for _ in range(max(1, retries)):
            server = PostgresServer(str(root), str(bin_dir), free_port())
            with open(server.log_path, "ab") as log:
                server.process = subprocess.Popen(
                    [str(bin_dir / "postgres"), "-D", str(data), "-p", str(server.port),
                     "-c", f"listen_addresses={server.host}", "-c", f"unix_socket_directories={root}",
                     "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                     "-c", "max_connections=50", "-c", "shared_buffers=32MB"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=_env(root),
                    start_new_session=True, **as_user,
                )  # fmt: skip
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and server.running and not _ready(server):
                time.sleep(0.1)
            if server.running and _ready(server):
                return server
            last = _tail(server.log_path)
            server.stop(remove=False)
            if "could not bind" not in last and "already in use" not in last:
                break
        raise PostgresUnavailable(f"postgres did not start: {last}")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


try:  # the fixtures only; the helpers above need no pytest
    import pytest
except ImportError:  # pragma: no cover
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def postgres_server():
        """A running :class:`PostgresServer` for the session (skipped -- or failed under CI=true --
        when it cannot be started); stopped, and its directory removed, at the session's end."""
        from tests.infra.docker_env import require

        try:
            server = start_postgres()
        except (PostgresUnavailable, OSError, subprocess.SubprocessError, ImportError) as exc:
            require(False, f"PostgreSQL test server unavailable: {exc}")
            return
        try:
            yield server
        finally:
            server.stop()

    @pytest.fixture
    def postgres_url(postgres_server):
        """A fresh, empty database of the session's server for this test: its URL. Dropped after."""
        url = postgres_server.new_database()
        yield url
        postgres_server.drop_database(url)
