"""run.py's command line: its options, and ``run.py ab``'s, which add the two variants and compare's
decision options."""

from __future__ import annotations

import argparse

from common import __version__
from common.yamlio import add_override_option
from utils.cli import INFERENCE_DIR
from utils.run_plan import AB_REPETITIONS

DESCRIPTION = "Host-side entry (spec §2.2.2): run every case of configs/host.yaml on every host, then merge."

EPILOG = f"""\
default config: {INFERENCE_DIR / "configs" / "host.yaml"}
results: FLAGPERF_LOG_PATH/run<id>/ (default {INFERENCE_DIR / "result"}): summary.json,
  summary.md, report.html, run.log, and per case and host <case:framework>/<host>_noderank<i>/
exit status: 0 every case succeeded; 1 a case failed (named with its host and step);
  2 bad config or command line; 3 with --strict, a result is invalid; 6 the summary could
  not be written (disk full or read-only); 130 interrupted
compare two runs: run.py compare RUN_A RUN_B [--threshold 5]
benchmark a running server: run.py --endpoint http://HOST:PORT/v1 --served-model NAME [--concurrency 1,2,4] \
[--repeat N] (run.py --endpoint X --served-model Y --help), or host.yaml's ENDPOINT: {{url: ..., served_model: ...}};
  run.py ab --endpoint ... --set-a KEY=VALUE --set-b KEY=VALUE: two variants of its options (docs/serving.md)
"""

AB_DESCRIPTION = f"""Run two variants of the same cases interleaved on the same hosts (utils/run_plan.py: ABBA per
repetition), then decide between them as run.py compare does: e.g. run.py ab --set-a compiler=onnxruntime
--set-b compiler=inductor. Each side runs {AB_REPETITIONS} repetitions unless --repeat or a case config's
repetitions says otherwise (the calibration: docs/measurement.md). Results: run<id>/A/ and run<id>/B/ (each a
run folder), the decision in run<id>/B/compare_A.md. Exit status as run.py compare's (0, 1 regression of B,
3 not comparable), 2 bad input, 130 interrupted."""


def parse_args(argv: list[str] | None, ab: bool = False) -> argparse.Namespace:
    """run.py's options; ``ab``: run.py ab's, which add the two variants and compare's decision options."""
    parser = argparse.ArgumentParser(
        prog="run.py ab" if ab else None,
        description=AB_DESCRIPTION if ab else DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(set_a=None, set_b=None)
    if ab:
        from utils.results.compare import add_decision_options

        for name in ("a", "b"):
            add_override_option(
                parser,
                f"--set-{name}",
                f"a case config key of variant {name.upper()} (with host.yaml's ENDPOINT: one of its entries)",
            )
        add_decision_options(parser)
    _add_case_options(parser)
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


def _add_case_options(parser: argparse.ArgumentParser) -> None:
    """The options that say which host.yaml and which cases, with which keys overridden."""
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
