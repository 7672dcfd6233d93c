"""User-facing errors: each one is reported as a single line and a distinct exit status."""
from __future__ import annotations


class InferPerfError(Exception):
    """An expected failure caused by input or environment, not by a bug.

    The message must be one line naming the file, key or host at fault.
    """

    exit_code = 1


class ConfigError(InferPerfError):
    exit_code = 2


class DataError(InferPerfError):
    exit_code = 3


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
