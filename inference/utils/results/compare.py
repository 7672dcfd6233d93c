"""Compare two runs: ``python3 run.py compare RUN_A RUN_B [--threshold 5]``.

RUN_A is the baseline, RUN_B the candidate; each is a run directory
(``result/run<id>``) or its name under ``inference/result/``. Results are
matched by case:framework and node rank, performance rows by batch size,
scenario, clients and load generator; the FlagPerf inference pass is the row
``inference``.

Terms (defined here once):
  figure       = core qps (samples/s) or a latency percentile (p50, p90; ms per query);
  change       = (B - A) / A of a figure, in percent; worse = lower qps, higher latency;
  interval     = the figure's own 95% confidence interval, as its run measured it
                 (result.json: ``ci95`` by FlagPerf key and the inference phase's
                 ``core_qps_ci95``/``latency_ci95``; a performance row's ``qps_ci95``/
                 ``latency_ci95``; the summary's copies first where it has them). Each run's
                 interval says how far its figure moves with the noise of its own run,
                 so two runs' intervals together bound the noise between them.
Judged on the intervals of both runs (between-run noise):
  within noise = the two intervals overlap, or the change is at most ``--threshold``;
  regression   = worse by more than ``--threshold`` and the intervals do not overlap;
  better       = better by more than ``--threshold`` and the intervals do not overlap.
A figure without an interval in A or B (a result from before intervals were
measured, or a row LoadGen measured) is judged as before, with a note saying so:
  95% CI       = the bootstrap percentile interval of the change: ``resamples``
                 times, A's and B's samples are each resampled with replacement
                 (numpy ``default_rng(seed)``; per resample A's indices are drawn,
                 then B's) and the figure's ratio B*/A* - 1 recomputed; the 2.5th
                 and 97.5th percentiles of those are the interval. The samples are
                 the raw per-query latencies (``latencies.npz``; at most
                 ``MAX_BOOTSTRAP`` of each, a seeded sample) for latency
                 percentiles and for the inference pass's core qps (samples /
                 summed core time, so its ratio is the inverse ratio of mean
                 latency); for a performance row's qps, the row's throughput
                 windows (``window_qps``), since its qps is taken on the wall clock;
                 it sees the noise within each run, not between them;
  beyond noise = the CI excludes 0;
  regression   = worse by more than ``--threshold`` percent and beyond noise.
A figure either run marked INVALID is "not comparable" and never gates
(``--include-invalid`` judges it anyway).
Exit status: 0 no regression, 1 a regression, 2 bad input (one line).
Writes ``compare_<RUN_A name>.md`` and ``.json`` into RUN_B.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from common.files import atomic_path, write_json_atomic
from common.record import Key, capped, read_latencies

MAX_BOOTSTRAP = 20_000
RESAMPLES = 1000
SEED = 0
CONFIDENCE = 0.95
PERCENTILES = {"p50": 50.0, "p90": 90.0}


class CompareError(Exception):
    """Bad input: said in one line, exit 2."""


def bootstrap_ci(
    a: Sequence[float],
    b: Sequence[float],
    statistic: Callable,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """The bootstrap percentile interval of ``statistic(B)/statistic(A) - 1`` (see the module docstring)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not len(a) or not len(b):
        raise ValueError("bootstrap_ci: empty sample")
    rng = np.random.default_rng(seed)
    ratios = np.empty(resamples)
    for r in range(resamples):
        ia = rng.integers(0, len(a), len(a))
        ib = rng.integers(0, len(b), len(b))
        ratios[r] = statistic(b[ib]) / statistic(a[ia]) - 1.0
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def _percentile(q: float) -> Callable:
    import numpy as np

    return lambda x: float(np.percentile(x, q))


def _inverse_mean(x) -> float:
    return 1.0 / float(x.mean())


def _mean(x) -> float:
    return float(x.mean())


@dataclass
class Line:
    case: str
    host: str
    row: str
    figure: str
    a: float | None
    b: float | None
    higher_is_better: bool
    change: float | None = None  # fraction
    ci: tuple[float, float] | None = None  # bootstrap CI of the change (figures without intervals)
    verdict: str = "n/a"
    invalid_in: str | None = None  # "A", "B" or "A and B": a run whose verdict for this row is invalid
    interval_a: tuple[float, float] | None = None  # the figure's own 95% interval in run A
    interval_b: tuple[float, float] | None = None
    basis: str | None = None  # "intervals" or "bootstrap": what the verdict was judged on

    def judge(self, threshold: float) -> "Line":
        if self.a is None or self.b is None or not self.a:
            self.verdict = "n/a (missing in a run)"
            return self
        self.change = self.b / self.a - 1.0
        worse = -self.change if self.higher_is_better else self.change
        if self.interval_a is not None and self.interval_b is not None:
            self.basis = "intervals"
            overlap = self.interval_a[0] <= self.interval_b[1] and self.interval_b[0] <= self.interval_a[1]
            if overlap or abs(self.change) <= threshold / 100 + 1e-12:  # (+1e-12: 95/100 - 1 is -0.0500...04 in floats)
                self.verdict = "within noise"
            else:
                self.verdict = "REGRESSION" if worse > 0 else "better"
        elif self.ci is None:
            self.verdict = "no CI (no raw samples)"
            return self
        else:
            self.basis = "bootstrap"
            self.verdict = self._bootstrap_verdict(worse, threshold)
        if self.invalid_in and self.verdict in ("REGRESSION", "better", "worse, within threshold"):
            # A figure its own run judged untrustworthy proves nothing either way: shown, never gated on.
            self.verdict = f"not comparable ({self.verdict.lower()}; INVALID in {self.invalid_in})"
        return self

    def _bootstrap_verdict(self, worse: float, threshold: float) -> str:
        if not (self.ci[0] > 0 or self.ci[1] < 0):
            return "within noise"
        if worse > threshold / 100:
            return "REGRESSION"
        return "worse, within threshold" if worse > 0 else "better"


def resolve_run(name: str, result_root: Path) -> Path:
    for candidate in (Path(name), result_root / name, result_root / f"run{name}"):
        if candidate.is_dir():
            return candidate
    raise CompareError(f"compare: run {name!r} not found (looked in . and {result_root})")


def load_run(run_dir: Path) -> dict:
    path = run_dir / "summary.json"
    if not path.is_file():
        raise CompareError(f"compare: {run_dir} has no summary.json (not a finished run)")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CompareError(f"compare: {path} cannot be read: {exc}") from None
    results = [r for r in summary.get("results") or [] if r.get("status") == "success"]
    if not results:
        raise CompareError(f"compare: {run_dir} has no successful result")
    summary["results"] = results
    return summary


def _log_dir(record: dict, run_dir: Path) -> Path:
    """The record's log dir, also when the run directory was moved or copied."""
    given = Path(record.get("log_dir") or "")
    if given.is_dir():
        return given
    return run_dir / f"{record['case']}:{record['framework']}" / given.name


def _series(raw: dict, key: str):
    values = raw.get(key)
    return None if values is None or not len(values) else [float(v) for v in capped(list(values), MAX_BOOTSTRAP)]


def _invalid_in(verdict_a: dict | None, verdict_b: dict | None) -> str | None:
    bad = [name for name, verdict in (("A", verdict_a), ("B", verdict_b)) if verdict and not verdict.get("valid", True)]
    return " and ".join(bad) or None


def _interval(value) -> tuple[float, float] | None:
    """``[lo, hi]`` as a pair of finite numbers with lo <= hi, else None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value) or value[0] > value[1]:
        return None
    return float(value[0]), float(value[1])


def row_key(row: dict) -> tuple:
    return row["batch_size"], row["scenario"], row["clients"], row.get("load_generator") or "inferperf"


def row_label(row: dict) -> str:
    generator = row.get("load_generator") or "inferperf"
    return f"bs {row['batch_size']} {row['scenario']} x{row['clients']}" + ("" if generator == "inferperf" else f" {generator}")


def figure_intervals(record: dict, result: dict | None) -> dict[tuple[str, str], tuple[float, float]]:
    """Every figure's own 95% interval, by (row label, figure): the summary record's where it has
    them, else its result.json's (see the module docstring for the keys)."""
    result = result or {}
    phase = result.get("inference") or {}
    found: dict[tuple[str, str], tuple[float, float] | None] = {}
    ci95 = record.get("ci95") or result.get("ci95") or {}
    found[("inference", "core qps")] = _interval(ci95.get(Key.INFER_CORE_QPS)) or _interval(phase.get("core_qps_ci95"))
    latency = record.get("latency_ci95") or phase.get("latency_ci95") or {}
    for name in PERCENTILES:
        found[("inference", f"{name} ms")] = _interval(latency.get(name))
    result_rows = {row_key(row): row for row in result.get("performance") or []}
    for row in record.get("performance") or []:
        source = row if "qps_ci95" in row or "latency_ci95" in row else result_rows.get(row_key(row), row)
        found[(row_label(row), "qps")] = _interval(source.get("qps_ci95"))
        for name in PERCENTILES:
            found[(row_label(row), f"{name} ms")] = _interval((source.get("latency_ci95") or {}).get(name))
    return {k: v for k, v in found.items() if v is not None}


@dataclass
class RunSide:
    """One run's side of a matched result: its summary record, raw latencies and figure intervals."""

    record: dict
    raw: dict
    intervals: dict


def load_side(record: dict, run_dir: Path) -> RunSide:
    log_dir = _log_dir(record, run_dir)
    try:
        result = json.loads((log_dir / "result.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        result = None  # a summary without its log dir: the summary's own intervals, if any
    return RunSide(record, read_latencies(log_dir), figure_intervals(record, result))


def compare_pair(a: RunSide, b: RunSide, threshold: float, resamples: int = RESAMPLES, include_invalid: bool = False) -> list[Line]:
    rec_a, rec_b = a.record, b.record
    case = f"{rec_a['case']}:{rec_a['framework']}"
    host = rec_a["host"] if rec_a["host"] == rec_b["host"] else f"{rec_a['host']} -> {rec_b['host']}"
    lines: list[Line] = []

    def add(row: str, figure: str, values: tuple, higher: bool, samples: tuple, statistic, invalid: str | None, label: str | None = None) -> None:
        label = label or row
        line = Line(case, host, row, figure, *values, higher, invalid_in=None if include_invalid else invalid)
        line.interval_a, line.interval_b = a.intervals.get((label, figure)), b.intervals.get((label, figure))
        both = line.interval_a is not None and line.interval_b is not None
        if not both and samples[0] and samples[1] and None not in values:
            line.ci = bootstrap_ci(samples[0], samples[1], statistic, resamples)
        lines.append(line.judge(threshold))

    inf = (_series(a.raw, "inference"), _series(b.raw, "inference"))
    whole = _invalid_in(rec_a.get("verdict"), rec_b.get("verdict"))  # the result's verdict covers its phases
    add("inference", "core qps", (rec_a.get(Key.INFER_CORE_QPS), rec_b.get(Key.INFER_CORE_QPS)), True, inf, _inverse_mean, whole)
    for name, q in PERCENTILES.items():
        values = ((rec_a.get("latency_ms") or {}).get(name), (rec_b.get("latency_ms") or {}).get(name))
        add("inference", f"{name} ms", values, False, inf, _percentile(q), whole)

    rows_b = {row_key(row): (i, row) for i, row in enumerate(rec_b.get("performance") or [])}
    for i, row_a in enumerate(rec_a.get("performance") or []):
        if row_key(row_a) not in rows_b:
            continue
        j, row_b = rows_b[row_key(row_a)]
        label = row_label(row_a)
        row_invalid = _invalid_in(row_a.get("verdict"), row_b.get("verdict"))
        if row_a["scenario"] != "server":
            windows = (row_a.get("window_qps") or [], row_b.get("window_qps") or [])
            usable = len(windows[0]) > 1 and len(windows[1]) > 1
            add(label, "qps", (row_a.get("qps"), row_b.get("qps")), True, windows if usable else (None, None), _mean, row_invalid)
        latencies = (_series(a.raw, f"performance_{i}"), _series(b.raw, f"performance_{j}"))
        for name, q in PERCENTILES.items():
            values = ((row_a.get("latency_ms") or {}).get(name), (row_b.get("latency_ms") or {}).get(name))
            add(label, f"{name} ms", values, False, latencies, _percentile(q), row_invalid)
    return lines


def without_intervals_note(lines: list[Line]) -> list[str]:
    """One note per result whose figures were judged without both runs' intervals."""
    notes: dict[tuple[str, str], set[str]] = {}
    for line in lines:
        if line.a is not None and line.b is not None and line.basis != "intervals":
            missing = [side for side, interval in (("A", line.interval_a), ("B", line.interval_b)) if interval is None]
            notes.setdefault((line.case, line.host), set()).update(missing)
    return [
        f"{case} {host}: figures without an interval in {' and '.join(sorted(sides))} (a result from before intervals, or a row "
        "LoadGen measured) are judged as before, by a bootstrap of raw samples within each run, which does not see the noise between runs"
        for (case, host), sides in notes.items()
    ]


def compare_runs(dir_a: Path, dir_b: Path, threshold: float, resamples: int = RESAMPLES, include_invalid: bool = False) -> tuple[list[Line], list[str]]:
    """Every line of the comparison, and notes on what could not be matched or judged on intervals."""
    run_a, run_b = load_run(dir_a), load_run(dir_b)

    def index(summary: dict) -> dict:
        return {(r["case"], r["framework"], r["noderank"]): r for r in summary["results"]}

    a, b = index(run_a), index(run_b)
    common = [k for k in a if k in b]
    if not common:
        names = lambda idx: ", ".join(sorted({f"{c}:{f}" for c, f, _ in idx}))  # noqa: E731
        raise CompareError(f"compare: the runs share no case and host (A: {names(a)}; B: {names(b)})")
    notes = [f"only in {label}: {c}:{f} noderank {n}" for label, mine, other in (("A", a, b), ("B", b, a)) for (c, f, n) in mine if (c, f, n) not in other]
    lines: list[Line] = []
    for k in common:
        lines.extend(compare_pair(load_side(a[k], dir_a), load_side(b[k], dir_b), threshold, resamples, include_invalid))
    return lines, notes + without_intervals_note(lines)


def _num(value: float | None, figure: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if "qps" in figure else f"{value:.4f}"


def _spread(interval: tuple[float, float] | None, value: float | None) -> str:
    """An interval as +-x% of the figure (its half-width)."""
    if interval is None or not value:
        return "?"
    return f"±{(interval[1] - interval[0]) / 2 / abs(value) * 100:.1f}%"


def _noise(line: Line) -> str:
    if line.basis == "intervals":
        return f"A {_spread(line.interval_a, line.a)}, B {_spread(line.interval_b, line.b)}"
    if line.ci is not None:
        return f"[{line.ci[0] * 100:+.1f}%, {line.ci[1] * 100:+.1f}%] bootstrap"
    return "-"


def markdown(lines: list[Line], notes: list[str], name_a: str, name_b: str, threshold: float) -> str:
    out = [
        f"# InferPerf compare: A = {name_a}, B = {name_b}",
        "",
        f"change = (B - A) / A. Judged on each figure's own 95% interval in both runs: within noise when they overlap or the change "
        f"is at most {threshold:g}%; REGRESSION = worse by more than {threshold:g}% with disjoint intervals. A figure without "
        f"intervals is judged on a 95% bootstrap CI of the change (REGRESSION = worse by more than {threshold:g}% and the CI excludes 0). "
        "Only between figures both runs judged valid (otherwise: not comparable).",
        "",
        "| case | host | row | figure | A | B | change | noise (95%) | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for line in lines:
        change = "-" if line.change is None else f"{line.change * 100:+.1f}%"
        out.append(
            f"| {line.case} | {line.host} | {line.row} | {line.figure} | {_num(line.a, line.figure)} | {_num(line.b, line.figure)} | "
            f"{change} | {_noise(line)} | {'**REGRESSION**' if line.verdict == 'REGRESSION' else line.verdict} |"
        )
    out += [""] + [f"- {n}" for n in notes] if notes else []
    regressions = sum(line.verdict == "REGRESSION" for line in lines)
    out += ["", f"{regressions} regression(s) beyond {threshold:g}%." if regressions else f"No regression beyond {threshold:g}%."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None, result_root: Path) -> int:
    parser = argparse.ArgumentParser(prog="run.py compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", metavar="RUN_A", help="baseline run directory or run name")
    parser.add_argument("run_b", metavar="RUN_B", help="candidate run directory or run name")
    parser.add_argument("--threshold", type=float, default=5.0, help="percent worse that counts as a regression (default 5)")
    parser.add_argument("--resamples", type=int, default=RESAMPLES, help=f"bootstrap resamples (default {RESAMPLES})")
    parser.add_argument(
        "--include-invalid", action="store_true", help="judge figures whose run marked them INVALID too (default: shown as not comparable, never a regression)"
    )
    args = parser.parse_args(argv)
    try:
        dir_a, dir_b = resolve_run(args.run_a, result_root), resolve_run(args.run_b, result_root)
        lines, notes = compare_runs(dir_a, dir_b, args.threshold, args.resamples, args.include_invalid)
    except CompareError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    text = markdown(lines, notes, dir_a.name, dir_b.name, args.threshold)
    print(text, end="")
    md_path = dir_b / f"compare_{dir_a.name}.md"
    with atomic_path(md_path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    write_json_atomic(
        md_path.with_suffix(".json"),
        {
            "run_a": str(dir_a),
            "run_b": str(dir_b),
            "threshold_percent": args.threshold,
            "resamples": args.resamples,
            "seed": SEED,
            "confidence": CONFIDENCE,
            "lines": [asdict(line) for line in lines],
            "notes": notes,
        },
    )
    print(f"written: {md_path} and {md_path.with_suffix('.json')}")
    return 1 if any(line.verdict == "REGRESSION" for line in lines) else 0
