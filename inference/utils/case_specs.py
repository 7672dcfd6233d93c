"""host.yaml's CASES (and run.py --model): what to run, as ``CaseSpec`` entries.

Three forms of a CASES entry, each one ``CaseSpec``:

- ``"<case>:<framework>": DATA_DIR``: a case of ``benchmarks/<case>/<framework>/``;
- ``"path/model.onnx": <framework>`` (or a ByteMLPerf model-zoo ``.json``): the file run by the
  generic case ``MODEL_CASE`` with synthetic inputs (docs/onnx_models.md);
- ``"<workload>.json[:framework]": DATA_DIR``: a ByteMLPerf workload (utils/bytemlperf_workload.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import ConfigError, shown
from common.values import MAX_NAME, bounded_path, on_disk

MAX_CASES = 256
_CASE_KEY = re.compile(rf"^([A-Za-z0-9_-]{{1,{MAX_NAME}}}):([A-Za-z0-9_.-]{{1,{MAX_NAME}}})$")


@dataclass(frozen=True)
class CaseSpec:
    """One entry of CASES: a case (or a model file, or a workload) in a framework, with its data directory."""

    case: str
    framework: str
    data_dir: str
    # A model file in data_dir, run by the generic case MODEL_CASE (docs/onnx_models.md); None for a case.
    model: str | None = None
    # A ByteMLPerf workload file's keys as --set items (utils/bytemlperf_workload.py); () for a case.
    workload_overrides: tuple[str, ...] = ()
    # The image folder its engine declares (IMAGE in inference_engine/<vendor>/<compiler>.py, set by
    # run.py once the case config names the compiler); None: FlagPerf's, the framework's (``image_folder``).
    image: str | None = None

    @property
    def label(self) -> str:
        """How results name it: the case, or the model file's name."""
        return self.model or self.case

    @property
    def image_folder(self) -> str:
        """The folder of its image: ``docker_images/<vendor>/<image_folder>/``."""
        return self.image or self.framework

    @property
    def key(self) -> str:
        return f"{self.label}:{self.framework}"

    @property
    def overrides(self) -> tuple[str, ...]:
        """``--set`` items for this case alone: a model entry's file, a workload's keys."""
        return (() if self.model is None else (f"model_path={json.dumps(self.model)}",)) + self.workload_overrides


# A CASES key or run.py --model naming a model file: "path/to/model.onnx": <framework> (docs/onnx_models.md).
MODEL_CASE = "onnx_model"
MODEL_SUFFIXES = (".onnx", ".json")


def model_case(path: Any, framework: Any, base: Path, here: bool) -> CaseSpec:
    """An ONNX file, or a ByteMLPerf model-zoo JSON describing one, as a case of MODEL_CASE run in
    ``framework``'s image; its folder is the case's data dir. ``here``: the hosts' paths are this
    machine's (MODE local, or this machine's Docker engine): relative paths are relative to ``base``
    and the file must exist; otherwise the path is on the hosts and must be absolute. Raises ValueError(reason)."""
    text = bounded_path(path)
    if not text.lower().endswith(MODEL_SUFFIXES):
        raise ValueError(f"{shown(text)} is not a model file (.onnx, or a ByteMLPerf model-zoo .json)")
    if not isinstance(framework, str) or not re.fullmatch(rf"[A-Za-z0-9_.-]{{1,{MAX_NAME}}}", framework):
        raise ValueError(f"must map the model file to a framework name such as pytorch, got {shown(framework)}")
    file = Path(text)
    if not file.is_absolute():
        if not here:
            raise ValueError(f"model file {shown(text)} must be an absolute path on the hosts")
        file = (base / file).resolve()
    if here and not on_disk(file.is_file, file):
        raise ValueError(f"model file {file}: no such file")
    return CaseSpec(MODEL_CASE, framework, str(file.parent), file.name)


def parse_cases(value: Any, config_path: Path, perf_dir: Path, here: bool) -> list[CaseSpec]:
    """host.yaml's CASES mapping as case specs; relative data dirs are relative to ``perf_dir``
    where ``here`` (the hosts' paths are this machine's: ``model_case``). Raises ValueError(reason) for the mapping as a
    whole, ConfigError naming
    ``config_path`` and the entry for one entry."""
    if isinstance(value, list) and value and all(isinstance(spec, CaseSpec) for spec in value):
        return value
    if not isinstance(value, dict) or not value:
        raise ValueError('must map "<case>:<framework>" to a data directory')
    if len(value) > MAX_CASES:
        raise ValueError(f"lists {len(value)} cases, more than {MAX_CASES}")
    from utils.bytemlperf_workload import workload_entry

    cases = []
    for key, data_dir in value.items():
        workload = workload_entry(config_path, perf_dir, key, data_dir)  # "<workload>.json[:framework]": data dir
        if isinstance(key, str) and key.lower().endswith(MODEL_SUFFIXES) and workload is None:
            try:
                cases.append(model_case(key, data_dir, perf_dir, here))
            except ValueError as exc:
                raise ConfigError(f"{config_path}: key CASES entry {shown(key)}: {exc}") from None
            continue
        match = _CASE_KEY.match(str(key)) if isinstance(key, str) and workload is None else None
        if not match and workload is None:
            raise ConfigError(
                f'{config_path}: key CASES entry {shown(key)} must look like "<case>:<framework>" '
                f'(names of at most {MAX_NAME} characters), e.g. "resnet50:pytorch"'
            )
        try:
            data_dir = bounded_path(data_dir)
        except ValueError as exc:
            raise ConfigError(
                f"{config_path}: key CASES entry {key!r} must map to a data directory path: {exc}"
            ) from None
        if not data_dir.startswith("/"):
            if not here:
                raise ConfigError(
                    f"{config_path}: key CASES entry {key!r}: data dir {shown(data_dir)} must be an absolute path on "
                    "the hosts"
                )
            data_dir = str((perf_dir / data_dir).resolve())
        if workload is not None:
            cases.append(CaseSpec(workload.case, workload.framework, data_dir, workload_overrides=workload.overrides))
            continue
        assert match is not None  # refused above: an entry that is no workload is "<case>:<framework>"
        cases.append(CaseSpec(match.group(1), match.group(2), data_dir))
    check_unique_cases(cases, f"{config_path}: key CASES")
    return cases


def check_unique_cases(cases: list[CaseSpec], where: str) -> None:
    """Two entries with one key would share a result folder (two model files of one name)."""
    keys = [spec.key for spec in cases]
    twice = next((key for key in keys if keys.count(key) > 1), None)
    if twice is not None:
        raise ConfigError(f"{where}: two entries run as {twice!r} (model files of one name): rename one")
