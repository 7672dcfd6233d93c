"""Logging for the container side: loguru to stdout and <log_dir>/container.out.log."""

from __future__ import annotations

import sys
from pathlib import Path

from loguru import logger

from common.files import storage_error

LOG_FILE_NAME = "container.out.log"
_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {message}"
_FORMAT_WITH_CALLER = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {name}:{function}:{line} | {message}"


class _FileSink:
    """container.out.log. A write the file system refuses (disk full) raises one
    StorageError naming the file, once; later lines go to stdout only, so the
    failure record can still be logged and written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = open(path, "a", encoding="utf-8")
        self.failed = False

    def write(self, message: str) -> None:
        if self.failed:
            return
        try:
            self.handle.write(message)
            self.handle.flush()
        except OSError as exc:
            self.failed = True
            error = storage_error(exc, self.path)
            if error is None:
                raise
            raise error from None


def init_logger(log_dir: str | Path, level: str = "INFO", call_information: bool = False) -> Path:
    log_path = Path(log_dir) / LOG_FILE_NAME
    fmt = _FORMAT_WITH_CALLER if call_information else _FORMAT
    logger.remove()
    logger.add(sys.stdout, level=level, format=fmt, colorize=False)
    logger.add(_FileSink(log_path), level=level, format=fmt, catch=False)
    return log_path
