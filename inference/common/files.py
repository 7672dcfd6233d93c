"""Atomic writes and content hashes: the one definition of each, for both sides.

``atomic_path`` is how every result, cache entry and report reaches its final
name: a temporary file beside the target, renamed into place only when the
writer finished. A writer killed half-way leaves a ``.NAME.*.tmp`` file (or,
from ``atomic_dir``, a ``.NAME.*.tmp`` directory) and never a half-written
target. The writer holds an exclusive ``flock`` on its temporary for its whole
life, so ``sweep_stale_temps`` can tell a dead writer's leftover (it can take
the lock) from a live one's (it cannot), whatever their age and even across
containers that share the host's kernel.

A write that fails because the file system is full, read-only or not a
directory raises ``StorageError`` naming the path (``storage_error``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from common.errors import StorageError

_CHUNK = 1 << 20
TEMP_SUFFIX = ".tmp"
# After a writer failed, a file system with less than this left is taken to be
# full: C++ writers (the ONNX exporter, ONNX Runtime) report ENOSPC in words of
# their own, or not at all.
_FULL_BYTES = 64 * 1024
_STORAGE_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large",
}


def hash_file(path: str | Path, digest: "hashlib._Hash | None" = None) -> "hashlib._Hash":
    digest = digest or hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest


def fingerprint(parts: dict[str, Any], length: int = 16) -> str:
    """A short stable key for a JSON-serialisable description of an artefact."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def tree_files(
    root: str | Path,
    suffixes: tuple[str, ...] | None = None,
    skip_dirs: Iterable[str] = (),
    skip_suffixes: tuple[str, ...] = (".pyc", ".pyo"),
) -> list[Path]:
    """The regular files under ``root`` in a stable order, never following a link
    into a directory (a link loop cannot make it endless). ``suffixes`` keeps only
    those endings; ``skip_dirs`` names directories to leave out at any depth."""
    root = Path(root)
    if root.is_file():
        return [root]
    skip = {"__pycache__", *skip_dirs}
    found: list[Path] = []
    for current, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        for name in sorted(files):
            path = Path(current) / name
            if name.endswith(skip_suffixes) or (suffixes is not None and not name.endswith(suffixes)):
                continue
            if path.is_file():
                found.append(path)
    return found


def hash_tree(
    paths: Iterable[str | Path],
    suffixes: tuple[str, ...] | None = (".py",),
    skip_dirs: Iterable[str] = (),
    relative_to_parent: bool = True,
    digest: "hashlib._Hash | None" = None,
) -> str:
    """Hash the relative names and contents of the files under each of ``paths``.

    Names are taken relative to each root's parent (so the root's own name
    counts) or, with ``relative_to_parent=False``, to the root itself."""
    digest = digest or hashlib.sha256()
    for root in paths:
        root = Path(root)
        base = root.parent if relative_to_parent else root
        for file in tree_files(root, suffixes, skip_dirs):
            digest.update(str(file.relative_to(base)).encode())
            hash_file(file, digest)
    return digest.hexdigest()


def storage_error(exc: BaseException, path: str | Path, doing: str = "writing") -> StorageError | None:
    """``exc`` (raised while ``doing`` ``path``) as a one-line StorageError when the
    cause is the file system (full, read-only, not a directory, no permission), else None."""
    code = getattr(exc, "errno", None)
    if code not in _STORAGE_ERRNOS and isinstance(exc, OSError) and isinstance(exc, FileExistsError):
        code = errno.ENOTDIR  # mkdir over a plain file
    if code not in _STORAGE_ERRNOS:
        if not _nearly_full(Path(path)):
            return None
        code = errno.ENOSPC
    named = getattr(exc, "filename", None)
    if code != errno.ENOSPC and named and not str(named).endswith(TEMP_SUFFIX):
        path = named  # the directory or file the system refused, when it says
    return StorageError(f"{_STORAGE_ERRNOS[code]} {doing} {path}")


def _nearly_full(path: Path) -> bool:
    for candidate in (path, *path.parents):
        try:
            vfs = os.statvfs(candidate)
        except OSError:
            continue
        free = vfs.f_bfree if os.geteuid() == 0 else vfs.f_bavail
        return vfs.f_blocks > 0 and free * vfs.f_frsize < _FULL_BYTES
    return False


def _make_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise (storage_error(exc, directory, "creating directory") or exc) from None


def _locked(path: Path, is_dir: bool) -> int | None:
    """An fd of ``path`` holding its exclusive lock; None when the path was swept
    away between its creation and the lock (the caller makes another)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if is_dir else 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            return fd
    except FileNotFoundError:
        pass
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def _locked_temp(directory: Path, name: str, is_dir: bool) -> tuple[Path, int]:
    _make_dir(directory)
    while True:
        try:
            if is_dir:
                tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=directory))
            else:
                fd, raw = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=directory)
                os.close(fd)
                tmp = Path(raw)
        except OSError as exc:
            raise (storage_error(exc, directory / name, "creating a temporary file for") or exc) from None
        lock = _locked(tmp, is_dir)
        if lock is not None:
            return tmp, lock


@contextmanager
def atomic_path(target: str | Path, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; move it into place only on success.

    The temporary is locked (``flock``) until it is renamed or removed; a body
    that fails for lack of space (or on a read-only file system) raises
    ``StorageError`` naming ``target``."""
    target = Path(target)
    tmp_path, fd = _locked_temp(target.parent, target.name, is_dir=False)
    try:
        try:
            yield tmp_path
            # mkstemp makes 0600 files; results and caches are meant to be shared.
            os.chmod(tmp_path, mode)
            os.replace(tmp_path, target)
        except Exception as exc:
            if isinstance(exc, StorageError):
                raise
            problem = storage_error(exc, target)
            if problem is None:
                raise
            raise problem from exc
    finally:
        try:
            tmp_path.unlink()
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)


@contextmanager
def atomic_dir(parent: str | Path, name: str) -> Iterator[Path]:
    """A private, locked ``.NAME.*.tmp`` directory in ``parent`` for a writer that
    makes several files or chooses their names itself (an ONNX exporter writing
    external data); removed with everything in it when the block ends. The
    caller moves what it keeps out of it (with ``atomic_path`` or ``os.replace``)."""
    parent = Path(parent)
    tmp_dir, fd = _locked_temp(parent, name, is_dir=True)
    try:
        try:
            yield tmp_dir
        except Exception as exc:
            if isinstance(exc, StorageError):
                raise
            problem = storage_error(exc, parent / name)
            if problem is None:
                raise
            raise problem from exc
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        os.close(fd)


def writable_dir(path: str | Path, role: str) -> Path:
    """Create ``path`` if needed and prove a file can be made in it; else one
    StorageError naming ``role`` and the path (a plain file, a read-only mount)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise StorageError(f"{role} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", suffix=TEMP_SUFFIX, dir=path)
        os.close(fd)
        with suppress(FileNotFoundError):  # another run's sweep may have taken it already
            os.unlink(probe)
    except OSError as exc:
        reason = _STORAGE_ERRNOS.get(exc.errno or 0) or exc.strerror or type(exc).__name__
        if isinstance(exc, FileExistsError) or exc.errno == errno.ENOTDIR:
            reason = "a parent exists and is not a directory"
        raise StorageError(f"{role} {path}: not writable: {reason}") from None
    return path


def listed(directory: str | Path) -> list[os.DirEntry]:
    """``directory``'s entries, or none where it cannot be listed (absent, not a folder, not readable)."""
    try:
        return list(os.scandir(directory))
    except OSError:
        return []


def sweep_stale_temps(directory: str | Path) -> list[Path]:
    """Remove the ``.NAME.*.tmp`` files and directories in ``directory`` whose
    writer is dead (their lock can be taken); returns what was removed. A live
    writer's temporary, in this process or any other, is left alone."""
    removed: list[Path] = []
    for entry in listed(directory):
        if not (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)):
            continue
        path = Path(entry.path)
        try:
            info = os.stat(path, follow_symlinks=False)
            is_dir = stat.S_ISDIR(info.st_mode)
            if not (is_dir or stat.S_ISREG(info.st_mode)):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | (os.O_DIRECTORY if is_dir else 0))
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its writer is alive
                continue
            if os.fstat(fd).st_ino != info.st_ino:
                continue
            if is_dir:
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def _finite(value: Any) -> Any:
    """Strict JSON has no NaN or Infinity: such a float is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_text(data: Any, indent: int | None = 2) -> str:
    """The one JSON encoding of results: strict (no NaN/Infinity, which strict
    parsers reject: such a float is null), indented, or one line with ``indent=None``."""
    text = json.dumps(_finite(data), indent=indent, sort_keys=False, default=str, allow_nan=False)
    return text + "\n" if indent is not None else text


def write_json_atomic(target: str | Path, data: Any) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json_text(data), encoding="utf-8")


class LogFileSink:
    """A log file as a loguru sink: each message appended and flushed. The first write the file
    system refuses (full, read-only) calls ``on_failure(exc)`` (inside the ``except``: it may raise);
    later messages are dropped, so one failure is said once, not under every later log line."""

    def __init__(self, path: Path, on_failure: Callable[[OSError], None]) -> None:
        self.on_failure = on_failure
        self.handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the sink's life; stop() closes it
        self.failed = False

    def write(self, message: str) -> None:
        if self.failed:
            return
        try:
            self.handle.write(message)
            self.handle.flush()
        except OSError as exc:
            self.failed = True
            self.on_failure(exc)

    def stop(self) -> None:
        with suppress(OSError):
            self.handle.close()
