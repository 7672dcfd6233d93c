"""Container-side entry (spec §2.2.3): run one case's seven steps and write result.json.

    python3 run_inference.py --perf_dir P --data_dir D --log_dir L \
        --vendor cpu --case resnet50 --framework pytorch

Exit status: 0 success, 2 config error, 3 data error, 4 engine error,
1 unexpected error, 130 interrupted. On failure <log_dir>/failure.json names
the step and the error, and no result.json exists.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from pathlib import Path


class Interrupted(Exception):
    pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--perf_dir", required=True, help="the inference/ directory")
    parser.add_argument("--data_dir", required=True, help="data set directory for the case")
    parser.add_argument("--log_dir", required=True, help="where result.json and container.out.log go")
    parser.add_argument("--vendor", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--framework", required=True, help="e.g. pytorch or pytorch_2.1")
    parser.add_argument("--log_level", default="INFO", choices=["TRACE", "DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log_call_information", action="store_true", help="show caller in log lines")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
        help="override a case config key for this run (YAML value), e.g. --set batch_sizes=[1,8,32]",
    )
    return parser.parse_args(argv)


def _raise_interrupted(signum: int, _frame) -> None:
    raise Interrupted(f"stopped by signal {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_dir = Path(args.log_dir)
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"--log_dir {args.log_dir}: cannot create: {exc.strerror}", file=sys.stderr)
        return 2

    # PyTorch's OpenMP threads otherwise busy-wait after every torch op (data
    # transforms, evaluation, validation) and steal cores from the engine being
    # measured: ~7% of ONNX Runtime's QPS on 2 cores (bench/harness_overhead.py).
    # Must be set before torch is imported; an explicit setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    # Heavy imports (torch via the pipeline) only after the arguments are known good.
    from loguru import logger

    from common import lifetime
    from tools import result
    from common.errors import InferPerfError, one_line
    from tools.logger import init_logger
    from tools.pipeline import Pipeline, PipelineArgs

    result.clear_previous(log_dir)
    init_logger(log_dir, args.log_level, args.log_call_information)
    signal.signal(signal.SIGTERM, _raise_interrupted)
    signal.signal(signal.SIGHUP, _raise_interrupted)
    # Nothing outlives run.py or the case's time for long (common/lifetime.py).
    lifetime.watch(lambda reason: logger.error(f"stopping: {reason}"))
    pipeline = Pipeline(
        PipelineArgs(args.perf_dir, args.data_dir, args.log_dir, args.vendor, args.case, args.framework, args.overrides)
    )
    try:
        pipeline.run()
        return 0
    except InferPerfError as exc:
        code, message = exc.exit_code, one_line(exc)
    except (KeyboardInterrupt, Interrupted) as exc:
        code, message = 130, str(exc) or "interrupted"
    except Exception as exc:  # a bug: keep the traceback for the developer, one line for the user
        trace_path = log_dir / "traceback.txt"
        trace_path.write_text(traceback.format_exc(), encoding="utf-8")
        code, message = 1, f"{one_line(exc)} (traceback in {trace_path})"
    step = pipeline.current_step
    logger.error(f"step '{step}' failed: {message}")
    result.write_failure(log_dir, step=step, error=message, exit_code=code, case=args.case, vendor=args.vendor)
    return code


if __name__ == "__main__":
    sys.exit(main())
