"""User-facing errors: each one is reported as a single line and a distinct exit status."""

from __future__ import annotations

import reprlib


class InferPerfError(Exception):
    """An expected failure caused by input or environment, not by a bug.

    The message must be one line naming the file, key or host at fault.
    """

    exit_code = 1


class ConfigError(InferPerfError):
    exit_code = 2


class DataError(InferPerfError):
    exit_code = 3


class StorageError(InferPerfError):
    """The file system refused a write: full, read-only, not a directory, no permission.
    The message names the path ("no space left on device writing PATH")."""

    exit_code = 6


class HostError(InferPerfError):
    """A failure on one host (SSH, Docker, the executor); the message starts with the host's name."""

    exit_code = 5


class EngineError(InferPerfError):
    """A vendor engine broke its contract or could not compile/run."""

    exit_code = 4


def one_line(exc: BaseException) -> str:
    """Reduce an exception to one readable line.

    torch's DataLoader re-raises worker exceptions with the worker traceback
    folded into the message ("Caught X in DataLoader worker process 0. ...");
    the useful part is the original message on the last line.
    """
    text = str(exc).strip()
    if text.startswith("Caught ") and "\n" in text:
        last = text.splitlines()[-1].strip()
        # "common.errors.DataError: <message>" -> "<message>"
        head, sep, tail = last.partition(": ")
        text = tail if sep and "." in head and " " not in head else last
    text = " ".join(text.split())
    if not isinstance(exc, InferPerfError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text


def reraise_interrupt(exc: BaseException) -> None:
    """An import cut short by Ctrl-C can surface as ImportError (pybind11 modules such as
    onnxruntime's report "initialization failed", the KeyboardInterrupt only in the
    context): re-raise the interruption instead of blaming a missing package."""
    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            raise cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, never much longer than ``limit`` characters.

    A config value may be a 1 MiB string, a 4000-digit integer or a list of a
    million entries: the message must stay one short line, and the full repr
    is never built (for a huge int Python refuses to build it at all).
    ``'xxxx…' (1048576 chars)``, ``[1, 2, 3, …] (100000 items)``.
    """
    if isinstance(value, (str, bytes)):
        if len(value) <= limit:
            return repr(value)
        head = repr(value[:limit])
        return f"{head[:-1]}…{head[-1]} ({len(value)} {'chars' if isinstance(value, str) else 'bytes'})"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > limit * 10 // 3:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, (list, tuple, dict, set, frozenset)) and not _small(value, limit):
        text = _BoundedRepr(limit).repr(value)
        text = text if len(text) <= limit else text[:limit] + "…"
        return f"{text} ({len(value)} {'item' if len(value) == 1 else 'items'})"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def _small(value: object, limit: int) -> bool:
    """Whether the repr of a container surely stays short, found without building it."""
    budget = limit
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
            budget -= 2 * len(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
            budget -= 2 * len(item) + 2
        elif isinstance(item, (str, bytes)):
            budget -= len(item) + 2
        elif isinstance(item, int) and not isinstance(item, bool):
            budget -= item.bit_length() // 3 + 1
        else:
            budget -= 8
        if budget < 0 or len(stack) > limit:
            return False
    return True


class _BoundedRepr(reprlib.Repr):
    """reprlib's bounded repr, without an unbounded int repr."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdict = 8
        self.maxstring = self.maxother = self.limit = limit

    def repr_int(self, x: int, level: int) -> str:
        return shown(x, self.limit)
