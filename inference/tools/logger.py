"""Logging for the container side: loguru to stdout and <log_dir>/container.out.log."""
from __future__ import annotations

import sys
from pathlib import Path

from loguru import logger

LOG_FILE_NAME = "container.out.log"
_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {message}"
_FORMAT_WITH_CALLER = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {name}:{function}:{line} | {message}"


def init_logger(log_dir: str | Path, level: str = "INFO", call_information: bool = False) -> Path:
    log_path = Path(log_dir) / LOG_FILE_NAME
    fmt = _FORMAT_WITH_CALLER if call_information else _FORMAT
    logger.remove()
    logger.add(sys.stdout, level=level, format=fmt, colorize=False)
    logger.add(log_path, level=level, format=fmt, encoding="utf-8", enqueue=False)
    return log_path
