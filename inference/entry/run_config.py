"""host.yaml and run.py's command line, checked as far as they can be before any host is touched."""

from __future__ import annotations

import argparse

from common.errors import ConfigError
from entry.checks import check_cases
from entry.endpoint import endpoint_run
from utils import executors
from utils.bytemlperf_workload import without_keys, workload_cases
from utils.case_specs import check_unique_cases
from utils.cli import INFERENCE_DIR
from utils.cli.cases import model_cases, select_cases
from utils.host_config import HostConfig, load_host_config
from utils.run_plan import check_variants, parse_repeat, with_sets


def load_run_config(args: argparse.Namespace) -> HostConfig:
    """host.yaml and the command line, with everything checked that can be before any host is touched."""
    config = load_host_config(args.config, INFERENCE_DIR)
    if config.endpoint is not None:
        endpoint_run(config, args)  # its options' shape; their values are checked when it runs, before any request
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
