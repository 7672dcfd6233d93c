"""Host-side entry (spec §2.2.2): run every case of configs/host.yaml on every host, then merge.

    sudo python3 run.py [--config configs/host.yaml] [--cases resnet50,digits:pytorch]

Exit status: 0 when every case succeeded on every host, 1 when any failed
(each failure is named with its case, host and step), 2 for a bad config,
3 with --strict when every case ran but a result's verdict is invalid,
6 when the summary cannot be written (disk full, read-only), 130 when interrupted. Results:
<FLAGPERF_LOG_PATH>/run<id>/summary.{json,md} and report.html
(utils/results/report/). ``run.py compare RUN_A RUN_B [--threshold 5]`` compares two runs (utils/results/compare.py).

The rooms: the command line, the cases, the hosts' threads, the summary and the subcommands in
utils/cli/; the start-up checks and the dispatch to a running server in entry/. Here: the order of
it all, and which stop handler holds at each moment.
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
    # A launcher may start run.py with these signals blocked, so that a stop sent during the
    # interpreter's own start-up waits for this handler instead of meeting Python's default.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

import argparse

from loguru import logger

from common.errors import ConfigError, InferPerfError, one_line
from common.log_lock import release_after_signal
from common.process_exit import leave
from common.stop_signals import ImportSafeStop
from entry.checks import list_available
from entry.endpoint import run_endpoint, run_host_endpoint, wants_endpoint
from entry.run_config import load_run_config
from utils.cli import INFERENCE_DIR
from utils.cli.ab import run_ab
from utils.cli.args import parse_args
from utils.cli.hosts import CONSOLE_FORMAT, console_sink, open_run, run_hosts
from utils.cli.stops import HELD, STOP_SIGNALS, hold_stop, raise_keyboard_interrupt, restore
from utils.cli.subcommands import subcommand
from utils.cli.summary import finish_run
from utils.host_config import HostConfig
from utils.run_plan import Variant, build_plan


def main(argv: list[str] | None = None) -> int:
    """config -> run folder -> every case on every host -> summary, report and exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["compare"], ["history"], ["calibrate"]):
        return subcommand(argv[0], argv[1:])
    if wants_endpoint(argv):  # a running OpenAI-compatible server: tools/serving/cli.py
        console_logging()
        return run_endpoint(argv)
    ab = argv[:1] == ["ab"]  # run.py ab --set-a ... --set-b ...: two variants, interleaved, then compared
    args = parse_args(argv[1:] if ab else argv, ab)
    if args.list:
        print(list_available(INFERENCE_DIR))
        return 0
    console_logging()
    previous: dict = {}
    config = start_up(args, previous)
    if isinstance(config, int):
        return config
    if config.endpoint is not None:  # host.yaml's ENDPOINT: as run.py --endpoint (tools/serving/cli.py)
        return run_host_endpoint(config, args, previous)
    return run_cases(config, args, ab, previous)


def console_logging() -> None:
    """The run's console lines (utils/cli/hosts.py's format), in place of loguru's default."""
    logger.remove()
    logger.add(console_sink, level="INFO", format=CONSOLE_FORMAT)


def start_up(args: argparse.Namespace, previous: dict) -> HostConfig | int:
    """The start-up checks (entry/run_config.py), or the exit status of a stop or of bad input. ``previous``
    gets the stop handlers this replaced, for whoever ends the run to put back."""
    # Before the run exists: remember the stop signal (to tell it from the error it may cause) and stop,
    # not inside an import (common/stop_signals.py); end() closes the start-up, a later stop raises at once.
    startup = ImportSafeStop(lambda signum: raise_keyboard_interrupt(signum, None))
    received = startup.received
    previous.update({sig: signal.signal(sig, startup.handle) for sig in STOP_SIGNALS})
    try:
        config = load_run_config(args)
        startup.end()
        if received:  # a stop deferred past an import that ended just before the start-up checks did
            raise KeyboardInterrupt(signal.Signals(received[0]).name)
    except BaseException as exc:  # noqa: BLE001 - a stop signal, or bad input: one line, nothing written
        startup.end()
        restore(previous)
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
    return config


def run_cases(config: HostConfig, args: argparse.Namespace, ab: bool, previous: dict) -> int:
    """The run folder, the plan on every host, the summary and the exit status."""
    # From the run folder's opening until run_hosts waits on the hosts, a stop is held (HELD) and raised
    # there, where it ends every case and the summary is written: in between nothing could catch it.
    HELD.clear()
    for sig in STOP_SIGNALS:
        signal.signal(sig, hold_stop)
    try:
        run = open_run(config)
    except InferPerfError as exc:
        restore(previous)
        logger.error(one_line(exc))
        return exc.exit_code
    if ab:
        return run_ab(config, run, args, previous)
    plan = build_plan([Variant("", run.run_dir, config.cases)], config.repetitions)
    outcomes, interrupted = run_hosts(config, run, args.verbose, plan)
    return finish_run(config, run, outcomes, interrupted, args.strict, previous)


if __name__ == "__main__":
    leave(main())  # exit handlers run and streams flushed, without the interpreter's module teardown
