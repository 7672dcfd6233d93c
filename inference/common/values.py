"""The value checks both sides share: one validator per kind of value, and the bounds on
everything that sizes a resource.

The host (``utils/host_config.py``, ``utils/case_specs.py``: host.yaml and its CASES) and the
container (``contract/config/values.py``: the case config's keys) build their key tables from
these. Each check returns the normalised value or raises ``ValueError(reason)``; the caller
puts the file and key in front of the reason, so an error stays one line naming both.
Every value that reaches a resource is bounded here: lengths of names and paths before
the file system sees them.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, TypeVar

from common.errors import shown

T = TypeVar("T")

MAX_NAME = 64  # a vendor, case, framework, compiler or key name (also a directory name)
MAX_PATH = 4096  # PATH_MAX; and NAME_MAX per component:
MAX_PATH_PART = 255
MAX_TEXT = 4096  # any other string
MAX_REPETITIONS = 1000  # runs of a case by run.py (fresh processes, run.py --repeat or the key): more is days of work
MAX_SWEEP = 64  # entries of a list key (batch_sizes, clients, ...)


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask), the bound of every thread count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ---- numbers -----------------------------------------------------------------------------------
def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"must be a positive integer, got {shown(value)}")
    return value


def non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"must be a non-negative integer, got {shown(value)}")
    return value


def at_most(check: Callable[[Any], int], high: int, why: str) -> Callable[[Any], int]:
    """``check`` (``positive_int`` or ``non_negative_int``) and at most ``high``; the message says why."""
    kind = "a positive integer" if check is positive_int else "a non-negative integer"

    def bounded(value: Any) -> int:
        number = check(value)
        if number > high:
            raise ValueError(f"must be {kind} <= {high} ({why}), got {shown(value)}")
        return number

    return bounded


def bounded(
    kind: str, low: float, high: float, *, low_inclusive: bool = False, integer: bool = False
) -> Callable[[Any], Any]:
    """A number (an integer if ``integer``) above ``low`` (or from it) and at most ``high``."""

    def check(value: Any) -> Any:
        number = value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
            raise ValueError(f"must be {kind}, got {shown(value)}")
        if not (low <= number if low_inclusive else low < number) or number > high:
            bound = f"{'>=' if low_inclusive else '>'} {low:g} and <= {high:g}"
            raise ValueError(f"must be {kind} {bound}, got {shown(value)}")
        return int(number) if integer else float(number)

    return check


def seconds_between(low: float, high: float, why: str = "") -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(
                f"must be a positive number of seconds >= {low:g} and <= {high:g}{why}, got {shown(value)}"
            )
        if not low <= value <= high:
            raise ValueError(
                f"must be a positive number of seconds >= {low:g} and <= {high:g}{why}, got {shown(value)}"
            )
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


# ---- combinators -------------------------------------------------------------------------------
def optional(check: Callable[[Any], T]) -> Callable[[Any], T | None]:
    """``check``, or null."""
    return lambda value: None if value is None else check(value)


def one_or_list(
    check: Callable[[Any], Any], *, unique: bool = True, max_items: int = MAX_SWEEP
) -> Callable[[Any], list]:
    """A single value or a non-empty list of at most ``max_items`` of them; always returns a list."""

    def check_list(value: Any) -> list:
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("must not be an empty list")
        if len(values) > max_items:
            raise ValueError(f"must list at most {max_items} entries, got {len(values)}")
        checked = []
        for item in values:
            try:
                checked.append(check(item))
            except ValueError as exc:
                raise ValueError(f"entry {shown(item)} {exc}" if isinstance(value, list) else str(exc)) from None
        if unique and len(set(checked)) != len(checked):
            raise ValueError(f"has repeated entries: {shown(value)}")
        return checked

    return check_list


# ---- flags, text, names, paths -----------------------------------------------------------------
def true_or_false(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {shown(value)}")
    return value


def one_line_text(value: Any, limit: int = MAX_TEXT) -> str:
    """A non-empty one-line string (an int is taken as its digits, as FlagPerf writes ports)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (str, int))
        or (isinstance(value, int) and value.bit_length() > 64)
    ):
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
    return optional(lambda value: one_line_text(value, limit))


def plain_name(value: Any, what: str) -> str:
    text = one_line_text(value, len(value) if isinstance(value, str) else MAX_TEXT)
    if len(text) > MAX_NAME or not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise ValueError(f"must be {what} of at most {MAX_NAME} letters, digits, '_' or '-', got {shown(value)}")
    return text


def path_too_long(text: str) -> bool:
    """More than ``MAX_PATH`` characters, or a component of more than ``MAX_PATH_PART``."""
    return len(text) > MAX_PATH or any(len(part) > MAX_PATH_PART for part in text.split("/"))


def bounded_path(value: Any, *, expand: bool = False) -> str:
    """A path of bounded length, checked before the file system sees it; ``expand``: ``~`` is this user's home."""
    text = one_line_text(os.fspath(value) if isinstance(value, os.PathLike) else value, MAX_PATH)
    text = os.path.expanduser(text) if expand else text
    if path_too_long(text):
        raise ValueError(
            f"must be a path of at most {MAX_PATH} characters and {MAX_PATH_PART} per name, got {shown(value)}"
        )
    return text


# ---- the file system ---------------------------------------------------------------------------
def on_disk(check: Callable[[], bool], path: object) -> bool:
    """``check()`` (is_file, is_dir, ...), with an OS error as a one-line reason."""
    try:
        return check()
    except OSError as exc:
        raise ValueError(f"{path}: cannot be checked: {exc.strerror or exc}") from None


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
        raise ValueError(
            f"{path} is not writable" if existing == path else f"{path} cannot be created: {existing} is not writable"
        )
    # access() answers from the mode bits (and, for root, always yes): /proc, /sys and other
    # pseudo file systems refuse a new entry anyway. A real probe, removed at once, says so now.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe.", suffix=".tmp", dir=existing))
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if existing == path:
            raise ValueError(f"{path} is not writable: making a folder in it failed: {reason}") from None
        raise ValueError(f"{path} cannot be created: {existing} refuses new folders ({reason})") from None
