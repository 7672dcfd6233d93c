"""Logging for the container side: loguru to stdout and <log_dir>/container.out.log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from loguru import logger

from common.files import LogFileSink, storage_error

LOG_FILE_NAME = "container.out.log"
_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {message}"
_FORMAT_WITH_CALLER = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {name}:{function}:{line} | {message}"


def _raise_storage_error(path: Path) -> Callable[[OSError], None]:
    """container.out.log's failure: a write the file system refuses (disk full) raises one
    StorageError naming the file, once; later lines go to stdout only, so the failure record can
    still be logged and written."""

    def fail(exc: OSError) -> None:
        error = storage_error(exc, path)
        if error is None:
            raise exc
        raise error from None

    return fail


def init_logger(log_dir: str | Path, level: str = "INFO", call_information: bool = False) -> Path:
    log_path = Path(log_dir) / LOG_FILE_NAME
    fmt = _FORMAT_WITH_CALLER if call_information else _FORMAT
    logger.remove()
    logger.add(sys.stdout, level=level, format=fmt, colorize=False)
    logger.add(LogFileSink(log_path, _raise_storage_error(log_path)), level=level, format=fmt, catch=False)
    return log_path
