"""Container-side entry (spec §2.2.3): run one case's seven steps and write result.json.

    python3 run_inference.py --perf_dir P --data_dir D --log_dir L \
        --vendor cpu --case resnet50 --framework pytorch

Exit status: 0 success, 2 config error, 3 data error, 4 engine error,
6 storage error (disk full, read-only or not a directory), 1 unexpected error,
130 interrupted (SIGINT), 143 terminated (SIGTERM), 129 hung up (SIGHUP). On failure
<log_dir>/failure.json names the step and the error, and no result.json exists;
the error is also one line on the console, never a traceback.
"""

from __future__ import annotations

import _signal  # the C module (``signal`` imports enum): stop signals are ours from the first line

# The exit status of a run stopped by a signal, as a shell reports it (128 + number).
SIGNAL_EXIT = {_signal.SIGINT: 130, _signal.SIGTERM: 143, _signal.SIGHUP: 129}
SIGNAL_WORD = {_signal.SIGINT: "interrupted", _signal.SIGTERM: "terminated", _signal.SIGHUP: "hung up"}
SIGNAL_NAME = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM", _signal.SIGHUP: "SIGHUP"}
_received: list[int] = []
_guard: list[ImportSafeStop] = []  # the handler core installed now (common/stop_signals.py)


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGTERM too). A KeyboardInterrupt, so that no ``except
    Exception`` in a case, an engine or a library swallows it, and code that
    cleans up after Ctrl-C (DataLoader workers) does so for SIGTERM too."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"{SIGNAL_WORD[signum]} by {SIGNAL_NAME[signum]}")


def _stop(signum: int) -> None:
    """Raised where the run is, or, while a guarded event loop runs (a serving stage), once it has
    returned (common/stop_signals.py; installed by ``_install_signal_handlers``, after its import)."""
    raise_stop(Interrupted(signum))


def _early(signum: int, _frame) -> None:
    """Until common/stop_signals.py is imported (a few ms): record and raise."""
    _received.append(signum)
    raise Interrupted(signum)


def _install_signal_handlers() -> None:
    """Each stop signal raises Interrupted, once no import is under way (one inside an extension
    module's initialisation aborted the process: common/stop_signals.py)."""
    if not _guard or not _guard[0].deferring:
        _guard[:] = [ImportSafeStop(_stop, _received)]
    for signum in SIGNAL_EXIT:
        _signal.signal(signum, _guard[0].handle)


def _ignore_signals() -> None:
    """While the outcome is being reported (and after), a further signal changes nothing."""
    for signum in SIGNAL_EXIT:
        _signal.signal(signum, _signal.SIG_IGN)
    if _guard:
        _guard[0].end()  # no deferred look pending


import sys  # noqa: E402 - built in: no import window

if __name__ == "__main__":
    for _signum in SIGNAL_EXIT:
        _signal.signal(_signum, _early)
try:
    from common.stop_signals import ImportSafeStop, raise_stop

    if __name__ == "__main__":
        _install_signal_handlers()
    import argparse
    import os
    import traceback
    from pathlib import Path

    from common.process_exit import leave
except KeyboardInterrupt as _stopped:  # before the arguments are known: the console is all there is
    print(_stopped, file=sys.stderr)
    sys.exit(SIGNAL_EXIT[_received[0]] if _received else 130)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from common.yamlio import add_override_option

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--perf_dir", required=True, help="the inference/ directory")
    parser.add_argument("--data_dir", required=True, help="data set directory for the case")
    parser.add_argument("--log_dir", required=True, help="where result.json and container.out.log go")
    parser.add_argument("--vendor", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--framework", required=True, help="e.g. pytorch or pytorch_2.1")
    parser.add_argument("--log_level", default="INFO", choices=["TRACE", "DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log_call_information", action="store_true", help="show caller in log lines")
    add_override_option(
        parser,
        "--set",
        "override a case config key for this run (YAML value), e.g. --set batch_sizes=[1,8,32]",
        dest="overrides",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    _install_signal_handlers()
    state: dict = {"args": None, "pipeline": None, "logger": None}
    try:
        state["args"] = parse_args(argv)
        code = _run(state["args"], state)
    except BaseException as exc:  # noqa: BLE001 - every outcome becomes one line and an exit status
        code = _report(state, exc)
    finally:
        _ignore_signals()
    return code


def _run(args: argparse.Namespace, state: dict) -> int:
    # What reporting a failure needs is imported first, and is light: an import cut
    # short by a signal leaves its module half-made, and a report must not need it.
    from common.errors import StorageError
    from common.files import writable_dir
    from tools.results import result

    try:
        writable_dir(args.log_dir, "--log_dir")
    except StorageError as exc:
        # Nothing can be written there, failure.json included: the console is all there is.
        state["args"] = None
        print(str(exc), file=sys.stderr)
        return 2

    # PyTorch's OpenMP threads otherwise busy-wait after every torch op (data
    # transforms, evaluation, validation) and steal cores from the engine being
    # measured: ~7% of ONNX Runtime's QPS on 2 cores (bench/harness_overhead.py).
    # Must be set before torch is imported; an explicit setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    log_dir = Path(args.log_dir)
    result.clear_previous(log_dir)
    # Heavy imports (torch via the pipeline) only after the arguments are known good.
    from loguru import logger

    from tools.logger import init_logger

    init_logger(log_dir, args.log_level, args.log_call_information)
    state["logger"] = logger
    # Nothing outlives run.py or the case's time for long: on either, SIGTERM to this
    # process group (DataLoader workers too), reported like any SIGTERM (common/lifetime.py).
    from common import lifetime

    lifetime.watch(lambda reason: logger.error(f"stopping: {reason}"))
    from tools.pipeline import Pipeline, PipelineArgs

    state["pipeline"] = Pipeline(
        PipelineArgs(args.perf_dir, args.data_dir, args.log_dir, args.vendor, args.case, args.framework, args.overrides)
    )
    state["pipeline"].run()
    return 0


def _classify(exc: BaseException, log_dir: Path | None) -> tuple[int, str]:
    """(exit status, one line) for what ended the run."""
    if _received:
        # A failure after a stop signal is the signal's doing (an import it cut short
        # reads as "module missing"; a write it cut short as a broken file): say so.
        signum = _received[0]
        return SIGNAL_EXIT[signum], f"{SIGNAL_WORD[signum]} by {SIGNAL_NAME[signum]}"
    if isinstance(exc, KeyboardInterrupt):
        return SIGNAL_EXIT[_signal.SIGINT], "interrupted"
    from common.errors import InferPerfError, one_line
    from common.files import storage_error

    if isinstance(exc, InferPerfError):
        return exc.exit_code, one_line(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        problem = storage_error(exc, exc.filename or log_dir or ".")
        if problem is not None:
            return problem.exit_code, str(problem)
    if log_dir is None:
        return 1, one_line(exc)
    trace_path = log_dir / "traceback.txt"
    try:
        trace_path.write_text(traceback.format_exc(), encoding="utf-8")
        where = f"traceback in {trace_path}"
    except OSError as write_error:
        where = f"no traceback kept: {write_error.strerror or type(write_error).__name__} writing {trace_path}"
    return 1, f"{one_line(exc)} ({where})"


def _report(state: dict, exc: BaseException) -> int:
    _ignore_signals()
    if isinstance(exc, SystemExit) and not _received:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)  # argparse: --help, bad usage
    args = state["args"]
    log_dir = Path(args.log_dir) if args is not None else None
    code, message = _classify(exc, log_dir)
    pipeline = state["pipeline"]
    step = pipeline.current_step if pipeline is not None else None
    line = f"step '{step}' failed: {message}" if step else message
    if state["logger"] is not None:
        from common.log_lock import release_after_signal  # loguru imported already: state["logger"] came with it

        release_after_signal()
        state["logger"].error(line)
    else:
        print(line, file=sys.stderr)
    if log_dir is None:
        return code
    try:
        from tools.results import result

        result.clear_previous(log_dir)  # a failed run leaves no result.json, nor its latencies
        result.write_failure(log_dir, step=step, error=message, exit_code=code, case=args.case, vendor=args.vendor)
    except BaseException as failure_error:  # noqa: BLE001 - the one line above is already out
        reason = (
            str(failure_error)
            if getattr(failure_error, "exit_code", None)
            else f"{type(failure_error).__name__}: {failure_error}"
        )
        print(f"failure.json not written in {log_dir}: {reason}", file=sys.stderr)
    return code


if __name__ == "__main__":
    leave(main())
