"""Host-side entry (spec §2.2.2): run every case of configs/host.yaml on every host, then merge.

    sudo python3 run.py [--config configs/host.yaml] [--cases resnet50,digits:pytorch]

Exit status: 0 when every case succeeded on every host, 1 when any failed
(each failure is named with its case, host and step), 2 for a bad config,
3 with --strict when every case ran but a result's verdict is invalid,
6 when the summary cannot be written (disk full, read-only), 130 when interrupted. Results:
<FLAGPERF_LOG_PATH>/run<id>/summary.{json,md} and report.html
(utils/results/report/). ``run.py compare RUN_A RUN_B [--threshold 5]`` compares two runs (utils/results/compare.py).
"""

from __future__ import annotations

import signal
import sys

if __name__ == "__main__":
    # Until main() installs its own handlers (common/stop_signals.py), a stop finds nothing opened or
    # written: one line and the stop's exit status, not an import's traceback.
    def _stop_before_main(signum: int, _frame: object) -> None:
        import os

        os.write(2, f"{signal.Signals(signum).name} during start-up: nothing was run or written\n".encode())
        os._exit(128 + signum)

    for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(_sig, _stop_before_main)

import argparse
import secrets
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from loguru import logger

from common import __version__
from common.errors import ConfigError, InferPerfError, one_line
from common.files import LogFileSink, atomic_path, storage_error
from common.layout import BASE_PREFIX, framework_dir, is_base_case
from common.log_lock import release_after_signal
from common.monitor_protocol import monitor_protocol
from common.stop_signals import ImportSafeStop
from common.yamlio import add_override_option
from utils import executors
from utils.bytemlperf_workload import without_keys, workload_cases
from utils.case_specs import CaseSpec, check_unique_cases, model_case
from utils.executors.base import CaseOutcome, HostSession, case_result_dir
from utils.host_config import HostConfig, load_host_config
from utils.requirements import check_backend_requirements, check_case_requirements
from utils.run_plan import AB_REPETITIONS, Planned, Variant, build_plan, check_variants, parse_repeat, with_sets

if TYPE_CHECKING:
    from tools.config import CaseConfig
    from utils.run_progress import ProgressConsole

INFERENCE_DIR = Path(__file__).resolve().parent
INTERRUPT_GRACE_S = 60.0


EPILOG = f"""\
default config: {INFERENCE_DIR / "configs" / "host.yaml"}
results: FLAGPERF_LOG_PATH/run<id>/ (default {INFERENCE_DIR / "result"}): summary.json,
  summary.md, report.html, run.log, and per case and host <case:framework>/<host>_noderank<i>/
exit status: 0 every case succeeded; 1 a case failed (named with its host and step);
  2 bad config or command line; 3 with --strict, a result is invalid; 6 the summary could
  not be written (disk full or read-only); 130 interrupted
compare two runs: run.py compare RUN_A RUN_B [--threshold 5]
benchmark a running server: run.py --endpoint http://HOST:PORT/v1 --served-model NAME [--concurrency 1,2,4] \
(run.py --endpoint X --served-model Y --help), or from host.yaml: ENDPOINT: {{url: ..., served_model: ...}}
"""


def parse_args(argv: list[str] | None, ab: bool = False) -> argparse.Namespace:
    """run.py's options; ``ab``: run.py ab's, which add the two variants and compare's decision options."""
    parser = argparse.ArgumentParser(
        prog="run.py ab" if ab else None,
        description=AB_DESCRIPTION if ab else __doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(set_a=None, set_b=None)
    if ab:
        from utils.results.compare import add_decision_options

        for name in ("a", "b"):
            add_override_option(parser, f"--set-{name}", f"a case config key of variant {name.upper()}")
        add_decision_options(parser)
    parser.add_argument(
        "--config", default=str(INFERENCE_DIR / "configs" / "host.yaml"), help="host.yaml to use (default: %(default)s)"
    )
    parser.add_argument(
        "--cases", default=None, help="comma-separated case or case:framework names to run (default all)"
    )
    add_override_option(
        parser,
        "--set",
        "override a case config key for every case of this run (YAML value), "
        "e.g. --set batch_sizes=[1,8,32] --set scenario=server --set target_qps=50 --set latency_bound_ms=100",
        dest="overrides",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="FILE",
        help=(
            "benchmark this ONNX file (or ByteMLPerf model-zoo JSON) with synthetic inputs instead of CASES; "
            "repeatable (docs/onnx_models.md)"
        ),
    )
    parser.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="FILE",
        help=(
            "run this ByteMLPerf workload JSON instead of CASES (its case's data directory from CASES); repeatable "
            "(docs/bytemlperf_migration.md)"
        ),
    )
    parser.add_argument(
        "--repeat",
        default=None,
        metavar="N",
        help="run every case N times, interleaved, each a fresh process; the headline figures and their ± are then "
        "the repetitions' (default: each case config's repetitions, else 1, and for run.py ab "
        f"{AB_REPETITIONS}; docs/measurement.md, 'Repetitions')",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 3 when any result's verdict is invalid or left a check not judged"
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="also show every pipeline's log lines on the console"
    )
    parser.add_argument(
        "--list", action="store_true", help="list the cases, vendors and compilers available, then exit"
    )
    parser.add_argument("--version", action="version", version=f"InferPerf {__version__}")
    return parser.parse_args(argv)


AB_DESCRIPTION = f"""Run two variants of the same cases interleaved on the same hosts (utils/run_plan.py: ABBA per
repetition), then decide between them as run.py compare does: e.g. run.py ab --set-a compiler=onnxruntime
--set-b compiler=inductor. Each side runs {AB_REPETITIONS} repetitions unless --repeat or a case config's
repetitions says otherwise (the calibration: docs/measurement.md). Results: run<id>/A/ and run<id>/B/ (each a
run folder), the decision in run<id>/B/compare_A.md. Exit status as run.py compare's (0, 1 regression of B,
3 not comparable), 2 bad input, 130 interrupted."""


def list_available(perf_dir: Path) -> str:
    """Cases (with their frameworks), vendors (with their compilers and images), as found on disk."""
    from inference_engine.registry import compilers, vendor_names
    from tools.compat.bytemlperf.backend import describe_backends

    lines = ["cases:"]
    for case in sorted(
        p for p in (perf_dir / "benchmarks").iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    ):
        frameworks = sorted(f.name for f in case.iterdir() if f.is_dir() and not f.name.startswith(("_", ".")))
        configured = (perf_dir / "configs" / case.name / "configurations.yaml").is_file()
        lines.append(f"  {case.name}: {', '.join(frameworks) or '-'}" + ("" if configured else "  (no configs/ entry)"))
    lines.append("vendors (compilers; images):")
    engines = perf_dir / "inference_engine"
    for vendor in vendor_names(engines):
        images_dir = perf_dir / "docker_images" / vendor
        images = (
            sorted(d.name for d in images_dir.iterdir() if (d / "Dockerfile").is_file()) if images_dir.is_dir() else []
        )
        lines.append(
            f"  {vendor}: {', '.join(compilers(vendor, engines)) or '-'}; images: {', '.join(images) or 'none'}"
        )
        lines.extend(describe_backends(engines / vendor))  # ByteMLPerf backend folders and their interact profiles
    return "\n".join(lines)


def select_cases(config: HostConfig, selection: str | None) -> list[CaseSpec]:
    if not selection:
        return config.cases
    wanted = [s.strip() for s in selection.split(",") if s.strip()]
    chosen = [
        c for c in config.cases if c.case in wanted or c.key in wanted or (BASE_TIER in wanted and is_base_case(c.case))
    ]
    if BASE_TIER in wanted and not any(is_base_case(c.case) for c in chosen):
        chosen += base_tier(config)
    unknown = [w for w in wanted if w != BASE_TIER and not any(w in (c.case, c.key) for c in config.cases)]
    if unknown:
        raise ConfigError(f"--cases: {unknown[0]!r} is not in CASES of {config.path}")
    return chosen


BASE_TIER = "base"  # run.py --cases base: the base-tier cases (benchmarks/base_common.py)


def base_tier(config: HostConfig) -> list[CaseSpec]:
    """The shipped base-tier cases (benchmarks/base_*/), for --cases base when CASES lists none. They
    read no data: their data directory is only checked to exist on the hosts (/tmp)."""
    frameworks = {spec.framework for spec in config.cases}
    framework = frameworks.pop() if len(frameworks) == 1 else "pytorch"
    found = sorted(
        p.name
        for p in (config.flagperf_path / "benchmarks").glob(f"{BASE_PREFIX}*")
        if (p / framework_dir(framework)).is_dir()
    )
    if len(config.hosts) < 2:  # the interconnect needs two hosts or more
        found = [case for case in found if case != "base_allreduce"]
    return [CaseSpec(case, framework, "/tmp") for case in found]


def model_cases(config: HostConfig, paths: list[str], selection: str | None) -> list[CaseSpec]:
    """run.py --model FILE: the files replace CASES, each run by the generic onnx_model case in the
    framework host.yaml's CASES use (when they agree; else pytorch). Relative paths are the shell's."""
    if selection:
        raise ConfigError("--model and --cases cannot be combined: --model replaces CASES")
    frameworks = {spec.framework for spec in config.cases}
    framework = frameworks.pop() if len(frameworks) == 1 else "pytorch"
    specs = []
    for path in paths:
        try:
            specs.append(
                model_case(Path(path).expanduser().absolute(), framework, Path.cwd(), config.executor.runs_here)
            )
        except ValueError as exc:
            raise ConfigError(f"--model {path}: {exc}") from None
    check_unique_cases(specs, "--model")
    return specs


def load_run_config(args: argparse.Namespace) -> HostConfig:
    """host.yaml and the command line, with everything checked that can be before any host is touched."""
    config = load_host_config(args.config, INFERENCE_DIR)
    if config.endpoint is not None:
        endpoint_argv(config, args)  # its options' shape; their values are checked when it runs, before any request
        return config
    config.cases = model_cases(config, args.model, args.cases) if args.model else select_cases(config, args.cases)
    if args.workload:  # ByteMLPerf workload files replace CASES (utils/bytemlperf_workload.py)
        if args.model or args.cases:
            raise ConfigError("--workload replaces CASES: it cannot be combined with --model or --cases")
        config.cases = workload_cases(config.cases, args.workload, config.flagperf_path, config.path)
        check_unique_cases(config.cases, "--workload")
    config.overrides = list(args.overrides)
    config.cases = without_keys(config.cases, config.overrides)  # --set wins over a workload's key
    if args.set_a is not None:  # run.py ab: variant A's cases, then B's, checked together below
        check_variants(args.set_a, args.set_b)
        config.cases = [
            *with_sets(without_keys(config.cases, args.set_a), args.set_a),
            *with_sets(without_keys(config.cases, args.set_b), args.set_b),
        ]
    repeat = parse_repeat(args.repeat)
    check_cases(config)
    if repeat is not None:  # --repeat wins over every case config's repetitions
        config.repetitions = {spec.key: repeat for spec in config.cases}
    executors.session_class(config).check_config(config)  # the world outside: MODE slurm's scheduler and nodes
    return config


def endpoint_argv(config: HostConfig, args: argparse.Namespace) -> list[str]:
    """host.yaml's ENDPOINT as run.py --endpoint's command line (tools/serving/cli.py); the case
    options of this command line have no cases to act on, so they are refused."""
    from tools.serving.options import config_argv

    given = [
        name
        for name, value in (
            ("run.py ab", args.set_a is not None),
            ("--cases", args.cases),
            ("--model", args.model),
            ("--workload", args.workload),
            ("--set", args.overrides),
            ("--repeat", args.repeat),
            ("--strict", args.strict),
        )
        if value
    ]
    if given:
        raise ConfigError(f"{given[0]}: {config.path} has ENDPOINT, a running server to benchmark, and no cases")
    return config_argv(config.endpoint, str(config.path), config.log_path, INFERENCE_DIR)


def check_cases(config: HostConfig) -> None:
    """Everything about the cases that can be checked before any host is touched: their
    folders and packages, each case config as the pipeline will merge it, its engine, and
    the vendor's monitor."""
    from tools.config import load_case_config, parse_overrides

    executor = config.executor
    logger.disable("tools.config")  # the container logs the merge; here only errors matter
    try:
        for index, spec in enumerate(config.cases):
            _check_case_files(config, spec)
            case_config = load_case_config(
                str(config.flagperf_path),
                spec.case,
                spec.framework,
                config.vendor,
                spec.data_dir,
                "-",
                parse_overrides([*config.overrides, *spec.overrides]),
                check_device=executor.runs_here,  # elsewhere the device is on the hosts, not here
            )
            if (
                spec.model is not None and not executor.in_container
            ):  # the model file is here: read it before anything is written
                from benchmarks.onnx_model.describe import describe

                describe(case_config)
            if "repetitions" in case_config.origin:  # else the plan's default: 1, or run.py ab's
                config.repetitions[spec.key] = case_config.repetitions
            if case_config.compiler is not None:
                _check_engine(config, case_config, case_config.compiler)
                spec = config.cases[index] = _with_engine_image(config, spec, case_config.compiler)
            if executor.in_container:
                _check_image(config, spec)
            if is_base_case(spec.case):  # its dtypes and sizes; its memory where it runs here
                from benchmarks.base_common import check_base_config

                check_base_config(
                    case_config, memory=executor.runs_here, hosts=len(config.hosts), hosts_origin=str(config.path)
                )
    finally:
        logger.enable("tools.config")
    folders = sorted({spec.image_folder for spec in config.cases})
    if executor.in_container and len(folders) > 1:  # utils/executors/docker.py::image_spec: one image a run
        raise ConfigError(
            f"{config.path}: key CASES: one run builds one image, and these cases need docker_images/{config.vendor}/ "
            f"{', '.join(folders)} (their frameworks', or their engines' own): run them separately"
        )
    _check_monitor(config)


def _check_case_files(config: HostConfig, spec: CaseSpec) -> None:
    """The case's code; natively, its packages (in a container, its image: ``_check_image``)."""
    perf_dir, in_container = config.flagperf_path, config.executor.in_container
    if not (perf_dir / "benchmarks" / spec.case / framework_dir(spec.framework)).is_dir():
        raise ConfigError(
            f"{config.path}: key CASES entry '{spec.key}': no benchmarks/{spec.case}/{framework_dir(spec.framework)}/"
        )
    if not in_container:  # an image installs them (utils/executors/images.py)
        check_case_requirements(perf_dir, spec.case, spec.framework)


def _with_engine_image(config: HostConfig, spec: CaseSpec, compiler: str) -> CaseSpec:
    """The case with the image folder its engine declares (``IMAGE``: inference_engine/registry.py), if any."""
    from inference_engine import registry

    image = registry.engine_facts(config.vendor, compiler, config.flagperf_path / "inference_engine").image
    return spec if image is None else replace(spec, image=image)


def _check_image(config: HostConfig, spec: CaseSpec) -> None:
    """The Dockerfile of the case's image: its framework's (FlagPerf's layout) or its engine's own."""
    folder = f"docker_images/{config.vendor}/{spec.image_folder}/"
    if not (config.flagperf_path / folder / "Dockerfile").is_file():
        whose = f" (the image its engine declares, IMAGE = {spec.image!r})" if spec.image else ""
        raise ConfigError(f"{config.path}: key CASES entry '{spec.key}': no {folder}Dockerfile{whose}")


def _check_engine(config: HostConfig, case_config: CaseConfig, compiler: str) -> None:
    """The case's engine, asked of the registry (inference_engine/registry.py). Where the pipeline
    runs here (MODE local) the engine runs in this very Python, so its own preflight runs now;
    elsewhere it runs on the hosts, and the registry answers from the file layout without importing it."""
    from inference_engine import registry

    perf_dir, vendor, executor = config.flagperf_path, config.vendor, config.executor
    if not executor.in_container:
        check_backend_requirements(
            perf_dir, vendor, compiler, config.backend_requirements
        )  # a ByteMLPerf backend folder's (check, warn or skip)
    if executor.runs_here:
        from tools.plugins import preflight_engine

        preflight_engine(vendor, compiler, case_config)
        return
    if registry.check_engine(vendor, compiler, perf_dir / "inference_engine").is_dir():
        from tools.compat.bytemlperf.engine import host_check

        host_check(case_config, perf_dir / "inference_engine")  # its profile and answers; the hosts have its packages


def _check_monitor(config: HostConfig) -> None:
    """The vendor monitor's protocol declaration (common/monitor_protocol.py), once per run."""
    source = f"docker_images/{config.vendor}/{config.vendor}_monitor.py"
    monitor = config.flagperf_path / source
    if monitor.is_file():
        monitor_protocol(monitor, source)


def host_worker(session: HostSession, plan: list[Planned]) -> list[CaseOutcome]:
    """Every planned case run on one host, in the plan's order (utils/run_plan.py): one outcome each."""

    def case_dir(item: Planned) -> Path:
        return case_result_dir(item.run_dir, item.spec, session.label, session.noderank, item.repetition)

    try:
        session.prepare()
    except Exception as exc:  # one host's failure is reported and must not stop the others
        message = one_line(exc) if isinstance(exc, InferPerfError) else f"host {session.label}: {one_line(exc)}"
        logger.error(message)
        status = "interrupted" if session.abort.is_set() else "failed"  # Ctrl-C cut the preparation short
        return [
            CaseOutcome(i.spec, session.label, session.noderank, case_dir(i)).fail(
                session.preflight_step or "preflight", message, status
            )
            for i in plan
        ]
    outcomes = []
    for item in plan:
        spec = item.spec
        if session.abort.is_set():
            outcomes.append(
                CaseOutcome(spec, session.label, session.noderank, case_dir(item)).fail(
                    "interrupted", "run interrupted before this case started", "interrupted"
                )
            )
            continue
        name = (
            spec.key
            + (f" {item.variant}" if item.variant else "")
            + (f" repetition {item.repetition}" if item.repetition > 1 else "")
        )
        logger.debug(f"host {session.label}: running {name}")  # run.log; the console shows progress
        try:
            outcome = session.run_case(spec, case_dir(item))
        except Exception as exc:
            outcome = CaseOutcome(spec, session.label, session.noderank, case_dir(item)).fail(
                "container", one_line(exc)
            )
        level = "INFO" if outcome.status == "success" else "ERROR"
        logger.log(
            level,
            f"host {session.label}: {name} {outcome.status}"
            + (f" at step {outcome.step}: {outcome.error}" if outcome.error else ""),
        )
        outcomes.append(outcome)
    return outcomes


def _console_sink(message) -> None:
    """The console's log lines, on the sys.stderr of the moment: a live progress display
    (utils/run_progress.py) redirects it and prints them above itself."""
    sys.stderr.write(message)
    sys.stderr.flush()


CONSOLE_FORMAT = "{time:HH:mm:ss} | {level: <7} | {message}"


def _console_echo() -> Callable[[str], None]:
    """--verbose: every pipeline's log lines on the console, behind one lock so lines never interleave."""
    lock = threading.Lock()

    def echo(line: str) -> None:
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    return echo


def _raise_keyboard_interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _ignore_while_stopping(signum, _frame) -> None:
    # A second Ctrl-C must not cut the cleanup short: containers, monitors and the summary come first.
    # Its notice goes out from a thread of its own: the signal may land while this thread is inside the
    # logger, which is not re-entrant (loguru refused the line and printed its own traceback: a CI run
    # whose second Ctrl-C came as the first one's "interrupted" line was being written).
    notice = f"{signal.Signals(signum).name} again: already stopping, cleanup and summary follow"
    threading.Thread(target=logger.warning, args=(notice,), name="stop-notice").start()


@dataclass(frozen=True)
class Run:
    """One run.py run: its id, its folder (FLAGPERF_LOG_PATH/run<id>/) and when it started."""

    run_id: str
    run_dir: Path
    started_at: datetime


def main(argv: list[str] | None = None) -> int:
    """config -> run folder -> every case on every host -> summary, report and exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["compare"], ["history"], ["calibrate"]):
        return _subcommand(argv[0], argv[1:])
    if any(
        a == "--endpoint" or a.startswith("--endpoint=") for a in argv
    ):  # a running OpenAI-compatible server: tools/serving/cli.py
        from tools.serving.cli import main as serving_main

        return serving_main(
            argv, INFERENCE_DIR / "result", on_written=lambda folder: _serving_written(folder, _history_beside)
        )
    ab = argv[:1] == ["ab"]  # run.py ab --set-a ... --set-b ...: two variants, interleaved, then compared
    args = parse_args(argv[1:] if ab else argv, ab)
    if args.list:
        print(list_available(INFERENCE_DIR))
        return 0
    logger.remove()
    logger.add(_console_sink, level="INFO", format=CONSOLE_FORMAT)
    # Before the run exists: remember the stop signal (to tell it from the error it may cause) and stop,
    # not inside an import (common/stop_signals.py); end() closes the start-up, a later stop raises at once.
    startup = ImportSafeStop(lambda signum: _raise_keyboard_interrupt(signum, None))
    received = startup.received
    previous = {sig: signal.signal(sig, startup.handle) for sig in STOP_SIGNALS}
    try:
        config = load_run_config(args)
        startup.end()
        if received:  # a stop deferred past an import that ended just before the start-up checks did
            raise KeyboardInterrupt(signal.Signals(received[0]).name)
    except BaseException as exc:  # noqa: BLE001 - a stop signal, or bad input: one line, nothing written
        startup.end()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received or isinstance(exc, KeyboardInterrupt):
            # A signal that cut an import short can surface as an ImportError: it is still the signal's doing.
            release_after_signal()  # the start-up checks log on this thread: a stop may have landed in loguru
            signum = received[0] if received else signal.SIGINT
            word = "interrupted" if signum == signal.SIGINT else "stopped"
            logger.error(
                f"{word} by {signal.Signals(signum).name} during the start-up checks: nothing was run or written"
            )
            return 128 + signum
        if isinstance(exc, InferPerfError):
            logger.error(one_line(exc))
            return exc.exit_code if isinstance(exc, ConfigError) else 2
        raise
    if config.endpoint is not None:  # host.yaml's ENDPOINT: as run.py --endpoint (tools/serving/cli.py)
        from tools.serving.cli import main as serving_main

        for sig, handler in previous.items():
            signal.signal(sig, handler)
        return serving_main(
            endpoint_argv(config, args),
            config.log_path,
            origin=str(config.path),
            on_written=lambda folder: _serving_written(
                folder, lambda run_dir: _record_history(config.history, run_dir, run_dir / "summary.md")
            ),
        )
    # From the run folder's opening until run_hosts waits on the hosts, a stop is held (_HELD) and raised
    # there, where it ends every case and the summary is written: in between nothing could catch it.
    _HELD.clear()
    for sig in STOP_SIGNALS:
        signal.signal(sig, _hold_stop)
    try:
        run = open_run(config)
    except InferPerfError as exc:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        logger.error(one_line(exc))
        return exc.exit_code
    if ab:
        return run_ab(config, run, args, previous)
    plan = build_plan([Variant("", run.run_dir, config.cases)], config.repetitions)
    outcomes, interrupted = run_hosts(config, run, args.verbose, plan)
    code = finish_run(config, run, outcomes, interrupted, args.strict, previous)
    return code


def run_ab(config: HostConfig, run: Run, args: argparse.Namespace, previous: dict) -> int:
    """run.py ab: variants A and B as two run folders inside this run's, interleaved, then compared."""
    from utils.results.compare import CompareError, compare_runs, write_comparison

    half = len(config.cases) // 2
    variants = [
        Variant(name, run.run_dir / name, cases)
        for name, cases in (("A", config.cases[:half]), ("B", config.cases[half:]))
    ]
    for variant in variants:
        variant.run_dir.mkdir()
    plan = build_plan(variants, config.repetitions, AB_REPETITIONS)
    outcomes, interrupted = run_hosts(config, run, args.verbose, plan)
    for variant in variants:
        mine = [o for o in outcomes if variant.run_dir in o.local_dir.parents]
        finish_run(
            config,
            Run(f"{run.run_id}-{variant.name}", variant.run_dir, run.started_at),
            mine,
            interrupted,
            False,
            previous,
        )
    if interrupted:
        return 130
    dir_a, dir_b = (v.run_dir for v in variants)
    try:
        result = compare_runs(dir_a, dir_b, args.threshold, args.between_run_cv, args.allow_invalid, paired=True)
    except CompareError as exc:
        logger.error(one_line(exc))
        return 1
    write_comparison(result, dir_a, dir_b, args.threshold, args.between_run_cv)
    return result.exit_code


def _subcommand(name: str, argv: list[str]) -> int:
    """``run.py compare`` (utils/results/compare.py), ``history`` and ``calibrate`` (utils/history/cli.py).
    A stop unwinds them (a store's transaction rolls back, files are written atomically): one line, its status."""
    stops: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stops.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        if name == "compare":
            from utils.results.compare import main as compare_main

            return compare_main(argv, INFERENCE_DIR / "result")
        from utils.history import cli

        return cli.main(argv, INFERENCE_DIR) if name == "history" else cli.calibrate(argv, INFERENCE_DIR)
    except KeyboardInterrupt:
        signum = stops[0] if stops else signal.SIGINT
        sys.stderr.write(f"run.py {name}: stopped by {signal.Signals(signum).name}\n")
        return 128 + signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_HELD: list[int] = []  # stop signals received between the run folder's opening and run_hosts


def _hold_stop(signum: int, _frame: object) -> None:
    """A stop while the run is being opened: remembered, raised once run_hosts can handle it. (Blocking the
    signals would not do: a signal blocked in the main thread is delivered to another thread, and Python
    runs its handler in the main thread all the same.)"""
    _HELD.append(signum)


def _run_log_ended(path: Path) -> Callable[[OSError], None]:
    """run.log's failure: a write the file system refuses (full, read-only) ends run.log with one
    line on the console, instead of loguru's traceback under every later log line."""

    def ended(exc: OSError) -> None:
        sys.stderr.write(f"run.log ends here: {storage_error(exc, path) or one_line(exc)}\n")

    return ended


def open_run(config: HostConfig) -> Run:
    """The run's id and folder, and its logs: the console at LOG_LEVEL, run.log with everything."""
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    run = Run(run_id, config.log_path / f"run{run_id}", datetime.now(timezone.utc))
    try:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        run_log = LogFileSink(run.run_dir / "run.log", _run_log_ended(run.run_dir / "run.log"))
    except OSError as exc:  # the disk filled (or turned read-only) since host.yaml's check
        raise (storage_error(exc, run.run_dir, "creating") or exc) from None
    logger.remove()
    logger.add(_console_sink, level=config.log_level, format=CONSOLE_FORMAT)
    logger.add(run_log, level="DEBUG", format="{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {message}")
    logger.info(
        f"run {run_id}: {len(config.cases)} case(s) x {len(config.hosts)} host(s), mode {config.mode}, vendor "
        f"{config.vendor}"
    )
    return run


def _progress_display(verbose: bool, total: int) -> ProgressConsole | None:
    """On a terminal without --verbose, a live display of every case x host; otherwise (CI,
    pipes) nothing per line: one line per case and host."""
    if verbose or not sys.stdout.isatty():
        return None
    try:
        from utils.run_progress import ProgressConsole

        return ProgressConsole(total).start()
    except ImportError as exc:  # rich missing (a venv older than pyproject.toml): the plain console
        logger.debug(f"no progress display: {one_line(exc)}")
        return None


def run_hosts(config: HostConfig, run: Run, verbose: bool, plan: list[Planned]) -> tuple[list[CaseOutcome], bool]:
    """Every case on every host, one thread per host; Ctrl-C (or SIGTERM, SIGHUP) stops every
    host's case, and every session is cleaned up whatever happens. Returns the outcomes and
    whether the run was interrupted."""
    abort = threading.Event()
    sessions: list[HostSession] = []
    futures: list[Future] = []
    display: ProgressConsole | None = None
    pool: ThreadPoolExecutor | None = None
    interrupted = False
    try:
        # A stop held since the run folder was opened (main) is raised here, where it is handled.
        for sig in STOP_SIGNALS:
            signal.signal(sig, _raise_keyboard_interrupt)
        if _HELD:
            raise KeyboardInterrupt(signal.Signals(_HELD[0]).name)
        for i in range(len(config.hosts)):
            sessions.append(executors.create(config, i, run.run_id, abort, run.run_dir))
        display = _progress_display(verbose, len(plan) * len(sessions))
        if config.executor.in_container:
            logger.info("preparing the hosts: code sync and image check (an image build takes minutes the first time)")
        echo = _console_echo() if verbose else display.echo if display else None
        for session in sessions:
            session.echo = echo
        pool = ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="host")
        futures.extend(pool.submit(host_worker, session, plan) for session in sessions)
        pending = set(futures)
        while pending:
            # A bounded wait keeps the main thread responsive to Ctrl-C.
            _, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        for sig in STOP_SIGNALS:  # every case ended: a late Ctrl-C must not cut the cleanup and summary short
            signal.signal(sig, _ignore_while_stopping)
    except KeyboardInterrupt:
        for sig in STOP_SIGNALS:
            signal.signal(sig, _ignore_while_stopping)
        interrupted = True
        abort.set()
        release_after_signal()  # this thread's mark only: the host workers go on logging
        logger.error("interrupted: stopping containers and monitors on every host")
        for session in sessions:
            session.interrupt()
        wait(futures, timeout=INTERRUPT_GRACE_S)
    finally:
        if display is not None:
            display.stop()
        for session in sessions:
            try:
                session.cleanup()
            except Exception as exc:
                logger.warning(f"host {session.label}: cleanup failed: {one_line(exc)}")
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    return collect_outcomes(plan, sessions, futures), interrupted


def collect_outcomes(plan: list[Planned], sessions: list[HostSession], futures: list[Future]) -> list[CaseOutcome]:
    """Each host's outcomes; a host whose work did not end in time (or broke) still gets a line per case."""
    outcomes: list[CaseOutcome] = []
    for session, future in zip(sessions, futures):
        if future.done() and future.exception() is None:
            outcomes.extend(future.result())
            continue
        broken = future.exception() if future.done() else None
        why = f"host worker failed: {one_line(broken)}" if broken else "run interrupted; the host did not stop in time"
        for item in plan:
            local = case_result_dir(item.run_dir, item.spec, session.label, session.noderank, item.repetition)
            outcomes.append(
                CaseOutcome(item.spec, session.label, session.noderank, local).fail(
                    "host" if broken else "interrupted", why, "failed" if broken else "interrupted"
                )
            )
    return outcomes


def finish_run(
    config: HostConfig, run: Run, outcomes: list[CaseOutcome], interrupted: bool, strict: bool, previous_handlers: dict
) -> int:
    """summary.json/md and report.html, one line per failure, the exit status."""
    from utils.results.baselines import store_outcomes
    from utils.results.summary import summary_records, write_summary

    store_outcomes(outcomes, config.vendor, run.run_id)  # measured peaks first: every record's MFU may use them
    records = summary_records(outcomes, config.flagperf_path, config.vendor)  # a case run N times: one record
    try:
        json_path, md_path = write_summary(run.run_dir, run.run_id, config, records, run.started_at)
    except InferPerfError as exc:  # the disk filled (or turned read-only) under the summary: one line, its exit status
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        _remove_partial_summary(run.run_dir)
        logger.error(f"{one_line(exc)}: summary not written; each case's own files are in {run.run_dir}")
        return exc.exit_code
    print(md_path.read_text(encoding="utf-8"))
    logger.debug(f"summary: {json_path} and {md_path}")  # beside report.html, whose path ends the output
    report_path = _write_report(run.run_dir, config.flagperf_path)
    failed = [r for r in records if not r.succeeded]
    for r in failed:
        logger.error(f"FAILED {r.name} on host {r.host} at step {r.failed_step}: {r.error}")
    invalid = [r for r in records if r.invalid]
    if invalid:
        logger.warning(
            f"{len(invalid)} result(s) INVALID: see the reasons under the table"
            + ("" if strict else " (--strict makes this exit 3)")
        )
    unjudged = [r for r in records if r.verdict is not None and r.verdict.not_judged]
    if unjudged and strict:  # --strict: a check that could not run is no pass
        logger.warning(f"{len(unjudged)} result(s) with checks not judged (--strict): see the list under the table")
        invalid += [r for r in unjudged if r not in invalid]
    _record_history(config.history, run.run_dir, md_path)
    for sig, handler in previous_handlers.items():
        signal.signal(sig, handler)
    code = 130 if interrupted else 1 if failed or not records else 3 if strict and invalid else 0
    print(f"report: {report_path}" if report_path else "report: not written (see the error above)", flush=True)
    return code


def _serving_written(run_dir: Path, history: Callable[[Path], None]) -> None:
    """A serving run's folder is complete: its report.html (drawn from summary.json's rows), then the history."""
    _write_report(run_dir, INFERENCE_DIR)
    history(run_dir)


def _history_beside(run_dir: Path) -> None:
    """run.py --endpoint, without host.yaml: the run into the history beside it (its log path's history.sqlite)."""
    from utils.history.store import resolve_url

    _record_history(resolve_url(None, run_dir.parent), run_dir, run_dir / "summary.md")


def _record_history(url: str | None, run_dir: Path, md_path: Path) -> None:
    """The run's figures into the results history (utils/history/), after its own files are written: a
    failure of the store is one line, here and at the end of summary.md, and never fails the run."""
    from utils.history.ingest import record_runs

    line = record_runs([run_dir], url)
    (logger.warning if line.startswith("history not updated") else logger.info)(line)
    try:
        with atomic_path(md_path) as tmp:
            tmp.write_text(md_path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    except OSError as exc:
        logger.warning(f"summary.md does not say it: {one_line(exc)}")


def _remove_partial_summary(run_dir: Path) -> None:
    """summary.json and summary.md come together or not at all (each is written atomically)."""
    for name in ("summary.json", "summary.md"):
        try:
            (run_dir / name).unlink(missing_ok=True)
        except OSError as exc:
            logger.warning(f"could not remove {run_dir / name}: {exc.strerror or exc}")


def _write_report(run_dir: Path, perf_dir: Path) -> Path | None:
    """report.html beside summary.json; a failure to draw it never fails the run."""
    try:
        from utils.results.report import write_report

        return write_report(run_dir, perf_dir)
    except Exception as exc:
        logger.error(f"report.html not written: {one_line(exc)}")
        return None


if __name__ == "__main__":
    sys.exit(main())
