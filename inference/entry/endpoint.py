"""A running OpenAI-compatible server to benchmark: ``run.py --endpoint ...`` and host.yaml's
``ENDPOINT`` both hand over to tools/serving/cli.py, whose run goes into the results history."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from common.errors import ConfigError
from utils.cli import INFERENCE_DIR
from utils.cli.stops import restore
from utils.cli.summary import history_beside, record_history, write_report_safely
from utils.host_config import HostConfig


def wants_endpoint(argv: list[str]) -> bool:
    """run.py --endpoint: a running OpenAI-compatible server, tools/serving/cli.py."""
    return any(a == "--endpoint" or a.startswith("--endpoint=") for a in argv)


def run_endpoint(argv: list[str]) -> int:
    """run.py --endpoint ...: its command line as tools/serving/cli.py's, the run into the history beside it."""
    from tools.serving.cli import main as serving_main

    return serving_main(
        argv, INFERENCE_DIR / "result", on_written=lambda folder: serving_written(folder, history_beside)
    )


def run_host_endpoint(config: HostConfig, args: argparse.Namespace, previous: dict) -> int:
    """host.yaml's ENDPOINT: as run.py --endpoint (tools/serving/cli.py), with run.py's stop handlers undone."""
    from tools.serving.cli import main as serving_main

    restore(previous)
    return serving_main(
        endpoint_argv(config, args),
        config.log_path,
        origin=str(config.path),
        on_written=lambda folder: serving_written(
            folder, lambda run_dir: record_history(config.history, run_dir, run_dir / "summary.md")
        ),
    )


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


def serving_written(run_dir: Path, history: Callable[[Path], None]) -> None:
    """A serving run's folder is complete: its report.html (drawn from summary.json's rows), then the history."""
    write_report_safely(run_dir, INFERENCE_DIR)
    history(run_dir)
