"""The case config's value checks and bounds: the typed keys' checks and the well-known extra keys'.

The validators of each kind of value, and the bounds both sides share, are ``common/values.py``'s
(host.yaml's checks are built from them too); what is here is the case config's own.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from loguru import logger

from common.errors import shown
from common.scenario import SCENARIOS
from common.values import (
    MAX_NAME,
    MAX_PATH,
    MAX_PATH_PART,
    MAX_REPETITIONS,
    MAX_TEXT,
    at_most,
    bounded,
    cpu_count,
    non_negative_int,
    one_or_list,
    optional,
    path_too_long,
    positive_int,
    true_or_false,
)
from contract.config.expr import parse_number

CLI_KEYS = ("perf_dir", "data_dir", "log_dir", "vendor", "case", "framework")
# Keys that configurations.yaml must define, as in FlagPerf's standard case.
# input_size (elements per input sample) is optional: FlagPerf's spec lists it,
# but its published configs lack it and neither framework reads it.
REQUIRED_KEYS = (
    "batch_size",
    "fp16",
    "compiler",
    "num_workers",
    "log_freq",
    "repeat",
    "no_validation",
    "exist_onnx_path",
    "exist_compiler_path",
)


# Bounds on everything that sizes a resource.
MAX_BATCH_SIZE = 1 << 16
MAX_CLIENTS_PER_CORE = 4
MAX_REPEAT = 1_000_000
MAX_WARMUP = 10_000
MAX_SEED = 2**32 - 1  # numpy's legacy seeding takes no more
MAX_INPUT_SIZE = 1 << 31  # elements of one input sample
MAX_FLOPS = 1e21  # FLOPs per sample: x QPS it must stay a finite number
MAX_EXTRA_INT = 2**63 - 1  # what C and torch APIs take
MAX_EXTRA_ITEMS = 4096  # entries of a list or mapping of a case config
MIN_ONNX_OPSET = 7
MAX_KEY = MAX_NAME  # length of a key name
# Threads or worker processes of one key, on any machine: more than the logical
# CPUs of any one server today (two 192-core sockets have 768) and far below
# Linux's smallest default pid_max (32768). 100000 made a runtime segfault;
# more threads than this machine's CPUs is only oversubscribed (a warning).
MAX_THREADS = 1024


def _threads(value: Any) -> int:
    """A thread or worker-process count: 0 (the library's default) up to MAX_THREADS, on any machine.

    More than the CPUs here is legal (a config written for a bigger machine
    runs as given): ``oversubscribed`` lists those counts, ``warn_oversubscribed``
    says so once, and result.json records them in ``env.oversubscribed``.
    """
    number = non_negative_int(value)
    if number > MAX_THREADS:
        raise ValueError(
            f"must be 0 (the default) or a count <= {MAX_THREADS}, got {shown(value)}: thousands of threads or "
            "processes exhaust process ids or crash a runtime"
        )
    return number


def is_thread_key(key: str) -> bool:
    """A key named like a thread or worker count: ``num_workers``, ``*_threads``, ``*_workers``."""
    return bool(_THREAD_KEY.search(key))


def oversubscribed(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The thread and worker counts above the CPUs this process may use, each as
    ``{key, value, cpus, run_with}``: they run as given (``run_with`` = ``value``),
    as FlagPerf and PyTorch's DataLoader run them; clamping would change the
    experiment the config describes."""
    cpus = cpu_count()
    return [
        {"key": key, "value": value, "cpus": cpus, "run_with": value}
        for key, value in values.items()
        if is_thread_key(key) and isinstance(value, int) and not isinstance(value, bool) and value > cpus
    ]


def warn_oversubscribed(values: Mapping[str, Any], origin: Mapping[str, str]) -> list[dict[str, Any]]:
    """One warning per oversubscribed key (where it was set, the value, the CPUs); returns
    ``oversubscribed(values)``."""
    found = oversubscribed(values)
    for item in found:
        logger.warning(
            f"{origin.get(item['key'], 'config')}: key '{item['key']}' is {item['value']}, more than the "
            f"{item['cpus']} CPUs "
            f"this process may use; running with {item['run_with']} as given (oversubscribed: slower, not wrong; "
            "recorded in result.json env.oversubscribed)"
        )
    return found


def _onnx_opset(value: Any) -> int:
    number = positive_int(value)
    low, high, source = supported_onnx_opsets()
    if not low <= number <= high:
        raise ValueError(f"must be an ONNX opset from {low} to {high} (what {source} supports), got {shown(value)}")
    return number


@functools.lru_cache(maxsize=1)
def supported_onnx_opsets() -> tuple[int, int, str]:
    """The opsets the installed exporter writes: torch's TorchScript exporter, which
    benchmarks/ use (read from torch/onnx/_constants.py without importing torch, which
    takes seconds); else the installed onnx; else the opsets torch 2.x exports."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.submodule_search_locations:
            constants = Path(list(spec.submodule_search_locations)[0]) / "onnx" / "_constants.py"
            values = {
                target.id: node.value.value
                for node in ast.parse(constants.read_text(encoding="utf-8")).body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            high = values.get("ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", values.get("ONNX_MAX_OPSET"))
            low = values.get("ONNX_MIN_OPSET", MIN_ONNX_OPSET)
            if isinstance(high, int):
                return low if isinstance(low, int) else MIN_ONNX_OPSET, high, "the installed torch.onnx exporter"
    except (OSError, SyntaxError, ValueError, ImportError):
        pass
    try:
        import onnx.defs

        return MIN_ONNX_OPSET, int(onnx.defs.onnx_opset_version()), "the installed onnx"
    except ImportError:
        return MIN_ONNX_OPSET, 20, "torch 2.x's exporter"


def _optional_name(value: Any) -> str | None:
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > MAX_NAME
        or not value.replace("_", "").replace("-", "").isalnum()
        or not value.isascii()
    ):
        raise ValueError(f"must be a name of letters, digits, '_' or '-', or null, got {shown(value)}")
    return value


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a path or null, got {shown(value)}")
    if "\0" in value or path_too_long(value):
        raise ValueError(
            f"must be a path of at most {MAX_PATH} characters and {MAX_PATH_PART} per name, without NUL, got "
            f"{shown(value)}"
        )
    return value


def _optional_flops(value: Any) -> float | None:
    if value is None:
        return None
    reason = f"must be a positive number of FLOPs per sample, got {shown(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(reason)
    number = parse_number(value)
    if not number > 0:
        raise ValueError(reason)
    if number > MAX_FLOPS:
        raise ValueError(f"must be a positive number of FLOPs per sample <= {MAX_FLOPS:g}, got {shown(value)}")
    return number


def _best_or(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``best``: the engine's own best batch sizes, resolved after the compile (tools/compat/bytemlperf/hooks.py)."""

    def checked(value: Any) -> Any:
        if value == "best":
            return value
        if isinstance(value, str):
            raise ValueError(
                f"must be a batch size, a list of them, or 'best' (the engine's best batch sizes), got {shown(value)}"
            )
        return check(value)

    return checked


def _scenario(value: Any) -> str:
    if not isinstance(value, str) or value not in SCENARIOS:
        raise ValueError(f"must be one of {', '.join(SCENARIOS)}, got {shown(value)}")
    return value


LOAD_GENERATORS = (
    "inferperf",
    "mlperf",
)  # who issues a performance row's queries: tools/measure/scenarios.py or MLPerf LoadGen


def _load_generator(value: Any) -> str:
    if not isinstance(value, str) or value not in LOAD_GENERATORS:
        raise ValueError(f"must be one of {', '.join(LOAD_GENERATORS)}, got {shown(value)}")
    if value == "mlperf":
        import importlib.util

        if importlib.util.find_spec("mlperf_loadgen") is None:
            raise ValueError(
                "is 'mlperf', but MLPerf LoadGen is not installed here (pip install mlcommons-loadgen==6.0.17)"
            )
    return value


def _open_fraction(value: Any) -> float:
    """A precision: the 95 % half-width over the figure, strictly between 0 and 1 (0.02 = ±2 %)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"must be a fraction > 0 and < 1 (0.02 = ±2 %), got {shown(value)}")
    return float(value)


def _device(value: Any) -> str:
    if not isinstance(value, str) or not (value == "cpu" or re.fullmatch(r"cuda(:\d{1,4})?", value)):
        raise ValueError(f"must be 'cpu' or 'cuda[:N]', got {shown(value)}")
    return value


def check_device_available(device: str) -> str | None:
    """Why ``device`` cannot be used on this machine, or None. Imports torch only for a CUDA device."""
    if not device.startswith("cuda"):
        return None
    try:
        import torch
    except ImportError:
        return "is a CUDA device, but torch is not installed here"
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
        return (
            f"is {device!r}, but this machine has no usable CUDA device ({build}, torch.cuda.is_available() is False)"
        )
    index = int(device.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        return f"is {device!r}, but this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})"
    return None


# Typed keys and their checks; everything else is passed through untyped.
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "batch_size": at_most(positive_int, MAX_BATCH_SIZE, "the largest batch InferPerf runs"),
    "input_size": optional(at_most(positive_int, MAX_INPUT_SIZE, "elements of one sample")),
    "fp16": true_or_false,
    "compiler": _optional_name,
    "num_workers": _threads,
    "log_freq": at_most(non_negative_int, 10**9, "batches between log lines"),
    "repeat": at_most(positive_int, MAX_REPEAT, "minimum passes over the data"),
    # FlagPerf's ``repeat`` is passes over the data within one process; ``repetitions`` is how many
    # times run.py runs the case, each a fresh process (docs/measurement.md, "Repetitions").
    "repetitions": at_most(positive_int, MAX_REPETITIONS, "fresh runs of the case"),
    "no_validation": true_or_false,
    "exist_onnx_path": optional(_path),
    "exist_compiler_path": optional(_path),
    "warmup": at_most(non_negative_int, MAX_WARMUP, "untimed calls"),
    "flops": _optional_flops,
    "seed": at_most(non_negative_int, MAX_SEED, "numpy's seeds are 32-bit"),
    "onnx_opset": _onnx_opset,
    "device": _device,
    "min_query_count": bounded("a positive integer", 0, 1e8, integer=True),
    "min_duration_s": bounded("a number of seconds", 0, 86400, low_inclusive=True),
    "max_duration_s": bounded("a number of seconds", 0, 86400),
    "contention_limit": bounded("a fraction", 0, 1),
    "precision": optional(_open_fraction),  # null: no precision asked (docs/measurement.md)
    "latency_precision": optional(_open_fraction),
    "settle_max_s": bounded("a number of seconds", 0, 86400, low_inclusive=True),
    "batch_sizes": optional(_best_or(one_or_list(bounded("a positive integer", 0, MAX_BATCH_SIZE, integer=True)))),
    "scenario": one_or_list(_scenario, max_items=len(SCENARIOS)),
    "clients": one_or_list(bounded("a positive integer", 0, 4096, integer=True)),
    "target_qps": optional(bounded("a positive number of samples per second", 0, 1e9)),
    "latency_bound_ms": optional(bounded("a positive number of milliseconds", 0, 3.6e6)),
    "server_search": true_or_false,
    "load_generator": _load_generator,
    "compile_only": true_or_false,
    "numeric_check": true_or_false,
    "numeric_batches": bounded("a positive integer", 0, 64, integer=True),
    "audits": true_or_false,
    "allow_many_clients": true_or_false,
    "pool_max_mb": bounded("a positive number of MiB", 0, 65536),
}

# Well-known keys of parameters.yaml and vendor configs that size a resource,
# checked wherever they appear (FlagPerf's training keys included: a case that
# trains its model, as digits does, reads them).
EXTRA_CHECKS: dict[str, Callable[[Any], Any]] = {
    # multi_stream's samples per query (LoadGen's key; default common.scenario.MULTI_STREAM_SAMPLES_PER_QUERY)
    "multi_stream_samples_per_query": bounded("a positive integer", 0, 1e6, integer=True),
    "train_epochs": at_most(non_negative_int, 10_000, "training epochs"),
    "train_batch_size": at_most(positive_int, MAX_BATCH_SIZE, "the largest batch InferPerf runs"),
    "learning_rate": bounded("a positive learning rate", 0, 10),
    "weight_decay": bounded("a weight decay", 0, 1, low_inclusive=True),
    "max_samples": optional(at_most(positive_int, 10**9, "samples")),
    "num_classes": at_most(positive_int, 100_000, "outputs of a classifier"),
    "resize": at_most(positive_int, 8192, "pixels"),
    "crop": at_most(positive_int, 8192, "pixels"),
    "max_seq_length": at_most(positive_int, 65536, "tokens"),
    "trt_max_batch_size": optional(at_most(positive_int, MAX_BATCH_SIZE, "the largest batch InferPerf runs")),
    "trt_workspace_gib": optional(bounded("a positive number of GiB", 0, 4096)),
    # ByteMLPerf's workload keys without an InferPerf twin (utils/bytemlperf_workload.py).
    "test_perf": true_or_false,
    "test_accuracy": true_or_false,
    "data_percent": optional(bounded("a whole percentage", 0, 100, integer=True)),
}
# Any other key named like a thread or worker count (intra_op_num_threads,
# inter_op_num_threads, torch_threads, a FlagPerf vendor's flagv_threads, ...).
_THREAD_KEY = re.compile(r".+_(threads|workers)$")


def _plain_value(value: Any, depth: int = 0) -> Any:
    """Any other value: finite numbers a C API can take, bounded strings and collections."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > MAX_EXTRA_INT:
            raise ValueError(f"must be an integer within +-2**63, got {shown(value)}")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {shown(value)}")
    elif isinstance(value, str):
        if len(value) > MAX_TEXT or "\0" in value:
            raise ValueError(f"must be a string of at most {MAX_TEXT} characters without NUL, got {shown(value)}")
    elif isinstance(value, (list, dict)):
        if len(value) > MAX_EXTRA_ITEMS:
            raise ValueError(f"must have at most {MAX_EXTRA_ITEMS} entries, got {len(value)}")
        for item in value.items() if isinstance(value, dict) else value:
            for part in item if isinstance(value, dict) else (item,):
                try:
                    _plain_value(part, depth + 1)
                except ValueError as exc:
                    raise ValueError(f"entry {shown(part)} {exc}" if depth == 0 else str(exc)) from None
    return value


def check_extra(key: str, value: Any) -> Any:
    """The check of a key outside the typed fields; returns the value, normalised."""
    if key in EXTRA_CHECKS:
        return EXTRA_CHECKS[key](value)
    if is_thread_key(key):
        return _threads(value)
    return _plain_value(value)
