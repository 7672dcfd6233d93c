"""The tables' figure cells and their ±, one rendering for summary.md (also printed on the console),
report.html (``utils/results/report/``), the LLM table (``utils/results/llm_summary``), the measured
peaks (``utils/results/baselines``) and the container's log line of each LLM cell
(``tools/measure/llm_stage``).

A figure's ± is half its 95 % interval's width over the figure (``common.stats.relative_half_width``).
A record says three things about a figure's interval, and each reads differently:

- ``[lo, hi]``: ``16.90 ±1.2%``;
- the key present with null: the figure was measured but no honest interval could be estimated from
  its samples (too few effective samples, docs/measurement.md): ``16.90 ± n/a``, never the bare
  figure, which would read as exact;
- the key absent: no interval was ever estimated for it (results written before intervals, a summed
  multi-host figure): the figure alone.

A figure that was not measured at all (None) is ``-`` here; a caller with a reason shows its own
``n/a (reason)`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.stats import relative_half_width

NO_INTERVAL = " ± n/a"


def fmt(value: Any, digits: int = 2) -> str:
    """A figure as a cell: floats to ``digits`` decimals, None as ``-``, anything else as ``str``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _width(value: Any, interval: Any, share_digits: int) -> str:
    width = (
        relative_half_width(value, interval)
        if isinstance(value, (int, float)) and isinstance(interval, (list, tuple))
        else None
    )
    return "" if width is None else f" ±{width:.{share_digits}%}"


def interval_text(value: Any, intervals: Mapping[str, Any] | None, key: str, share_digits: int = 1) -> str:
    """What follows a figure ``value`` whose interval is ``intervals[key]`` (module docstring):
    `` ±1.2%``, `` ± n/a`` (the key held with null beside a measured figure), or nothing."""
    known = intervals or {}
    if value is not None and key in known and known[key] is None:
        return NO_INTERVAL
    return _width(value, known.get(key), share_digits)


def figure_cell(value: Any, intervals: Mapping[str, Any] | None, key: str, digits: int = 2) -> str:
    """A figure to ``digits`` decimals with its ± from ``intervals[key]`` (``interval_text``)."""
    return fmt(value, digits) + interval_text(value, intervals, key)
