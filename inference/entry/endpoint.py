"""A running OpenAI-compatible server to benchmark: ``run.py --endpoint ...`` and host.yaml's
``ENDPOINT`` both hand over to tools/serving/cli.py, whose run goes into the results history.

``--repeat N`` (or ENDPOINT's ``repeat`` entry) runs the whole step plan N times, each a run of
tools/serving/cli.py of its own (``rep<k>/`` in the run folder); the run's summary.json is their
merge (``utils/results/serving_compare.py::merge_serving``): each step's figures the repetitions'
geometric means, and the ``repetitions`` block every repetition's figure, as a case run N times.
``run.py ab --endpoint ... --set-a KEY=VALUE --set-b KEY=VALUE`` runs two variants of the options
(KEY an ENDPOINT entry: ``extra_body``, ``url``, ``served_model``, ...), their repetitions
interleaved (A B B A ..., utils/run_plan.py), into ``A/`` and ``B/``, then decides between them as
``run.py ab`` does for cases (the paired comparison, its exit status). Every run folder's
summary.md is written by run.py's one summary writer (``utils/results/summary.py``).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common.errors import ConfigError, InferPerfError, StorageError, one_line
from common.files import write_json_atomic
from common.serving_record import ServingSummary
from utils.cli import INFERENCE_DIR
from utils.cli.stops import restore
from utils.cli.summary import record_history, write_report_safely
from utils.host_config import HostConfig
from utils.run_plan import AB_REPETITIONS, check_variants, parse_repeat, variant_order

History = Callable[[Path, Path], None]  # (the run folder to record, the results root it is in)


def history_beside(run_dir: Path, root: Path) -> None:
    """run.py --endpoint, without host.yaml: the run into the history beside it (its root's history.sqlite)."""
    from utils.history.store import resolve_url

    record_history(resolve_url(None, root), run_dir, run_dir / "summary.md")


@dataclass
class EndpointRun:
    """What run.py runs against a server: tools/serving/cli.py's command line (``argv``), the results
    root, how the run goes into the history, and how often and in which variants (run.py ab)."""

    argv: list[str]
    root: Path
    history: History
    origin: str | None = None  # the options came from this host.yaml's ENDPOINT
    repeat: int | None = None
    variants: dict[str, list[str]] = field(default_factory=dict)  # run.py ab: "A"/"B" -> the options it adds
    decision: argparse.Namespace | None = None  # run.py ab's --threshold, --between-run-cv, --allow-invalid


def wants_endpoint(argv: list[str]) -> bool:
    """run.py --endpoint: a running OpenAI-compatible server, tools/serving/cli.py."""
    return any(a == "--endpoint" or a.startswith("--endpoint=") for a in argv)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise ConfigError(f"{self.prog}: {message}")


def run_options(argv: list[str], ab: bool) -> tuple[argparse.Namespace, list[str]]:
    """run.py's own options of an endpoint run (``--repeat``; for ab ``--set-a``, ``--set-b`` and the
    decision's), and the rest: tools/serving/cli.py's command line."""
    from common.yamlio import add_override_option
    from utils.results.compare import add_decision_options

    parser = _Parser(prog="run.py ab" if ab else "run.py", add_help=False, allow_abbrev=False)
    parser.add_argument("--repeat", default=None)
    parser.set_defaults(set_a=None, set_b=None)
    if ab:
        for name in ("a", "b"):
            add_override_option(parser, f"--set-{name}", f"an ENDPOINT entry of variant {name.upper()}")
        add_decision_options(parser)
    return parser.parse_known_args(argv)


def variant_argv(sets_a: list[str], sets_b: list[str], base: Path) -> dict[str, list[str]]:
    """run.py ab's two variants as the options each adds to the command line: ``--set-a KEY=VALUE``,
    KEY an ENDPOINT entry (``extra_body``, ``url``, ...), VALUE YAML, as host.yaml's ENDPOINT has it."""
    from contract.config.load import parse_overrides
    from tools.serving.options import config_argv

    check_variants(sets_a, sets_b)
    return {
        name: config_argv(parse_overrides(sets), f"command line (--set-{name.lower()})", None, base) if sets else []
        for name, sets in (("A", sets_a), ("B", sets_b))
    }


def run_endpoint(argv: list[str]) -> int:
    """run.py [ab] --endpoint ...: its command line as tools/serving/cli.py's, with run.py's --repeat and
    ab's variants; the run into the history beside it."""
    ab = argv[:1] == ["ab"]
    try:
        options, rest = run_options(argv[1:] if ab else argv, ab)
        run = EndpointRun(rest, INFERENCE_DIR / "result", history_beside, repeat=parse_repeat(options.repeat))
        if ab:
            run.variants, run.decision = variant_argv(options.set_a, options.set_b, Path.cwd()), options
    except InferPerfError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    return run_serving(run)


def run_host_endpoint(config: HostConfig, args: argparse.Namespace, previous: dict) -> int:
    """host.yaml's ENDPOINT: as run.py --endpoint (tools/serving/cli.py), with run.py's stop handlers undone."""
    restore(previous)
    try:
        run = endpoint_run(config, args)
    except InferPerfError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    return run_serving(run)


def endpoint_run(config: HostConfig, args: argparse.Namespace) -> EndpointRun:
    """host.yaml's ENDPOINT as run.py --endpoint's run: its entries as the command line
    (tools/serving/cli.py), ``repeat`` (or run.py --repeat, which wins), run.py --strict (as the
    entry ``strict: true``) and run.py ab's variants; the case options of this command line have no
    cases to act on, so they are refused."""
    from tools.serving.options import CONFIG_KEY, config_argv

    given = [
        name
        for name, value in (
            ("--cases", args.cases),
            ("--model", args.model),
            ("--workload", args.workload),
            ("--set", args.overrides),
        )
        if value
    ]
    if given:
        raise ConfigError(f"{given[0]}: {config.path} has ENDPOINT, a running server to benchmark, and no cases")
    entries = dict(config.endpoint) if isinstance(config.endpoint, dict) else config.endpoint
    repeat = parse_repeat(args.repeat)
    if isinstance(entries, dict) and "repeat" in entries:
        entry = entries.pop("repeat")
        try:
            from_config = parse_repeat(str(entry))
        except ConfigError as exc:
            raise ConfigError(f"{config.path}: key '{CONFIG_KEY}.repeat': {one_line(exc).split(': ', 1)[1]}") from None
        repeat = from_config if repeat is None else repeat
    argv = config_argv(entries, str(config.path), config.log_path, INFERENCE_DIR)
    if args.strict and "--strict" not in argv:  # run.py --strict gates a served run as it gates cases: exit 3
        argv.append("--strict")
    run = EndpointRun(
        argv,
        config.log_path,
        lambda run_dir, _root: record_history(config.history, run_dir, run_dir / "summary.md"),
        origin=str(config.path),
        repeat=repeat,
    )
    if args.set_a is not None:
        run.variants, run.decision = variant_argv(args.set_a, args.set_b, INFERENCE_DIR), args
    return run


def run_serving(run: EndpointRun) -> int:
    """One run of tools/serving/cli.py (its folder then completed: ``serving_written``), or, with
    --repeat or ab's variants, each repetition of each variant in turn, then the sides merged."""
    from tools.serving.cli import main as serving_main

    if not run.variants and (run.repeat or 1) == 1:
        return serving_main(
            run.argv,
            run.root,
            origin=run.origin,
            on_written=lambda folder: serving_written(folder, lambda d: run.history(d, d.parent)),
        )
    try:
        return run_repeated(run)
    except InferPerfError as exc:  # the run folder or a summary could not be written: one line
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # between two repetitions (during one, tools/serving/cli.py says it)
        print("interrupted: the repetitions written stay in the run folder, which has no summary", file=sys.stderr)
        return 130


def run_repeated(run: EndpointRun) -> int:
    """Each repetition of each variant in turn (``rep<k>/`` in the run folder or its A/ and B/), then
    each side's merged summary (``finish_side``) and, for ab, the comparison; the exit status."""
    from tools.serving.cli import main as serving_main

    rounds = run.repeat or (AB_REPETITIONS if run.variants else 1)
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    run_dir = _open_run_dir(run, run_id)
    sides = {name: run_dir / name for name in run.variants} if run.variants else {"": run_dir}
    done: dict[str, list[Path]] = {name: [] for name in sides}
    worst = 0
    for repetition, name in [(k, name) for k in range(1, rounds + 1) for name in variant_order(list(sides), k)]:
        print(f"repetition {repetition} of {rounds}" + (f", variant {name}" if name else ""), flush=True)
        written: list[Path] = []
        argv = [*run.argv, *run.variants.get(name, []), "--output-dir", str(sides[name])]
        code = serving_main(argv, run.root, run.origin, written.append, f"rep{repetition}")
        done[name] += written
        if not any(done.values()):  # the first one wrote nothing (a bad option, no server): nor does the run
            _remove_empty(run_dir, list(sides.values()))
            return code
        if code not in (0, 3):  # 3: --strict found an INVALID step, written; anything else ends the run
            print(f"repetition {repetition} ended with exit status {code}: the run stops; its folder: {run_dir}")
            return code
        worst = max(worst, code)
    for name, side in sides.items():
        finish_side(side, f"{run_id}-{name}" if name else run_id, done[name], lambda d: run.history(d, run_dir.parent))
    return compare_sides(run, sides) if run.variants else worst


def _open_run_dir(run: EndpointRun, run_id: str) -> Path:
    """The run folder (and A/, B/ in it), in --output-dir or the results root."""
    from tools.serving.options import check_output_dir

    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--output-dir", default=None)
    given = pre.parse_known_args(run.argv)[0].output_dir
    root = Path(given) if given else run.root
    check_output_dir(root, "--output-dir" if given else "the results folder")
    run_dir = root / f"run{run_id}"
    try:
        run_dir.mkdir(parents=True)
        for name in run.variants:
            (run_dir / name).mkdir()
    except OSError as exc:
        raise StorageError(f"the run folder could not be made in {root}: {one_line(exc)}") from None
    return run_dir


def _remove_empty(run_dir: Path, sides: list[Path]) -> None:
    for folder in [*sides, run_dir]:
        try:
            folder.rmdir()
        except OSError:
            pass  # not empty (a --launch log, or the run folder itself): left as it is


def finish_side(side: Path, run_id: str, repetitions: list[Path], history: Callable[[Path], None]) -> None:
    """A run folder of repetitions (one side of ab, or a --repeat run): its summary.json merged from
    theirs, its summary.md, report.html, and the run into the history."""
    from utils.results.serving_compare import merge_serving, read_serving_summary

    summary = merge_serving([read_serving_summary(d) for d in repetitions], repetitions, run_id)
    write_json_atomic(side / "summary.json", summary.to_json())
    complete(side, summary, repetitions, history)


def serving_written(run_dir: Path, history: Callable[[Path], None]) -> None:
    """A serving run's folder is written (tools/serving/cli.py): its summary.md, report.html, history."""
    from utils.results.serving_compare import read_serving_summary

    complete(run_dir, read_serving_summary(run_dir), [run_dir], history)


def complete(run_dir: Path, summary: ServingSummary, repetitions: list[Path], history: Callable[[Path], None]) -> None:
    """summary.md (``write_summary_md``), then report.html (drawn from summary.json's rows), then the history."""
    md_path = write_summary_md(run_dir, summary, repetitions)
    print(md_path.read_text(encoding="utf-8"), flush=True)
    write_report_safely(run_dir, INFERENCE_DIR)
    history(run_dir)


def write_summary_md(run_dir: Path, summary: ServingSummary, repetitions: list[Path]) -> Path:
    """``run_dir``'s summary.md, by run.py's one summary writer (utils/results/summary.py), from its
    summary.json's rows and the notes of its repetitions' serving/result.json steps."""
    from utils.results.summary import write_serving_summary

    results = [_result(d) for d in repetitions]
    blocks = [b for r in results for b in [*r.get("steps", []), *r.get("capacity_steps", [])]]
    url = (results[0].get("server_metrics") or {}).get("url") if results else None
    return write_serving_summary(run_dir, summary, blocks, url)


def _result(folder: Path) -> dict:
    try:
        data = json.loads((folder / "serving" / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def compare_sides(run: EndpointRun, sides: dict[str, Path]) -> int:
    """run.py ab: B against A, paired (their repetitions ran in turn), as run.py ab decides for cases."""
    from utils.results.compare import CompareError, compare_runs, write_comparison

    assert run.decision is not None
    d, dir_a, dir_b = run.decision, sides["A"], sides["B"]
    try:
        result = compare_runs(dir_a, dir_b, d.threshold, d.between_run_cv, d.allow_invalid, paired=True)
    except CompareError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    write_comparison(result, dir_a, dir_b, d.threshold, d.between_run_cv)
    return result.exit_code
