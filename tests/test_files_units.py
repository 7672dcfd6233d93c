"""Fast unit tests of common.files: storage errors (as a pure function and on real
tmpfs mounts: full, out of inodes, read-only), the nearly-full test, the locked
temporaries, writable_dir's probe and failures, the sweep's choices and its order
independence, tree hashing and strict JSON. Real files in tmp_path; a test that
needs a mount is skipped, saying why, where mounting is impossible."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from common.errors import StorageError
from common.files import (
    _FULL_BYTES,
    _locked,
    _nearly_full,
    atomic_dir,
    atomic_path,
    hash_tree,
    json_text,
    storage_error,
    sweep_stale_temps,
    tree_files,
    writable_dir,
)


@contextmanager
def mounted_tmpfs(path: Path, options: str):
    """A real tmpfs at ``path`` with mount ``options``; skips the test where mounting is impossible."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---- storage_error as a pure function ---------------------------------------------


@pytest.mark.parametrize(
    "code, words",
    [
        (errno.ENOSPC, "no space left on device"),
        (errno.EDQUOT, "disk quota exceeded"),
        (errno.EROFS, "read-only file system"),
        (errno.ENOTDIR, "not a directory"),
        (errno.EACCES, "permission denied"),
        (errno.EPERM, "operation not permitted"),
        (errno.EFBIG, "file too large"),
    ],
)
def test_storage_error_names_each_storage_errno_and_the_path_when_the_system_names_none(tmp_path, code, words):
    problem = storage_error(OSError(code, os.strerror(code)), tmp_path / "result.json")
    assert isinstance(problem, StorageError)
    assert str(problem) == f"{words} writing {tmp_path / 'result.json'}"


def test_storage_error_prefers_the_path_the_system_refused_over_the_one_written(tmp_path):
    exc = OSError(errno.EROFS, "Read-only file system", "/mnt/ro/cache")
    assert (
        str(storage_error(exc, tmp_path / "x.json", "creating directory"))
        == "read-only file system creating directory /mnt/ro/cache"
    )
    # PermissionError and NotADirectoryError carry the refused name the same way
    exc = PermissionError(errno.EACCES, "Permission denied", "/srv/results")
    assert str(storage_error(exc, tmp_path / "x.json")) == "permission denied writing /srv/results"


def test_storage_error_keeps_the_target_when_the_refused_name_is_a_temporary(tmp_path):
    exc = OSError(errno.EROFS, "Read-only file system", str(tmp_path / ".x.json.k2j3.tmp"))
    assert str(storage_error(exc, tmp_path / "x.json")) == f"read-only file system writing {tmp_path / 'x.json'}"


def test_storage_error_for_a_full_disk_names_the_target_not_the_file_the_system_named(tmp_path):
    exc = OSError(errno.ENOSPC, "No space left on device", "/data/onnx/model.onnx.data")
    assert (
        str(storage_error(exc, tmp_path / "model.onnx", "exporting"))
        == f"no space left on device exporting {tmp_path / 'model.onnx'}"
    )


def test_storage_error_reads_mkdir_over_a_plain_file_as_not_a_directory(tmp_path):
    exc = FileExistsError(errno.EEXIST, "File exists", "/cache/engine")
    assert (
        str(storage_error(exc, tmp_path / "engine", "creating directory"))
        == "not a directory creating directory /cache/engine"
    )
    exc = FileExistsError(errno.EEXIST, "File exists")
    assert (
        str(storage_error(exc, tmp_path / "engine", "creating directory"))
        == f"not a directory creating directory {tmp_path / 'engine'}"
    )


def test_storage_error_is_none_for_other_errors_on_a_roomy_file_system(tmp_path):
    assert storage_error(OSError(errno.EIO, "Input/output error", str(tmp_path)), tmp_path / "x") is None
    assert storage_error(RuntimeError("onnx said no"), tmp_path / "x") is None
    assert storage_error(FileNotFoundError(errno.ENOENT, "No such file", "/x"), tmp_path / "x") is None


def test_storage_error_reads_any_error_on_a_full_file_system_as_no_space(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "size=4k") as mnt:
        (mnt / "fill").write_bytes(b"x" * 4096)
        target = mnt / "sub" / "model.onnx"  # not there yet: its parents are statted
        exc = RuntimeError("protobuf: failed to serialize")
        assert str(storage_error(exc, target, "exporting")) == f"no space left on device exporting {target}"
        exc = OSError(errno.EIO, "Input/output error", "/elsewhere/name")
        assert str(storage_error(exc, target)) == f"no space left on device writing {target}"


# ---- _nearly_full --------------------------------------------------------------------


def test_nearly_full_at_exactly_the_threshold_is_not_full(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "size=64k") as mnt:
        vfs = os.statvfs(mnt)
        assert vfs.f_bfree * vfs.f_frsize == _FULL_BYTES == 65536  # precondition: 16 free pages of 4 KiB
        assert _nearly_full(mnt / "x") is False
        (mnt / "one").write_bytes(b"y")  # one page taken
        assert _nearly_full(mnt / "x") is True


def test_nearly_full_on_a_one_block_file_system(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "size=4k") as mnt:
        vfs = os.statvfs(mnt)
        assert (vfs.f_blocks, vfs.f_bfree) == (1, 1)  # precondition
        assert _nearly_full(mnt / "a" / "b") is True


def test_a_file_system_without_blocks_is_never_full():
    assert os.statvfs("/proc").f_blocks == 0  # precondition: procfs counts no blocks
    assert _nearly_full(Path("/proc/self/status")) is False
    assert storage_error(OSError(errno.EIO, "Input/output error"), "/proc/self/status") is None


def test_nearly_full_uses_the_first_parent_that_exists(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "size=4k") as mnt:
        assert _nearly_full(mnt / "no" / "such" / "dir" / "file") is True
    assert _nearly_full(tmp_path / "no" / "such" / "file") is False


def _fake_statvfs(bfree: int, bavail: int):
    result = os.statvfs_result((4096, 4096, 1000, bfree, bavail, 100, 50, 50, 0, 255))
    return lambda path: result


def test_nearly_full_counts_the_reserved_blocks_for_root_only(monkeypatch, tmp_path):
    # ext4 keeps blocks for root: f_bfree counts them, f_bavail does not (simulated statvfs).
    monkeypatch.setattr(os, "statvfs", _fake_statvfs(bfree=500, bavail=10))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _nearly_full(tmp_path) is False
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert _nearly_full(tmp_path) is True
    monkeypatch.setattr(os, "geteuid", lambda: 1)
    assert _nearly_full(tmp_path) is True
    monkeypatch.setattr(os, "statvfs", _fake_statvfs(bfree=10, bavail=500))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _nearly_full(tmp_path) is True
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert _nearly_full(tmp_path) is False


def test_nearly_full_is_false_when_no_candidate_can_be_statted(monkeypatch, tmp_path):
    def refuse(path):
        raise OSError(errno.ENOSYS, "Function not implemented", str(path))

    monkeypatch.setattr(os, "statvfs", refuse)
    assert _nearly_full(tmp_path / "x") is False
    assert storage_error(RuntimeError("other"), tmp_path / "x") is None


# ---- _make_dir and _locked_temp failures, on real mounts ---------------------------


def test_atomic_path_whose_directories_cannot_be_made_for_lack_of_inodes(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "size=64k,nr_inodes=1") as mnt:
        target = mnt / "a" / "b" / "result.json"
        with pytest.raises(StorageError) as caught:
            with atomic_path(target):
                pytest.fail("the body must not run")
        assert str(caught.value) == f"no space left on device creating directory {mnt / 'a' / 'b'}"
        assert caught.value.__cause__ is None and caught.value.__suppress_context__ is True
        assert os.listdir(mnt) == []


def test_atomic_path_under_a_plain_file_is_not_a_directory(tmp_path):
    (tmp_path / "plain").write_text("a file, not a directory")
    target = tmp_path / "plain" / "sub" / "result.json"
    with pytest.raises(StorageError) as caught:
        with atomic_path(target):
            pytest.fail("the body must not run")
    assert str(caught.value) == f"not a directory creating directory {tmp_path / 'plain' / 'sub'}"


def test_make_dir_passes_other_errors_through_unchanged(tmp_path):
    target = tmp_path / ("n" * 300) / "result.json"
    with pytest.raises(OSError) as caught:
        with atomic_path(target):
            pytest.fail("the body must not run")
    assert type(caught.value) is OSError and caught.value.errno == errno.ENAMETOOLONG


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_temporary_on_a_read_only_mount_names_the_target(tmp_path, kind):
    with mounted_tmpfs(tmp_path / "mnt", "size=1m,ro") as mnt:
        with pytest.raises(StorageError) as caught:
            with atomic_path(mnt / "result.json") if kind == "file" else atomic_dir(mnt, "result.json"):
                pytest.fail("the body must not run")
        assert str(caught.value) == f"read-only file system creating a temporary file for {mnt / 'result.json'}"
        assert caught.value.__cause__ is None and caught.value.__suppress_context__ is True


def test_a_temporary_that_cannot_be_made_for_another_reason_raises_that_error(tmp_path):
    with pytest.raises(OSError) as caught:
        with atomic_path(tmp_path / ("n" * 300)):
            pytest.fail("the body must not run")
    assert type(caught.value) is OSError and caught.value.errno == errno.ENAMETOOLONG
    assert os.listdir(tmp_path) == []


# ---- the locked temporaries ------------------------------------------------------------


def test_atomic_dir_makes_a_hidden_tmp_directory_in_the_parent(tmp_path):
    with atomic_dir(tmp_path / "cache", "model.onnx") as work:
        assert work.parent == tmp_path / "cache"
        assert re.fullmatch(r"\.model\.onnx\.[a-z0-9_]{8}\.tmp", work.name), work.name
        assert work.is_dir() and os.listdir(work) == []
        assert sweep_stale_temps(tmp_path / "cache") == []  # locked: its writer is alive
    assert os.listdir(tmp_path / "cache") == []


def test_atomic_path_makes_a_hidden_tmp_file_beside_the_target(tmp_path):
    with atomic_path(tmp_path / "engine.plan", mode=0o640) as tmp:
        assert tmp.parent == tmp_path
        assert re.fullmatch(r"\.engine\.plan\.[a-z0-9_]{8}\.tmp", tmp.name), tmp.name
        tmp.write_bytes(b"plan")
    assert os.listdir(tmp_path) == ["engine.plan"]
    assert stat_mode(tmp_path / "engine.plan") == 0o640


def stat_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o7777


def test_locked_refuses_a_file_where_a_directory_was_made(tmp_path):
    (tmp_path / "f").write_text("x")
    before = open_fds()
    with pytest.raises(NotADirectoryError):
        _locked(tmp_path / "f", True)
    assert open_fds() == before


def test_locked_opens_read_only(tmp_path):
    # a directory can be opened read-only but never for writing (EISDIR)
    (tmp_path / "d").mkdir()
    fd = _locked(tmp_path / "d", False)
    try:
        assert isinstance(fd, int) and fd >= 0
        assert os.fstat(fd).st_ino == os.stat(tmp_path / "d").st_ino
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    finally:
        os.close(fd)


def test_locked_holds_the_lock_on_the_file_itself(tmp_path):
    (tmp_path / "f").write_text("x")
    fd = _locked(tmp_path / "f", False)
    try:
        other = os.open(tmp_path / "f", os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    finally:
        os.close(fd)


def test_locked_gives_up_on_a_path_that_is_now_a_link_and_closes_its_fd(tmp_path):
    (tmp_path / "f").write_text("x")
    os.symlink(tmp_path / "f", tmp_path / "link")
    before = open_fds()
    assert _locked(tmp_path / "link", False) is None
    assert open_fds() == before


def test_locked_gives_up_on_a_path_removed_before_its_lock(monkeypatch, tmp_path):
    (tmp_path / "f").write_text("x")
    real_flock = fcntl.flock

    def swept_meanwhile(fd, op):
        real_flock(fd, op)
        os.unlink(tmp_path / "f")  # another process's sweep took it between open and lock

    monkeypatch.setattr(fcntl, "flock", swept_meanwhile)
    before = open_fds()
    assert _locked(tmp_path / "f", False) is None
    assert open_fds() == before


def test_locked_closes_its_fd_and_raises_when_the_lock_fails(monkeypatch, tmp_path):
    (tmp_path / "f").write_text("x")

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")  # NFS without a lock daemon

    monkeypatch.setattr(fcntl, "flock", no_locks)
    before = open_fds()
    with pytest.raises(OSError) as caught:
        _locked(tmp_path / "f", False)
    assert caught.value.errno == errno.ENOLCK
    assert open_fds() == before


# ---- writable_dir ------------------------------------------------------------------------


_IN_CREATE = 0x100
_IN_NONBLOCK = os.O_NONBLOCK


def created_names(directory: Path, action) -> list[str]:
    """The names created in ``directory`` while ``action`` ran, as inotify saw them."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fd = libc.inotify_init1(_IN_NONBLOCK)
    if fd < 0:
        pytest.skip(f"no inotify here: {os.strerror(ctypes.get_errno())}")
    try:
        if libc.inotify_add_watch(fd, str(directory).encode(), _IN_CREATE) < 0:
            pytest.skip(f"cannot watch {directory}: {os.strerror(ctypes.get_errno())}")
        action()
        data = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    names, offset = [], 0
    while offset < len(data):
        _wd, _mask, _cookie, length = struct.unpack_from("iIII", data, offset)
        offset += 16
        names.append(data[offset : offset + length].rstrip(b"\0").decode())
        offset += length
    return names


def test_writable_dir_probes_with_a_temporary_the_sweep_would_recognise(tmp_path):
    made = created_names(tmp_path, lambda: writable_dir(tmp_path, "results"))
    assert len(made) == 1
    assert re.fullmatch(r"\.write-probe\.[a-z0-9_]{8}\.tmp", made[0]), made
    assert os.listdir(tmp_path) == []


def test_writable_dir_creates_missing_directories_and_returns_the_path(tmp_path):
    assert writable_dir(str(tmp_path / "a" / "b"), "cache") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir() and os.listdir(tmp_path / "a" / "b") == []


def test_writable_dir_tolerates_a_probe_swept_by_another_run(monkeypatch, tmp_path):
    real_mkstemp = tempfile.mkstemp

    def swept_at_once(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        os.unlink(name)  # another run's sweep_stale_temps got there first
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", swept_at_once)
    assert writable_dir(tmp_path, "results") == tmp_path


def test_writable_dir_under_a_plain_file(tmp_path):
    (tmp_path / "plain").write_text("x")
    with pytest.raises(StorageError) as caught:
        writable_dir(tmp_path / "plain" / "sub", "results")
    assert (
        str(caught.value)
        == f"results {tmp_path / 'plain' / 'sub'}: not writable: a parent exists and is not a directory"
    )
    assert caught.value.__cause__ is None and caught.value.__suppress_context__ is True


def test_writable_dir_that_is_a_plain_file(tmp_path):
    (tmp_path / "plain").write_text("x")
    with pytest.raises(StorageError) as caught:
        writable_dir(tmp_path / "plain", "cache")
    assert str(caught.value) == f"cache {tmp_path / 'plain'}: exists and is not a directory"


def test_writable_dir_names_an_unlisted_errno_in_the_systems_words(tmp_path):
    os.symlink("loop", tmp_path / "loop")  # a link to itself: ELOOP, not in the table
    path = tmp_path / "loop" / "results"
    with pytest.raises(StorageError) as caught:
        writable_dir(path, "results")
    assert str(caught.value) == f"results {path}: not writable: Too many levels of symbolic links"


def test_writable_dir_names_an_error_without_errno_by_its_type(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise OSError("probe refused")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(StorageError) as caught:
        writable_dir(tmp_path, "results")
    assert str(caught.value) == f"results {tmp_path}: not writable: OSError"


def test_writable_dir_on_a_read_only_mount(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "size=1m,ro") as mnt:
        with pytest.raises(StorageError) as caught:
            writable_dir(mnt, "results")
        assert str(caught.value) == f"results {mnt}: not writable: read-only file system"


# ---- sweep_stale_temps -----------------------------------------------------------------------


def scandir_order(directory: Path) -> list[str]:
    return [entry.name for entry in os.scandir(directory)]


def test_sweep_goes_on_past_entries_that_are_not_temporaries(tmp_path):
    dead = [f".w{i}.json.abc{i}.tmp" for i in range(10)]
    for i in range(10):
        (tmp_path / f"keep{i}.json").write_text("result")
        (tmp_path / dead[i]).write_text("left by a killed writer")
    order = scandir_order(tmp_path)
    first_kept = next(i for i, name in enumerate(order) if not name.endswith(".tmp"))
    assert any(name.endswith(".tmp") for name in order[first_kept:]), (
        f"precondition: a temporary after a result in {order}"
    )
    assert sorted(p.name for p in sweep_stale_temps(tmp_path)) == sorted(dead)
    assert sorted(os.listdir(tmp_path)) == [f"keep{i}.json" for i in range(10)]


def test_sweep_goes_on_past_live_writers(tmp_path):
    names = [f".w{i}.json.abc{i}.tmp" for i in range(12)]
    for name in names:
        (tmp_path / name).write_text("x")
    order = scandir_order(tmp_path)
    live = order[0::2]  # every other one, the first in directory order among them
    fds = []
    try:
        for name in live:
            fd = os.open(tmp_path / name, os.O_RDONLY)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        removed = sweep_stale_temps(tmp_path)
        assert sorted(p.name for p in removed) == sorted(order[1::2])
        assert all(p.parent == tmp_path for p in removed)
        assert sorted(os.listdir(tmp_path)) == sorted(live)
    finally:
        for fd in fds:
            os.close(fd)
    assert sorted(p.name for p in sweep_stale_temps(tmp_path)) == sorted(live)


def test_sweep_leaves_a_temporary_replaced_between_its_look_and_its_open(monkeypatch, tmp_path):
    for i in range(6):
        (tmp_path / f".w{i}.json.abc{i}.tmp").write_text("dead")
    order = scandir_order(tmp_path)
    first = tmp_path / order[0]
    real_open = os.open

    def replaced_first(path, flags, *args, **kwargs):
        if Path(path) == first:
            (tmp_path / "new").write_text("a new writer's")
            os.replace(tmp_path / "new", first)  # a new inode under the old name
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", replaced_first)
    removed = sweep_stale_temps(tmp_path)
    monkeypatch.undo()
    assert [p.name for p in removed] == order[1:]
    assert os.listdir(tmp_path) == [order[0]] and first.read_text() == "a new writer's"


def test_sweep_goes_on_past_a_temporary_another_sweep_took_first(monkeypatch, tmp_path):
    for i in range(6):
        (tmp_path / f".w{i}.json.abc{i}.tmp").write_text("dead")
    order = scandir_order(tmp_path)
    first = tmp_path / order[0]
    real_stat = os.stat
    taken = []

    def taken_meanwhile(path, *args, **kwargs):
        if Path(path) == first and not taken:
            taken.append(path)
            os.unlink(first)  # the other run's sweep, between our listing and our look
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", taken_meanwhile)
    removed = sweep_stale_temps(tmp_path)
    monkeypatch.undo()
    assert taken == [first]
    assert [p.name for p in removed] == order[1:]
    assert os.listdir(tmp_path) == []


def test_sweep_never_acts_through_a_link_swapped_in_after_its_look(monkeypatch, tmp_path):
    temp = tmp_path / ".w.json.abc.tmp"
    temp.write_text("dead")
    (tmp_path / "elsewhere").mkdir()
    moved = tmp_path / "elsewhere" / "file"
    real_stat = os.stat
    swapped = []

    def swapped_after(path, *args, **kwargs):
        info = real_stat(path, *args, **kwargs)
        if Path(path) == temp and not swapped:
            swapped.append(path)
            os.rename(temp, moved)  # the same inode, now behind a link
            os.symlink(moved, temp)
        return info

    monkeypatch.setattr(os, "stat", swapped_after)
    removed = sweep_stale_temps(tmp_path)
    monkeypatch.undo()
    assert swapped == [temp] and removed == []
    assert temp.is_symlink() and os.readlink(temp) == str(moved) and moved.read_text() == "dead"


def test_sweep_goes_on_past_a_temporary_it_cannot_remove(tmp_path):
    for i in range(6):
        (tmp_path / f".m{i}.onnx.abc{i}.tmp").mkdir()
    order = scandir_order(tmp_path)
    stuck = tmp_path / order[0]
    with mounted_tmpfs(stuck, "size=64k") as mnt:  # a mount point cannot be removed (EBUSY)
        (mnt / "part").write_bytes(b"x")
        removed = sweep_stale_temps(tmp_path)
        assert [p.name for p in removed] == order[1:]
        assert os.listdir(tmp_path) == [order[0]]
    assert os.listdir(tmp_path) == [order[0]]


def test_sweep_opens_temporaries_read_only(tmp_path):
    """A dead writer's temporary that cannot be opened for writing (a running
    executable: ETXTBSY) is still removed: the sweep only needs to read and lock it."""
    busy = tmp_path / ".probe.abc.tmp"
    shutil.copy("/bin/sleep", busy)
    os.chmod(busy, 0o755)
    try:
        proc = subprocess.Popen([str(busy), "30"])
    except OSError as exc:
        pytest.skip(f"cannot run a program from {tmp_path}: {exc}")
    try:
        with pytest.raises(OSError) as caught:
            os.close(os.open(busy, os.O_WRONLY))
        assert caught.value.errno == errno.ETXTBSY  # precondition
        assert sweep_stale_temps(tmp_path) == [busy]
        assert os.listdir(tmp_path) == []
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_sweep_of_a_missing_directory_removes_nothing(tmp_path):
    assert sweep_stale_temps(tmp_path / "absent") == []


# ---- tree_files and hash_tree ---------------------------------------------------------------


def test_tree_files_never_follows_a_link_into_a_directory(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.py").write_text("x = 1\n")
    (tmp_path / "root" / "pkg").mkdir(parents=True)
    (tmp_path / "root" / "pkg" / "a.py").write_text("a = 1\n")
    os.symlink(tmp_path / "outside", tmp_path / "root" / "linked")
    os.symlink(tmp_path / "root", tmp_path / "root" / "pkg" / "loop")
    assert tree_files(tmp_path / "root") == [tmp_path / "root" / "pkg" / "a.py"]


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def make_tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "skipme").mkdir()
    (root / "a.py").write_bytes(b"A")
    (root / "sub" / "b.py").write_bytes(b"B")
    (root / "skipme" / "c.py").write_bytes(b"C")


def test_hash_tree_names_relative_to_the_root_or_its_parent(tmp_path):
    make_tree(tmp_path / "code")
    with_parent = _digest(b"code/a.py", b"A", b"code/skipme/c.py", b"C", b"code/sub/b.py", b"B")
    without = _digest(b"a.py", b"A", b"skipme/c.py", b"C", b"sub/b.py", b"B")
    assert hash_tree([tmp_path / "code"]) == with_parent
    assert hash_tree([tmp_path / "code"], relative_to_parent=False) == without


def test_hash_tree_leaves_out_the_skipped_directories(tmp_path):
    make_tree(tmp_path / "code")
    assert hash_tree([tmp_path / "code"], skip_dirs=("skipme",)) == _digest(b"code/a.py", b"A", b"code/sub/b.py", b"B")


# ---- json_text --------------------------------------------------------------------------------


@pytest.mark.parametrize("indent", [2, None])
def test_json_text_refuses_a_non_finite_key(indent):
    with pytest.raises(ValueError, match="^Out of range float values are not JSON compliant"):
        json_text({math.inf: 1}, indent=indent)
    assert json_text({1.5: math.nan}, indent=indent) == ('{\n  "1.5": null\n}\n' if indent else '{"1.5": null}')
