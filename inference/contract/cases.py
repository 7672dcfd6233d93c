"""The case plug-in API, declared, and where the container side loads a case by name.

A case is a package ``benchmarks/<case>/<framework>/`` (``pytorch_2.1`` names the image; the
code is in ``benchmarks/<case>/pytorch``). ``CaseModule`` declares the six functions every
case defines (FlagPerf spec §3.2.2); ``CaseHooks`` the optional hooks a case may add. The
loader checks the six and reads the hooks once, into a ``Case``, whose methods the pipeline
calls: a hook the case lacks is the default its method documents. Nothing here imports
``benchmarks`` at module level (tests/test_lifecycle_units.py): a case is loaded when the
pipeline asks for it. What a case may import: docs/architecture.md, "What a plug-in may import".
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Protocol, cast

from common import layout
from common.errors import ConfigError
from common.torch_step import Step, make_step

if TYPE_CHECKING:
    from contract.config import CaseConfig

# The case API (FlagPerf spec §3.2.2): every case package defines these (CaseModule).
CASE_FUNCTIONS = ("build_dataloader", "create_model", "evaluator", "model_forward", "export_model", "engine_forward")
# The optional hooks (CaseHooks), read once by the loader.
CASE_HOOKS = ("configure", "export_cached", "performance_stage", "framework_step", "baseline_stage")
# The modules loaded here by name, each formatted from its pattern here and nowhere else, so the
# import-circle test (tests/infra/imports.py) follows every load to the files the pattern matches.
DYNAMIC_IMPORTS = {"case": "benchmarks.{case}.{framework}"}


class CaseModule(Protocol):
    """The six case functions. A ``*_forward`` returns a ``contract.phase.PhaseResult`` (from
    ``contract.measuring.measuring().timed_forward``), or FlagPerf's ``(whole_qps, core_qps, acc)``
    (a case-timed phase)."""

    def build_dataloader(self, config: CaseConfig) -> Any:
        """The data set's loader: batches ``(x, y)``, ``x`` a tensor or a list of tensors."""

    def create_model(self, config: CaseConfig) -> Any:
        """The framework model, placed and ready (not called when ``no_validation: true``)."""

    def evaluator(self, outputs: list, y: Any) -> float:
        """One batch's accuracy from the outputs of a step (model or engine)."""

    def model_forward(
        self, model: Any, dataloader: Any, evaluator: Callable[[list, Any], float], config: CaseConfig
    ) -> Any:
        """Step 3: the framework model's pass over the data."""

    def export_model(self, model: Any, config: CaseConfig) -> Any:
        """Step 4: write the ONNX file at ``config.export_onnx_path`` (FlagPerf: or return its path)."""

    def engine_forward(
        self, engine: Any, dataloader: Any, evaluator: Callable[[list, Any], float], config: CaseConfig
    ) -> Any:
        """Step 6: the vendor engine's pass over the data."""


class CaseHooks(Protocol):
    """The optional hooks a case package may define beside the six functions."""

    def configure(self, config: CaseConfig) -> None:
        """The config, before any step uses it (benchmarks/onnx_model: model_path -> exist_onnx_path)."""

    def export_cached(self, model: Any, config: CaseConfig) -> tuple[str, dict]:
        """Step 4 in an LLM runtime's own format (benchmarks/llama): (its path, the cache record)."""

    def performance_stage(self, engine: Any, model: Any, config: CaseConfig) -> Any:
        """An LLM case's own table and scenarios (tools/measure/llm_stage.py): a report with
        ``engine_reasons``, instead of tools/measure/stage.py's rows."""

    def framework_step(self, model: Any, config: CaseConfig) -> Step:
        """The framework model as an engine-shaped step, the numeric check's reference."""

    def baseline_stage(self, config: CaseConfig) -> Any:
        """A base-tier case (benchmarks/base_common.py): the chip's figures, a BaselineReport;
        the pipeline then runs no data set, model or engine."""


def _hook(module: ModuleType, name: str) -> Callable[..., Any] | None:
    found = getattr(module, name, None)
    return found if callable(found) else None


class Case:
    """A loaded case: ``module``, its six functions (``CaseModule``), and the hooks it defines
    (``CaseHooks``), each read once here; a missing hook is its method's default."""

    def __init__(self, module: ModuleType) -> None:
        self.module = cast(CaseModule, module)
        self._configure = _hook(module, "configure")
        self._export_cached = _hook(module, "export_cached")
        self._performance_stage = _hook(module, "performance_stage")
        self._framework_step = _hook(module, "framework_step")
        self._baseline_stage = _hook(module, "baseline_stage")

    @property
    def is_base_tier(self) -> bool:
        """Whether the case defines ``baseline_stage`` (then the pipeline runs only that)."""
        return self._baseline_stage is not None

    def configure(self, config: CaseConfig) -> None:
        """The case's ``configure(config)``; without it, the config as it is."""
        if self._configure is not None:
            self._configure(config)

    def export_cached(self, model: Any, config: CaseConfig) -> tuple[str, dict] | None:
        """The case's own cached export, (path, cache record); None: the framework exports
        through ``export_model`` (tools/artefacts/onnx_export.py)."""
        return None if self._export_cached is None else self._export_cached(model, config)

    def performance_stage(self, engine: Any, model: Any, config: CaseConfig) -> Any | None:
        """The case's own performance report; None: tools/measure/stage.py measures the rows."""
        return None if self._performance_stage is None else self._performance_stage(engine, model, config)

    def framework_step(self, model: Any, config: CaseConfig) -> Step | None:
        """The numeric check's reference: the case's own step, else the framework model run by
        ``common/torch_step.py::make_step``; None without a model (``no_validation``)."""
        if model is None:
            return None
        if self._framework_step is not None:
            return cast(Step, self._framework_step(model, config))
        return make_step(model, config)

    def baseline_stage(self, config: CaseConfig) -> Any:
        """A base-tier case's report (only called when ``is_base_tier``)."""
        if self._baseline_stage is None:
            raise ConfigError("not a base-tier case: no baseline_stage")
        return self._baseline_stage(config)


def case_dir(perf_dir: Path, case: str, framework: str) -> Path:
    """``benchmarks/<case>/<framework's code folder>/`` under ``perf_dir``."""
    return perf_dir / "benchmarks" / case / layout.framework_dir(framework)


def case_module(perf_dir: Path, case: str, framework: str) -> ModuleType:
    """The case package, checked to define every one of ``CASE_FUNCTIONS``."""
    fw = layout.framework_dir(framework)
    if not case_dir(perf_dir, case, framework).is_dir():
        raise ConfigError(f"unknown case '{case}' for framework '{framework}': no benchmarks/{case}/{fw}/")
    module = importlib.import_module(DYNAMIC_IMPORTS["case"].format(case=case, framework=fw))
    missing = [name for name in CASE_FUNCTIONS if not callable(getattr(module, name, None))]
    if missing:
        raise ConfigError(f"benchmarks/{case}/{fw}/__init__.py: missing case function '{missing[0]}'")
    return module


def load_case(perf_dir: Path, case: str, framework: str) -> Case:
    """The case package (``case_module``) with its hooks read: what the pipeline runs."""
    return Case(case_module(perf_dir, case, framework))
