"""A fake clock for the measurement code: integer nanoseconds that only the test (or a fake sleep)
advances, so every expected number is exact."""

from __future__ import annotations

MS = 1_000_000  # ns


class FakeClock:
    """Integer-ns clock advanced only explicitly; ``sleep`` advances it and records calls."""

    def __init__(self, t: int = 5_000_000_000) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self.t

    def advance(self, ns: int) -> None:
        self.t += ns

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "the runner must not sleep for a non-positive time"
        self.sleeps.append(seconds)
        self.t += round(seconds * 1e9)
