"""``run.py ab``: variants A and B of the same cases, interleaved on the same hosts, then compared."""

from __future__ import annotations

import argparse

from loguru import logger

from common.errors import one_line
from utils.cli.hosts import Run, run_hosts
from utils.cli.summary import finish_run
from utils.host_config import HostConfig
from utils.run_plan import AB_REPETITIONS, Variant, build_plan


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
