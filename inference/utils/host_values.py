"""Checks of single host.yaml values: bounded text, paths, names, numbers, ports, directories.

Each check returns the normalised value or raises ``ValueError(reason)``; the caller
(``utils/host_config.py``, ``utils/case_specs.py``) puts the file and key in front of
the reason. Every value that reaches a resource is bounded here: lengths of names and
paths before the file system sees them.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

from common.errors import shown

MAX_NAME = 64  # a vendor, case or framework name (also a directory name)
MAX_PATH = 4096  # PATH_MAX
MAX_PATH_PART = 255  # NAME_MAX
MAX_TEXT = 4096  # any other string


def one_line_text(value: Any, limit: int = MAX_TEXT) -> str:
    """A non-empty one-line string (an int is taken as its digits, as FlagPerf writes ports)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, int) and value.bit_length() > 64):
        raise ValueError(f"must be a non-empty string, got {shown(value)}")
    if str(value).strip() == "":
        raise ValueError(f"must be a non-empty string, got {shown(value)}")
    text = str(value).strip()
    if len(text) > limit:
        raise ValueError(f"must be at most {limit} characters, got {shown(value)}")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"must be one line without control characters, got {shown(value)}")
    return text


def optional_text(limit: int = MAX_TEXT) -> Callable[[Any], str | None]:
    return lambda value: None if value is None else one_line_text(value, limit)


def bounded_path(value: Any, *, expand: bool = False) -> str:
    """A path of bounded length, checked before the file system sees it; ``expand``: ``~`` is this user's home."""
    text = one_line_text(os.fspath(value) if isinstance(value, os.PathLike) else value, MAX_PATH)
    text = os.path.expanduser(text) if expand else text
    if len(text) > MAX_PATH or any(len(part) > MAX_PATH_PART for part in text.split("/")):
        raise ValueError(f"must be a path of at most {MAX_PATH} characters and {MAX_PATH_PART} per name, got {shown(value)}")
    return text


def on_disk(check: Callable[[], bool], path: object) -> bool:
    """``check()`` (is_file, is_dir, ...), with an OS error as a one-line reason."""
    try:
        return check()
    except OSError as exc:
        raise ValueError(f"{path}: cannot be checked: {exc.strerror or exc}") from None


def plain_name(value: Any, what: str) -> str:
    text = one_line_text(value, len(value) if isinstance(value, str) else MAX_TEXT)
    if len(text) > MAX_NAME or not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise ValueError(f"must be {what} of at most {MAX_NAME} letters, digits, '_' or '-', got {shown(value)}")
    return text


def true_or_false(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {shown(value)}")
    return value


def seconds_between(low: float, high: float, why: str = "") -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"must be a positive number of seconds >= {low:g} and <= {high:g}{why}, got {shown(value)}")
        if not low <= value <= high:
            raise ValueError(f"must be a positive number of seconds >= {low:g} and <= {high:g}{why}, got {shown(value)}")
        return float(value)

    return check


def tcp_port(value: Any) -> int:
    try:
        port = int(one_line_text(value, 8))
    except ValueError:
        raise ValueError(f"must be a TCP port number, got {shown(value)}") from None
    if not 0 < port < 65536:
        raise ValueError(f"must be a TCP port number between 1 and 65535, got {shown(value)}")
    return port


def writable_dir(path: Path) -> None:
    """``path`` is a writable directory, or can be created as one (its nearest existing parent is)."""
    existing = path
    while not on_disk(existing.exists, existing) and existing != existing.parent:
        existing = existing.parent
    if not on_disk(existing.is_dir, existing):
        if existing == path:
            raise ValueError(f"{path} exists and is not a directory")
        raise ValueError(f"{path} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{path} is not writable" if existing == path else f"{path} cannot be created: {existing} is not writable")
    # access() answers from the mode bits (and, for root, always yes): /proc, /sys and other
    # pseudo file systems refuse a new entry anyway. A real probe, removed at once, says so now.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe.", suffix=".tmp", dir=existing))
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if existing == path:
            raise ValueError(f"{path} is not writable: making a folder in it failed: {reason}") from None
        raise ValueError(f"{path} cannot be created: {existing} refuses new folders ({reason})") from None
