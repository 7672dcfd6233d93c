"""The container side's implementation of ``contract/measuring.py::Measuring``: the measuring
functions a case's hook calls through ``contract.measuring.measuring()``.

Each method hands its arguments, as given, to the one function that does the work (imported when
first called, so that installing this costs nothing and a test that replaces the function in its
module is seen). ``tools/measure/__init__.py`` installs it, so any import of ``tools.measure``
(the pipeline's, before it loads a case) makes it what a case gets.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from contract.config import CaseConfig, CaseView
    from contract.kernels import KernelRate, KernelSettings
    from contract.llm_base import ModelShape
    from contract.llm_workload import PromptSource
    from contract.phase import PhaseResult


class ToolsMeasuring:
    """``contract.measuring.Measuring``, by the functions of tools/measure/ and tools/results/."""

    def timed_forward(
        self,
        step: Callable[[list], Any],
        dataloader: Iterable,
        evaluator: Callable[[list, Any], float] | None,
        config: CaseView,
        phase: str,
    ) -> PhaseResult:
        from tools.measure.loop import timed_forward

        return timed_forward(step, dataloader, evaluator, config, phase=phase)

    def measure_kernel(
        self,
        call: Callable[[], Any],
        work: float,
        settings: KernelSettings,
        sync: Callable[[], None] = lambda: None,
        clock: Callable[[], int] = time.perf_counter_ns,
        contention: Any = None,
    ) -> KernelRate:
        from tools.measure.baseline import measure_kernel

        return measure_kernel(call, work, settings, sync, clock=clock, contention=contention)

    def measure_collective(
        self,
        call: Callable[[], Any],
        work: float,
        settings: KernelSettings,
        agree: Callable[[bool, bool], bool],
        sync: Callable[[], None] = lambda: None,
        clock: Callable[[], int] = time.perf_counter_ns,
        contention: Any = None,
    ) -> KernelRate:
        from tools.measure.baseline import measure_collective

        return measure_collective(call, work, settings, agree, sync, clock=clock, contention=contention)

    def run_llm_stage(
        self,
        engine: Any,
        reference: Any,
        config: CaseConfig,
        shape: ModelShape,
        prompts: PromptSource,
        precision: str,
        eos_ids: tuple[int, ...] = (),
    ) -> Any:
        from tools.measure.llm_stage import run_llm_stage

        return run_llm_stage(engine, reference, config, shape, prompts, precision, eos_ids)

    def run_serving_stage(
        self,
        engine: Any,
        reference: Any,
        config: CaseConfig,
        shape: ModelShape,
        prompts: PromptSource,
        precision: str,
        eos_ids: tuple[int, ...] = (),
    ) -> Any:
        from tools.measure.serving_stage import run_serving_stage

        return run_serving_stage(engine, reference, config, shape, prompts, precision, eos_ids)

    def engine_precision(self, engine: Any, config: CaseConfig) -> str:
        from tools.results.result import engine_precision

        return engine_precision(engine, config)
