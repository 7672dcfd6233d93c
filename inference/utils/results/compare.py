"""Compare two runs: ``python3 run.py compare RUN_A RUN_B [--threshold 5] [--allow-invalid]``.

RUN_A is the baseline, RUN_B the candidate; each is a run directory (``result/run<id>``) or its
name under ``inference/result/``. Results are matched by case:framework and node rank, figures
by row and name (``utils/results/figures.py``: core qps, latency percentiles, every performance
row's qps and percentiles, a server row's p99, an LLM row's TTFT, TPOT and tokens/s). Two serving
runs (``run.py --endpoint``) are matched by load step instead, each step a row
(``utils/results/serving_compare.py``: tokens/s, requests/s, goodput, TTFT, TPOT and E2E); a
serving run and a run of cases have nothing in common (exit 2).

Each figure is decided across the repetitions of both runs (``run.py --repeat N``) by
``utils/results/decide.py``: the ratio B/A with its 95 % Welch interval on the log scale, and
the verdict at ``--threshold`` (the smallest change that counts): worse, better, below threshold,
inconclusive or no detectable change. Two runs made at different times have not seen the noise
between runs, however many repetitions each has (they share their run's minutes): each figure is
decided with the between-run noise of its series, learned from the results history
(``utils/history/noise.py``, docs/history.md; ``--history URL``, default the history.sqlite in the
runs' log path). A figure whose series has too little history is not decided (exit 3), and one line
names the remedies: ``run.py calibrate``, ``run.py ab`` (which pairs the repetitions and cancels the
machine's minutes), or ``--between-run-cv CV``, a constant spread for each side.
A figure a run judged INVALID is shown as "not comparable" unless
``--allow-invalid``.

Exit status: 0 no regression and nothing missing; 1 a regression (a figure "worse" beyond the
threshold); 3 no regression, but a figure of either run is INVALID (without ``--allow-invalid``),
a figure is not decided (too little history), or a case, row (a serving run's load step) or
throughput of A is missing or failed in B; 2 bad input (one line: a run that is not found or has
no summary.json, a summary.json record with a key missing or of the wrong type (the file, record
and key named), runs with nothing in common, a bad option, a malformed ``--history``).
Writes ``compare_<RUN_A name>.md`` and ``.json`` into RUN_B.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common.files import atomic_path, write_json_atomic
from common.record import RecordError
from common.summary_record import SUMMARY_FILE, Summary, SummaryRecord, read_summary
from utils.results import decide as decision
from utils.results.figures import KINDS, THROUGHPUTS, repetition_figures
from utils.results.serving_compare import is_serving_run, read_serving_run, serving_figures

EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_COMPARABLE = 3


class CompareError(Exception):
    """Bad input: said in one line, exit 2."""


@dataclass
class Line:
    """One figure of one case x host, A against B."""

    case: str
    host: str
    row: str
    figure: str
    unit: str
    higher_is_better: bool
    a: float  # the geometric mean of A's repetitions
    b: float
    n_a: int
    n_b: int
    ratio: float  # B / A
    low: float  # the ratio's 95 % interval
    high: float
    widened: bool  # a side carries the between-run term: runs made at different times (module docstring)
    decided: str  # decide.py's verdict
    invalid_in: str | None = None  # "A", "B" or "A and B"
    verdict: str = ""  # what is shown: decided, or "not comparable (...)" for an INVALID figure
    paired: bool = False  # run.py ab: decided on the pairs of repetitions that ran together

    @property
    def regression(self) -> bool:
        return self.verdict == decision.WORSE


@dataclass
class Comparison:
    lines: list[Line] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what makes exit 3: missing, failed, INVALID
    notes: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)  # figures whose between-run noise is unknown (exit 3)

    @property
    def exit_code(self) -> int:
        if any(line.regression for line in self.lines):
            return EXIT_REGRESSION
        return EXIT_NOT_COMPARABLE if self.problems or self.undecided else 0


@dataclass
class Between:
    """How a figure of two runs made at different times is decided: with the between-run noise of its
    series learned from the results history (``utils/history/noise.py``), or, given
    ``--between-run-cv``, with that constant spread on each side."""

    cv: float | None = None
    model: Any = None  # a NoiseModel, or None: no history could be read (``why``)
    series_a: dict[tuple[str, str, str], Any] = field(default_factory=dict)  # (case, row, figure) -> Series
    series_b: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    where: str = ""
    why: str = ""
    used: set[str] = field(default_factory=set)
    software: list[str] = field(default_factory=list)  # what changed in software from A to B

    def noise(self, case: str, row: str, figure: str) -> tuple[tuple[Any, Any], bool] | str:
        """((noise of A, noise of B), whether they are one estimate), or why there is none."""
        if self.model is None:
            return self.why
        sa, sb = self.series_a.get((case, row, figure)), self.series_b.get((case, row, figure))
        if sa is None or sb is None:
            return "its series is not in the history (the run's result.json is missing)"
        na, nb = self.model.of(sa), self.model.of(sb)
        if na is None or nb is None:
            from utils.history.noise import MIN_POINTS

            fewest = min(self.model.points_of(s) for s in (sa, sb))
            if fewest >= MIN_POINTS:  # enough runs, but a change point cut them into levels too short
                return (
                    f"too little history to know its between-run noise ({fewest} runs, cut by a change point into "
                    f"levels with fewer than the {MIN_POINTS - 1} degrees of freedom needed)"
                )
            return f"too little history to know its between-run noise ({fewest} of the {MIN_POINTS} runs needed)"
        return (na, nb), sa.key.digest == sb.key.digest or na.source == nb.source


def resolve_run(name: str, result_root: Path) -> Path:
    for candidate in (Path(name), result_root / name, result_root / f"run{name}"):
        if candidate.is_dir():
            return candidate
    raise CompareError(f"compare: run {name!r} not found (looked in . and {result_root})")


def load_run(run_dir: Path) -> Summary:
    path = run_dir / SUMMARY_FILE
    if not path.is_file():
        raise CompareError(f"compare: {run_dir} has no summary.json (not a finished run)")
    try:
        return read_summary(path)
    except RecordError as exc:  # unreadable, or a key missing or of the wrong type: the file and key named
        raise CompareError(f"compare: {exc}") from None


def default_history(*run_dirs: Path) -> str | None:
    """The SQLite history beside the runs: ``history.sqlite`` in their log path (an ab side's is one up)."""
    from utils.history.store import DEFAULT_FILE

    for run_dir in run_dirs:
        for folder in (run_dir.resolve().parent, run_dir.resolve().parent.parent):
            if (folder / DEFAULT_FILE).is_file():
                return f"sqlite:///{folder / DEFAULT_FILE}"
    return None


def learned_noise(dir_a: Path, dir_b: Path, history: str | None) -> Between:
    """Each figure's series in both runs, and the history's noise model for them (``Between``); a
    history that cannot be read leaves every figure undecided, with why."""
    from common.errors import one_line
    from utils.history.noise import NoiseModel
    from utils.history.points import run_entries
    from utils.history.store import HistoryError, Store, shown_url

    url = history or default_history(dir_b, dir_a)
    if url is None:
        return Between(why="no results history beside the runs (history.sqlite in their log path; --history URL)")
    try:
        a, b = run_entries(dir_a), run_entries(dir_b)
        store = Store.open(url, create=False)
        try:
            sides = [p for _, points in a + b for p in points]
            hosts = {p.series.key.fingerprint for p in sides}
            chosen = [s for s in store.all_series() if s.key.fingerprint in hosts]
            stored = store.points(chosen)
        finally:
            store.close()
    except (HistoryError, ValueError) as exc:
        return Between(where=shown_url(url), why=f"the history cannot be read: {one_line(exc)}")
    model = NoiseModel({s: stored[s.id] for s in chosen if s.id is not None}, {e.run_key for e, _ in a + b})

    def by_figure(entries: list) -> dict[tuple[str, str, str], Any]:
        return {(p.series.key.case, p.series.key.row, p.series.key.figure): p.series for _, ps in entries for p in ps}

    from utils.history.changes import software_changes

    first_a, first_b = ([p for _, ps in side for p in ps][:1] for side in (a, b))
    changed = software_changes(first_a[0].software, first_b[0].software) if first_a and first_b else []
    return Between(model=model, series_a=by_figure(a), series_b=by_figure(b), where=shown_url(url), software=changed)


def _host(rec_a: SummaryRecord, rec_b: SummaryRecord) -> str:
    return rec_a.host if rec_a.host == rec_b.host else f"{rec_a.host} -> {rec_b.host}"


@dataclass(frozen=True)
class Judging:
    """How a comparison decides each figure: the change it looks for (``threshold``, %), the between-run
    noise, whether an INVALID figure is judged all the same, and whether the repetitions ran in pairs."""

    threshold: float
    between: Between
    allow_invalid: bool
    paired: bool = False


def compare_figures(
    case: str,
    host: str,
    figures_a: dict[tuple[str, str], list[decision.Sample]],
    figures_b: dict[tuple[str, str], list[decision.Sample]],
    judging: Judging,
    out: Comparison,
) -> None:
    """Every figure of one case x host (or serving run), (row, name) -> its repetitions' samples, that
    both runs measured, decided; what B lacks, as a problem; a figure whose between-run noise is not
    known, undecided (a problem, with the remedies in a note)."""
    threshold, between, paired = judging.threshold, judging.between, judging.paired
    for key, samples_a in figures_a.items():
        row, figure = key
        samples_b = figures_b.get(key)
        if samples_b is None:
            where = f"{case} on {host}: {row} {figure}"
            if figure in THROUGHPUTS:
                out.problems.append(f"{where} is in A but missing in B")
            else:
                out.notes.append(f"{where} is in A but not measured in B (too few queries for it)")
            continue
        kind = KINDS[figure]
        if paired and len(samples_a) == len(samples_b) >= 2 or between.cv is not None:
            cv = between.cv if between.cv is not None else decision.BETWEEN_RUN_CV
            d = decision.decide(samples_a, samples_b, kind.higher_is_better, threshold / 100, cv, paired=paired)
        else:
            noise = between.noise(case, row, figure)
            if isinstance(noise, str):
                out.undecided.append(f"{case} on {host}: {row} {figure}: {noise}")
                continue
            (na, nb), shared = noise
            d = decision.decide_between(
                samples_a, samples_b, kind.higher_is_better, threshold / 100, (na.cv, na.df), (nb.cv, nb.df), shared
            )
            between.used.add(na.source if na.source == nb.source else f"A: {na.source}; B: {nb.source}")
        invalid = (
            " and ".join(
                side for side, samples in (("A", samples_a), ("B", samples_b)) if not all(s.valid for s in samples)
            )
            or None
        )
        line = Line(case, host, row, figure, kind.unit, kind.higher_is_better,
                    math.exp(_log_mean(samples_a)), math.exp(_log_mean(samples_b)),
                    d.n_a, d.n_b, d.ratio, d.low, d.high, d.widened, d.verdict,
                    invalid, d.verdict, d.paired)  # fmt: skip
        if invalid and not judging.allow_invalid:
            line.verdict = f"not comparable ({d.verdict}; INVALID in {invalid})"
            out.problems.append(
                f"{case} on {host}: {row} {figure} is INVALID in {invalid} (--allow-invalid judges it anyway)"
            )
        out.lines.append(line)


def _log_mean(samples) -> float:
    return sum(math.log(s.value) for s in samples) / len(samples)


def compare_runs(
    dir_a: Path,
    dir_b: Path,
    threshold: float,
    between_cv: float | None = None,
    allow_invalid: bool = False,
    paired: bool = False,
    history: str | None = None,
) -> Comparison:
    """Every line of the comparison, what is missing or failed in B, and notes. ``paired``: the
    runs' repetitions ran in pairs (run.py ab), so each figure is decided on its pairs. Otherwise
    each figure's between-run noise is its series' in the history at ``history`` (default: the
    runs' log path's history.sqlite), unless ``between_cv`` gives a constant."""
    between = Between(between_cv) if between_cv is not None or paired else learned_noise(dir_a, dir_b, history)
    if is_serving_run(dir_a) or is_serving_run(dir_b):
        return compare_serving_runs(dir_a, dir_b, Judging(threshold, between, allow_invalid, paired))
    run_a, run_b = load_run(dir_a), load_run(dir_b)

    def index(summary: Summary) -> dict[tuple[str, str, int | None], SummaryRecord]:
        return {r.identity: r for r in summary.results}

    a, b = index(run_a), index(run_b)
    common = [k for k in a if k in b]
    if not common:
        names = lambda idx: ", ".join(sorted({f"{c}:{f}" for c, f, _ in idx})) or "none"  # noqa: E731
        raise CompareError(f"compare: the runs share no case and host (A: {names(a)}; B: {names(b)})")
    out = Comparison()
    out.problems += [f"{c}:{f} noderank {n} is in A but not in B" for (c, f, n) in a if (c, f, n) not in b]
    out.notes += [f"only in B: {c}:{f} noderank {n}" for (c, f, n) in b if (c, f, n) not in a]
    for k in common:
        rec_a, rec_b = a[k], b[k]
        if not rec_b.succeeded:
            out.problems.append(
                f"{rec_b.name} on {rec_b.host} {rec_b.status} in B at step {rec_b.failed_step}: {rec_b.error}"
            )
        elif not rec_a.succeeded:
            out.notes.append(f"{rec_a.name} on {rec_a.host} {rec_a.status} in A: not compared")
        else:
            figures_a, figures_b = repetition_figures(rec_a), repetition_figures(rec_b)
            host = _host(rec_a, rec_b)
            judging = Judging(threshold, between, allow_invalid, paired)
            compare_figures(rec_a.name, host, figures_a, figures_b, judging, out)
    if not out.lines and not out.problems and not out.undecided:
        raise CompareError(
            f"compare: {dir_a.name} and {dir_b.name} have no figure in common (different batch sizes or scenarios?)"
        )
    _note_widened(out, between)
    return out


def _note_widened(out: Comparison, between: Between) -> None:
    if between.software:
        out.notes.append("software changed from A to B: " + ", ".join(between.software))
    if out.undecided:
        out.notes.append(
            f"{len(out.undecided)} figure(s) not decided: {out.undecided[0]}"
            + (f" (and {len(out.undecided) - 1} more)" if len(out.undecided) > 1 else "")
            + f"; history {between.where or 'none'}. Remedies: `run.py calibrate` (repeated runs spread over "
            "time fill the history), `run.py ab` (pairs cancel the noise between runs), or --between-run-cv CV"
        )
    if not any(line.widened and not line.paired for line in out.lines):
        return
    if between.cv is not None:
        out.notes.append(
            "* runs made at different times: each side was widened by the given between-run spread of "
            f"{between.cv:.1%} (--between-run-cv); run.py ab, which pairs the repetitions, decides smaller changes"
        )
    else:
        sources = "; ".join(sorted(between.used))
        out.notes.append(
            "* runs made at different times: each side's between-run noise was learned from the history "
            f"{between.where} ({sources}; docs/history.md)"
        )


def compare_serving_runs(dir_a: Path, dir_b: Path, judging: Judging) -> Comparison:
    """Two serving runs (run.py --endpoint), each load step a row of their one record
    (utils/results/serving_compare.py), decided as a case's figures are."""
    for run_dir, other in ((dir_a, dir_b), (dir_b, dir_a)):
        if not is_serving_run(run_dir):
            load_run(run_dir)  # not a finished run: said as for any run
            raise CompareError(
                f"compare: {other.name} is a serving run (run.py --endpoint) and {run_dir.name} a run of cases: "
                "nothing in common"
            )
    try:
        a, b = read_serving_run(dir_a), read_serving_run(dir_b)
    except ValueError as exc:
        raise CompareError(f"compare: {exc}") from None
    if not set(a.steps) & set(b.steps):
        raise CompareError(
            f"compare: the serving runs share no load step (A: {', '.join(a.steps) or 'none'}; "
            f"B: {', '.join(b.steps) or 'none'})"
        )
    out = Comparison()
    figures_a, figures_b, out.notes = serving_figures(a, b)
    out.problems += [f"load step {step} is in A but not in B" for step in a.steps if step not in b.steps]
    out.notes += [f"only in B: load step {step}" for step in b.steps if step not in a.steps]
    out.problems += [f"load step {step}: {failed} in B" for step, failed in b.failed().items() if step in a.steps]
    out.notes += [f"load step {step}: {failed} in A" for step, failed in a.failed().items()]
    shared = {key: samples for key, samples in figures_a.items() if key[0] in b.steps}
    compare_figures("serving", _host(a.record, b.record), shared, figures_b, judging, out)
    _note_widened(out, judging.between)
    return out


def _num(value: float, unit: str) -> str:
    return f"{value:.2f}" if unit != "ms" else f"{value:.4f}"


def markdown(result: Comparison, name_a: str, name_b: str, threshold: float) -> str:
    out = [
        f"# InferPerf compare: A = {name_a}, B = {name_b}",
        "",
        "B/A: the ratio of the repetitions' geometric means, with its 95 % interval (Welch, on the log scale; "
        "'paired': "
        "Student's t on the ratios of repetitions that ran together, as run.py ab runs them; * runs made at "
        "different times, each side's variance the between-run noise of its series, learned from the history; "
        f"utils/results/decide.py). Threshold {threshold:g}%: the smallest change that counts. worse/better = the "
        "interval "
        f"excludes 1 and the change is beyond {threshold:g}%; inconclusive = the interval includes 1 but reaches "
        "beyond "
        f"{threshold:g}% on the worse side.",
        "",
        "| case | host | row | figure | A | B | B/A (95% CI) | reps A/B | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for line in result.lines:
        shown = f"**{line.verdict.upper()}**" if line.regression else line.verdict
        out.append(
            f"| {line.case} | {line.host} | {line.row} | {line.figure} | {_num(line.a, line.unit)} | "
            f"{_num(line.b, line.unit)} | "
            f"{line.ratio:.3f} [{line.low:.3f}, {line.high:.3f}] | "
            f"{line.n_a}/{line.n_b}{'*' if line.widened else ' paired' if line.paired else ''} | {shown} |"
        )
    if result.problems:
        out += ["", "Not comparable (exit 3 unless a regression):"] + [f"- {p}" for p in result.problems]
    if result.undecided:
        out += ["", "Not decided (exit 3 unless a regression):"] + [f"- {u}" for u in result.undecided]
    if result.notes:
        out += [""] + [f"- {n}" for n in result.notes]
    regressions = sum(line.regression for line in result.lines)
    out += [
        "",
        f"{regressions} regression(s) beyond {threshold:g}%."
        if regressions
        else f"No regression beyond {threshold:g}%."
        if result.lines
        else "No figure decided.",
    ]
    return "\n".join(out) + "\n"


def _threshold(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and 0 <= value < 100):
        raise argparse.ArgumentTypeError(f"--threshold must be a percentage in [0, 100), got {text!r}")
    return value


def _cv(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and 0 <= value < 1):
        raise argparse.ArgumentTypeError(f"--between-run-cv must be a fraction in [0, 1), got {text!r}")
    return value


def add_decision_options(parser: argparse.ArgumentParser) -> None:
    """The options of a decision, shared by ``compare`` and ``ab``."""
    parser.add_argument(
        "--threshold", type=_threshold, default=5.0, help="the smallest change, in percent, that counts (default 5)"
    )
    parser.add_argument(
        "--between-run-cv",
        type=_cv,
        default=None,
        help="a constant between-run spread for each side of runs made at different times, as a fraction, instead "
        f"of the one learned from the history (docs/history.md; {decision.BETWEEN_RUN_CV} was one 2-core machine's)",
    )
    parser.add_argument(
        "--history",
        type=_history_url,
        default=None,
        help="the results history to learn the between-run noise from (a SQLAlchemy URL or a SQLite file; "
        "default: history.sqlite in the runs' log path)",
    )
    parser.add_argument(
        "--allow-invalid",
        "--include-invalid",
        dest="allow_invalid",
        action="store_true",
        help="judge figures a run marked INVALID too (default: not comparable, exit 3)",
    )


def write_comparison(result: Comparison, dir_a: Path, dir_b: Path, threshold: float, between_cv: float | None) -> Path:
    """Print the comparison and write it into RUN_B as compare_<A>.md and .json (atomically)."""
    text = markdown(result, dir_a.name, dir_b.name, threshold)
    print(text, end="")
    md_path = dir_b / f"compare_{dir_a.name}.md"
    with atomic_path(md_path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    write_json_atomic(
        md_path.with_suffix(".json"),
        {
            "run_a": str(dir_a),
            "run_b": str(dir_b),
            "threshold_percent": threshold,
            "between_run_cv": between_cv,  # null: learned from the history (notes say from where)
            "confidence": decision.CONFIDENCE,
            "exit_code": result.exit_code,
            "lines": [asdict(line) for line in result.lines],
            "problems": result.problems,
            "undecided": result.undecided,
            "notes": result.notes,
        },
    )
    print(f"written: {md_path} and {md_path.with_suffix('.json')}")
    return md_path


def _history_url(text: str) -> str:
    from utils.history.store import resolve_url

    try:
        url = resolve_url(text, Path.cwd())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--history {exc}") from None
    if url is None:
        raise argparse.ArgumentTypeError("--history off: name a history, or leave the option out")
    return url


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints the usage too)
        raise CompareError(f"{self.prog}: {message}")


def main(argv: list[str] | None, result_root: Path) -> int:
    parser = _Parser(prog="run.py compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", metavar="RUN_A", help="baseline run directory or run name")
    parser.add_argument("run_b", metavar="RUN_B", help="candidate run directory or run name")
    add_decision_options(parser)
    try:
        args = parser.parse_args(argv)
        dir_a, dir_b = resolve_run(args.run_a, result_root), resolve_run(args.run_b, result_root)
        result = compare_runs(
            dir_a, dir_b, args.threshold, args.between_run_cv, args.allow_invalid, history=args.history
        )
    except CompareError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    write_comparison(result, dir_a, dir_b, args.threshold, args.between_run_cv)
    return result.exit_code
