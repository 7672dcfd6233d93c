"""``run.py --endpoint http://HOST:PORT/v1 --served-model NAME [options]``: benchmark a server the
user already runs, with the load modes, workloads, SLO and capacity search of ``tools/serving``.

Writes ``<results>/run<id>/`` at once when it is done (nothing half-written): ``serving/result.json``
(every step's figures, the server's own /metrics figures, the capacity search, the Pareto points, each
request's record), ``serving/requests.jsonl`` and ``serving/steps.csv`` (``tools/serving/exports.py``)
and ``summary.json`` (a ``common.record.ServingStep`` per step; run.py then writes the run's summary.md
from them with its one summary writer, ``utils/results/summary.py::write_serving_summary``, and draws
its report.html, ``utils/results/report/serving.py``; run.py's ``--repeat`` and ``ab`` run this
command once per repetition, ``entry/endpoint.py``). Exit status: 0 done (failed requests are counted
in the rows, not fatal); 2 bad option (an SLO bound below 0, a concurrency of 0, a model the server
does not serve, a URL or --output-dir that cannot work, a 401/403 "authentication"); 3
a prompt file or trace that is not valid JSON/JSONL, or with --strict a step INVALID or not judged
(written first); 4 the server does not speak the OpenAI API, or a --launch server exited during a
step (written first, the step's verdict names it); 5 the endpoint is unreachable; 130 interrupted
(SIGINT), 143 terminated (SIGTERM).

The same options come from host.yaml's ``ENDPOINT`` mapping (``run.py --config host.yaml``): each
entry is an option's name with underscores (``served_model``, ``request_rate``), ``url`` for
``--endpoint``; a list is a comma list (``concurrency: [1, 2, 4]``; ``launch``: the command's
words), a mapping is JSON (``slo``, ``extra_body``). ``config_argv`` turns the mapping into this
command line, so each option is parsed and checked here once; an error then names host.yaml and
``ENDPOINT.<entry>`` instead of the flag.

The options and their checks are ``tools/serving/options.py``'s, the measuring loop and the run
folder ``tools/serving/session.py``'s, the console's lines ``tools/serving/tables.py``'s; this module is the
command: its exit statuses and signals.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Callable

from common.errors import ConfigError, EngineError, InferPerfError, one_line
from common.stop_signals import ImportSafeStop, raise_stop
from tools.serving import workload
from tools.serving.options import (
    Plan,
    check_output_dir,
    check_port_free,
    check_url,
    in_config_terms,
    load_tokenizer,
    parse_args,
)
from tools.serving.session import measure


def run(
    argv: list[str],
    results_root: Path,
    one_line_errors: bool = False,
    on_written: Callable[[Path], None] | None = None,
    folder: str | None = None,
) -> int:
    args = parse_args(argv, one_line_errors)
    check_url(args.endpoint)
    plan = Plan(args)
    root = Path(args.output_dir) if args.output_dir else results_root
    check_output_dir(root, "--output-dir" if args.output_dir else "the results folder")
    tokenizer = load_tokenizer(args.tokenizer)
    plan.text = workload.Text(tokenizer)
    if args.launch is None:
        return measure(args, plan, tokenizer, results_root, on_written, folder=folder)
    if args.launch_timeout_s <= 0:
        raise ConfigError(f"--launch-timeout-s: {args.launch_timeout_s} must be positive")
    from common.launch import LaunchedServer

    log = Path(args.launch_log) if args.launch_log else root / f"launch-{time.strftime('%Y%m%d-%H%M%S')}.log"
    check_output_dir(log.parent, "--launch-log")
    check_port_free(args.endpoint)
    with LaunchedServer(args.launch, args.endpoint, log, args.launch_timeout_s) as server:
        if server.exited() is not None:  # it answered, then ended: something else may be serving that port
            raise EngineError(f"--launch: the server exited with status {server.exited()} as it became ready")
        print(f"server ready at {args.endpoint} after {server.ready_s:.1f} s (its log: {log})", flush=True)
        return measure(args, plan, tokenizer, results_root, on_written, server, folder)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised so that the run unwinds as an interrupt does. A KeyboardInterrupt: a stop raised
    inside a ``__del__`` or a weakref's callback is then raised again (``common/stop_signals.py``), and no
    ``except Exception`` on the way takes it."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, as SIGTERM is: not through asyncio.run's own SIGINT handling, which cancels the main task
    and waits for it to unwind, without a bound (``session.run_async`` bounds it)."""


STOPS: dict[int, type[KeyboardInterrupt]] = {signal.SIGTERM: Terminated, signal.SIGINT: Interrupted}


def _stop(signum: int) -> None:
    """Raised where the run is, or, inside the block that makes, runs and closes the event loop, once that
    block is left (``raise_stop``)."""
    raise_stop(STOPS[signum]())


def _drop_frames(stop: BaseException) -> None:
    """The frames a stop unwound, cleared now. A coroutine made but not yet started where it landed
    goes with them, without Python's "coroutine ... was never awaited" warning: the run is stopped, and
    nothing it says concerns the user."""
    import gc
    import traceback
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"coroutine .* was never awaited", RuntimeWarning)
        traceback.clear_frames(stop.__traceback__)
        gc.collect()


def main(
    argv: list[str] | None = None,
    results_root: Path | None = None,
    origin: str | None = None,
    on_written: Callable[[Path], None] | None = None,
    folder: str | None = None,
) -> int:
    """``origin``: the options came from this host.yaml's ENDPOINT (``config_argv``), and errors say so;
    ``on_written``: called with the run folder once it is written; ``folder``: its name (default
    ``run<id>``; run.py's repetitions are ``rep<k>``)."""
    import threading

    argv = sys.argv[1:] if argv is None else argv
    root = Path(results_root) if results_root is not None else Path(__file__).resolve().parents[2] / "result"
    guard = ImportSafeStop(_stop) if threading.current_thread() is threading.main_thread() else None
    previous = {sig: signal.signal(sig, guard.handle) for sig in (signal.SIGTERM, signal.SIGINT)} if guard else {}
    try:
        return run(argv, root, one_line_errors=origin is not None, on_written=on_written, folder=folder)
    except InferPerfError as exc:
        message = one_line(exc)
        print(f"error: {message if origin is None else in_config_terms(message, origin)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as stop:  # Terminated, Interrupted, or a Ctrl-C before main's handler
        _drop_frames(stop)
        terminated = isinstance(stop, Terminated)
        print(f"{'terminated' if terminated else 'interrupted'}: nothing written", file=sys.stderr)
        return 143 if terminated else 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if guard is not None:
            guard.end()


if __name__ == "__main__":
    raise SystemExit(main())
