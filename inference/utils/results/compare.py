"""Compare two runs: ``python3 run.py compare RUN_A RUN_B [--threshold 5]``.

RUN_A is the baseline, RUN_B the candidate; each is a run directory
(``result/run<id>``) or its name under ``inference/result/``. Results are
matched by case:framework and node rank, performance rows by batch size,
scenario and clients; the FlagPerf inference pass is the row ``inference``.

Terms (defined here once):
  figure       = core qps (samples/s) or a latency percentile (p50, p90; ms per query);
  change       = (B - A) / A of a figure, in percent; worse = lower qps, higher latency;
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
  beyond noise = the CI excludes 0;
  regression   = worse by more than ``--threshold`` percent and beyond noise.
Exit status: 0 no regression, 1 a regression, 2 bad input (one line).
Writes ``compare_<RUN_A name>.md`` and ``.json`` into RUN_B.
"""

from __future__ import annotations

import argparse
import json
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
    ci: tuple[float, float] | None = None
    verdict: str = "n/a"
    invalid_in: str | None = None  # "A", "B" or "A and B": a run whose verdict for this row is invalid

    def judge(self, threshold: float) -> "Line":
        if self.a is None or self.b is None or not self.a:
            self.verdict = "n/a (missing in a run)"
            return self
        self.change = self.b / self.a - 1.0
        worse = -self.change if self.higher_is_better else self.change
        if self.ci is None:
            self.verdict = "no CI (no raw samples)"
            return self
        beyond = self.ci[0] > 0 or self.ci[1] < 0
        if not beyond:
            self.verdict = "within noise"
        elif worse > threshold / 100:
            self.verdict = "REGRESSION"
        elif worse > 0:
            self.verdict = "worse, within threshold"
        else:
            self.verdict = "better"
        if self.invalid_in and self.verdict in ("REGRESSION", "better", "worse, within threshold"):
            # A figure its own run judged untrustworthy proves nothing either way: shown, never gated on.
            self.verdict = f"not comparable ({self.verdict.lower()}; INVALID in {self.invalid_in})"
        return self


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


def compare_pair(rec_a: dict, rec_b: dict, raw_a: dict, raw_b: dict, threshold: float, resamples: int = RESAMPLES, include_invalid: bool = False) -> list[Line]:
    case = f"{rec_a['case']}:{rec_a['framework']}"
    host = rec_a["host"] if rec_a["host"] == rec_b["host"] else f"{rec_a['host']} -> {rec_b['host']}"
    lines: list[Line] = []

    def add(row: str, figure: str, a, b, higher: bool, samples_a, samples_b, statistic, invalid: str | None = None) -> None:
        line = Line(case, host, row, figure, a, b, higher, invalid_in=None if include_invalid else invalid)
        if samples_a and samples_b and a is not None and b is not None:
            line.ci = bootstrap_ci(samples_a, samples_b, statistic, resamples)
        lines.append(line.judge(threshold))

    inf_a, inf_b = _series(raw_a, "inference"), _series(raw_b, "inference")
    whole = _invalid_in(rec_a.get("verdict"), rec_b.get("verdict"))  # the result's verdict covers its phases
    add("inference", "core qps", rec_a.get(Key.INFER_CORE_QPS), rec_b.get(Key.INFER_CORE_QPS), True, inf_a, inf_b, _inverse_mean, whole)
    for name, q in PERCENTILES.items():
        add(
            "inference",
            f"{name} ms",
            (rec_a.get("latency_ms") or {}).get(name),
            (rec_b.get("latency_ms") or {}).get(name),
            False,
            inf_a,
            inf_b,
            _percentile(q),
            whole,
        )

    def key(row: dict) -> tuple:
        return row["batch_size"], row["scenario"], row["clients"]

    rows_b = {key(row): (i, row) for i, row in enumerate(rec_b.get("performance") or [])}
    for i, row_a in enumerate(rec_a.get("performance") or []):
        if key(row_a) not in rows_b:
            continue
        j, row_b = rows_b[key(row_a)]
        label = f"bs {row_a['batch_size']} {row_a['scenario']} x{row_a['clients']}"
        row_invalid = _invalid_in(row_a.get("verdict"), row_b.get("verdict"))
        if row_a["scenario"] != "server":
            windows_a, windows_b = row_a.get("window_qps") or [], row_b.get("window_qps") or []
            usable = len(windows_a) > 1 and len(windows_b) > 1
            add(label, "qps", row_a.get("qps"), row_b.get("qps"), True, windows_a if usable else None, windows_b if usable else None, _mean, row_invalid)
        lat_a, lat_b = _series(raw_a, f"performance_{i}"), _series(raw_b, f"performance_{j}")
        for name, q in PERCENTILES.items():
            add(
                label,
                f"{name} ms",
                (row_a.get("latency_ms") or {}).get(name),
                (row_b.get("latency_ms") or {}).get(name),
                False,
                lat_a,
                lat_b,
                _percentile(q),
                row_invalid,
            )
    return lines


def compare_runs(dir_a: Path, dir_b: Path, threshold: float, resamples: int = RESAMPLES, include_invalid: bool = False) -> tuple[list[Line], list[str]]:
    """Every line of the comparison, and notes on what could not be matched."""
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
        lines.extend(
            compare_pair(a[k], b[k], read_latencies(_log_dir(a[k], dir_a)), read_latencies(_log_dir(b[k], dir_b)), threshold, resamples, include_invalid)
        )
    return lines, notes


def _num(value: float | None, figure: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if "qps" in figure else f"{value:.4f}"


def markdown(lines: list[Line], notes: list[str], name_a: str, name_b: str, threshold: float) -> str:
    out = [
        f"# InferPerf compare: A = {name_a}, B = {name_b}",
        "",
        f"change = (B - A) / A; 95% bootstrap CI of the change; REGRESSION = worse by more than {threshold:g}% and the CI excludes 0, "
        "between figures both runs judged valid (otherwise: not comparable).",
        "",
        "| case | host | row | figure | A | B | change | 95% CI | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for line in lines:
        change = "-" if line.change is None else f"{line.change * 100:+.1f}%"
        ci = "-" if line.ci is None else f"[{line.ci[0] * 100:+.1f}%, {line.ci[1] * 100:+.1f}%]"
        out.append(
            f"| {line.case} | {line.host} | {line.row} | {line.figure} | {_num(line.a, line.figure)} | {_num(line.b, line.figure)} | "
            f"{change} | {ci} | {'**REGRESSION**' if line.verdict == 'REGRESSION' else line.verdict} |"
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
