"""The one log-file sink (common/files.py::LogFileSink) on a real full device (/dev/full: every
write fails with ENOSPC), with each side's failure: run.py's run.log says one line on the
console and goes on; the container's container.out.log raises one StorageError naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import StorageError
from common.files import LogFileSink

FULL = Path("/dev/full")
pytestmark = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")


def test_a_full_device_ends_run_log_with_one_console_line(capsys):
    from utils.cli.hosts import _run_log_ended

    sink = LogFileSink(FULL, _run_log_ended(FULL))
    sink.write("first line\n")
    sink.write("second line\n")  # dropped: the failure was said once
    sink.stop()
    err = capsys.readouterr().err
    assert err.count("run.log ends here") == 1 and "/dev/full" in err


def test_a_full_device_raises_one_storage_error_naming_the_container_log():
    from tools.logger import _raise_storage_error

    sink = LogFileSink(FULL, _raise_storage_error(FULL))
    with pytest.raises(StorageError, match="/dev/full"):
        sink.write("a line\n")
    sink.write("the next line\n")  # no second error: later lines go to stdout only
    sink.stop()


def test_a_writable_file_gets_every_line(tmp_path):
    path = tmp_path / "run.log"
    failures: list[OSError] = []
    sink = LogFileSink(path, failures.append)
    sink.write("one\n")
    sink.write("two\n")
    sink.stop()
    assert path.read_text() == "one\ntwo\n" and failures == []
