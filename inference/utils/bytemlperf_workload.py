"""ByteMLPerf workload files (``workloads/<model>-<framework>-<precision>.json``) as InferPerf cases.

A workload names a model and how to measure it. InferPerf runs the case of the
same name with the workload's keys as that case's ``--set`` overrides
(docs/bytemlperf_migration.md has the table):

  model           "<name>-<framework>-<precision>": the case benchmarks/<name>/ (which
                  must exist), framework torch -> pytorch, precision fp32/fp16 -> fp16
  test_perf       test_perf (false: no performance rows)
  test_accuracy   test_accuracy (false: no framework validation step)
  test_numeric    numeric_check
  clients         clients
  iterations      min_query_count = clients x iterations (each client issues that many)
  batch_sizes     batch_sizes
  data_percent    data_percent (the share of the data set's batches used, 1..100)
  compile_only    compile_only

Where: ``run.py --workload PATH.json`` (the data directory is the one host.yaml's
CASES gives the case), or a CASES entry ``"PATH.json": DATA_DIR`` (optionally
``"PATH.json:FRAMEWORK"``, e.g. pytorch_2.1 to pick an image). A key outside the
table, a value of the wrong kind, or a model with no case here is one
ConfigError line naming the file and the key or model. Host side: no tools/.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import ConfigError, shown
from common.layout import framework_dir

WORKLOAD_KEYS = (
    "model",
    "test_perf",
    "test_accuracy",
    "test_numeric",
    "clients",
    "iterations",
    "batch_sizes",
    "data_percent",
    "compile_only",
)
FRAMEWORKS = {"torch": "pytorch"}  # ByteMLPerf's framework word -> InferPerf's case framework
PRECISIONS = {"fp32": False, "fp16": True}  # -> fp16
# A model-zoo entry (a model description) has these; a workload never does.
MODEL_ZOO_KEYS = ("model_path", "onnx_model_path", "inputs", "input_shape")
MAX_WORKLOAD_BYTES = 1 << 20
MAX_BATCH = 1 << 16


@dataclass(frozen=True)
class Workload:
    path: Path
    model: str
    case: str
    framework: str
    overrides: tuple[str, ...]  # --set items, in WORKLOAD_KEYS order


def read_json(path: Path) -> Any:
    """The file's JSON value; ConfigError naming the file when it cannot be read or parsed."""
    try:
        if path.stat().st_size > MAX_WORKLOAD_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_WORKLOAD_BYTES} bytes; not a ByteMLPerf workload")
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the workload: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"{path}: not valid JSON: {getattr(exc, 'msg', exc)}"
            + (f" at line {exc.lineno}" if hasattr(exc, "lineno") else "")
        ) from None


def is_workload_file(path: Path) -> bool:
    """A JSON file holding a ByteMLPerf workload (an object with 'model' and no model-zoo keys).
    Unreadable or unparsable files are not recognised here (the caller reports them)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_WORKLOAD_BYTES:
            return False
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and "model" in data and not any(key in data for key in MODEL_ZOO_KEYS)


def split_key(key: str) -> tuple[str, str | None]:
    """``"PATH.json:FRAMEWORK"`` -> (PATH.json, FRAMEWORK); ``"PATH.json"`` -> (PATH.json, None)."""
    path, sep, framework = key.rpartition(":")
    if sep and path.lower().endswith(".json") and re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", framework):
        return path, framework
    return key, None


def load_workload(path: Path, perf_dir: Path, framework: str | None = None) -> Workload:
    """The workload at ``path`` mapped onto the case it names (module docstring)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a ByteMLPerf workload is a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in WORKLOAD_KEYS:
            raise ConfigError(
                f"{path}: unknown workload key {shown(key)} (ByteMLPerf's keys: {', '.join(WORKLOAD_KEYS)})"
            )
    if "model" not in data:
        raise ConfigError(f"{path}: key 'model' is required (a name like resnet50-torch-fp32)")
    model = data["model"]
    case, case_framework, fp16 = _model_case(path, model, perf_dir)
    overrides = [f"fp16={json.dumps(fp16)}"]
    for key in WORKLOAD_KEYS[1:]:
        if key in data:
            overrides.extend(_mapped(path, key, data[key], data))
    if "iterations" in data and "clients" not in data:
        overrides.append(f"min_query_count={data['iterations']}")
    return Workload(path, model, case, framework or case_framework, tuple(overrides))


def _model_case(path: Path, model: Any, perf_dir: Path) -> tuple[str, str, bool]:
    match = re.fullmatch(r"([a-z0-9][a-z0-9_.-]*)-([a-z0-9]+)-([a-z0-9]+)", model) if isinstance(model, str) else None
    if not match:
        raise ConfigError(
            f"{path}: key 'model' must be ByteMLPerf's <name>-<framework>-<precision> (e.g. resnet50-torch-fp32), got "
            f"{shown(model)}"
        )
    name, word, precision = match.groups()
    framework = FRAMEWORKS.get(word)
    case_dir = perf_dir / "benchmarks" / name / (framework or "")
    if framework is None or not case_dir.is_dir() or name == "onnx_model":
        known = sorted(
            p.parent.name for p in (perf_dir / "benchmarks").glob("*/pytorch") if p.parent.name != "onnx_model"
        )
        why = (
            f"framework '{word}' (InferPerf runs torch models)"
            if framework is None
            else f"no benchmarks/{name}/{framework}/"
        )
        raise ConfigError(
            f"{path}: model {model!r} has no InferPerf case: {why}; cases here: "
            f"{', '.join(f'{k}-torch-fp32' for k in known)}"
        )
    if precision not in PRECISIONS:
        raise ConfigError(
            f"{path}: model {model!r}: precision '{precision}' is not one InferPerf runs ({', '.join(PRECISIONS)})"
        )
    return name, framework, PRECISIONS[precision]


def _mapped(path: Path, key: str, value: Any, data: dict) -> list[str]:
    """The --set items for one workload key; ConfigError naming the key when its value is wrong."""

    def fail(expected: str) -> ConfigError:
        return ConfigError(f"{path}: workload key '{key}' must be {expected}, got {shown(value)}")

    if key in ("test_perf", "test_accuracy", "test_numeric", "compile_only"):
        if not isinstance(value, bool):
            raise fail("true or false")
        return [f"{'numeric_check' if key == 'test_numeric' else key}={json.dumps(value)}"]
    if key in ("clients", "iterations", "data_percent"):
        high = 100 if key == "data_percent" else 10**8
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise fail(f"a whole number from 1 to {high}")
        if key == "clients":
            iterations = data.get("iterations")
            extra = (
                [f"min_query_count={value * iterations}"]
                if isinstance(iterations, int) and not isinstance(iterations, bool)
                else []
            )
            return [f"clients={value}", *extra]
        return [] if key == "iterations" else [f"data_percent={value}"]
    # batch_sizes
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_BATCH for b in value)
    ):
        raise fail(f"a non-empty list of batch sizes from 1 to {MAX_BATCH}")
    return [f"batch_sizes={json.dumps(sorted(set(value)))}"]


# ---- where workloads come from: host.yaml's CASES and run.py --workload -----------------------
def workload_entry(config_path: Path, perf_dir: Path, key: Any, value: Any = None) -> Workload | None:
    """A CASES key naming a workload file (``"PATH.json"`` or ``"PATH.json:FRAMEWORK"``, relative
    to inference/), mapped to ``value``, the case's data directory; None for any other key, a
    model-zoo JSON included (docs/onnx_models.md)."""
    if not isinstance(key, str):
        return None
    text, framework = split_key(key)
    path = Path(text) if Path(text).is_absolute() else perf_dir / text
    if not text.lower().endswith(".json") or not is_workload_file(path):
        return None
    try:
        workload = load_workload(path, perf_dir, framework)
    except ConfigError as exc:
        raise ConfigError(f"{config_path}: key CASES entry {key!r}: {exc}") from None
    if (
        isinstance(value, str)
        and "/" not in value
        and (perf_dir / "benchmarks" / workload.case / framework_dir(value)).is_dir()
    ):
        raise ConfigError(
            f"{config_path}: key CASES entry {key!r} maps to {value!r}, a framework: a workload maps to the case's "
            "data directory "
            f'(the framework comes from its model name, or from the key: "{text}:{value}": DATA_DIR)'
        )
    return workload


def workload_cases(cases: list, paths: list[str], perf_dir: Path, config_path: Path) -> list:
    """run.py --workload PATH.json ...: each workload's case, in the data directory host.yaml's
    CASES gives that case (relative paths are the shell's)."""
    from dataclasses import (
        replace,
    )  # the spec keeps its type (utils.host_config.CaseSpec) without importing it: no import circle

    specs = []
    for text in paths:
        path = Path(text).expanduser().absolute()
        if not path.is_file():
            raise ConfigError(f"--workload {text}: no such file")
        workload = load_workload(path, perf_dir)
        known = [spec for spec in cases if spec.case == workload.case and spec.model is None]
        if not known:
            raise ConfigError(
                f"--workload {text}: case '{workload.case}' (model {workload.model}) has no CASES entry in "
                f"{config_path} to take its data directory from; "
                f'add "{workload.case}:{workload.framework}": DATA_DIR there, or list the workload in CASES as '
                f'"{text}": DATA_DIR'
            )
        specs.append(
            replace(known[0], case=workload.case, workload_overrides=workload.overrides)
        )  # known[0].model is None
    return specs


def without_keys(cases: list, overrides: list[str]) -> list:
    """A ``--set`` of the run wins over a workload's key of the same name (both would be an error)."""
    from dataclasses import replace

    given = {item.partition("=")[0].strip() for item in overrides}
    return [
        replace(spec, workload_overrides=tuple(i for i in spec.workload_overrides if i.partition("=")[0] not in given))
        for spec in cases
    ]
