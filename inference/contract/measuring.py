"""What a case may call while it measures: the framework's measuring functions, declared here
and installed by the container side, so that a case imports only the floor.

A case's hook runs one of the framework's measurements in place of the default: a model case's
``model_forward`` / ``engine_forward`` times its step with ``timed_forward`` (FlagPerf's
``model_forward(model, dataloader, evaluator, config)`` keeps its signature), a base-tier case's
``baseline_stage`` times its kernels with ``measure_kernel`` / ``measure_collective``, an LLM
case's ``performance_stage`` runs ``run_llm_stage`` or ``run_serving_stage``. The functions live
in ``tools/measure/`` (the container side, above the contract in the house), so the contract
declares them as a protocol, ``Measuring``, and the container side installs its implementation
(``tools/measure/__init__.py``, imported by the pipeline before it loads a case: any import of
``tools.measure`` installs it). A case reaches it through one accessor::

    from contract.measuring import measuring

    def model_forward(model, dataloader, evaluator, config):
        return measuring().timed_forward(make_step(model, config), dataloader, evaluator, config, "validation")

Called where nothing installed it (a case imported by itself, outside the framework), the
accessor raises one EngineError line saying so. The records the functions take and give are
the contract's too: ``PhaseResult`` (``contract/phase.py``), ``KernelSettings`` and
``KernelRate`` (``contract/kernels.py``), ``LLMWorkload`` and ``PromptSource``
(``contract/llm_workload.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from common.errors import EngineError

if TYPE_CHECKING:
    from contract.config import CaseConfig, CaseView
    from contract.kernels import KernelRate, KernelSettings
    from contract.llm_base import ModelShape
    from contract.llm_workload import PromptSource
    from contract.phase import PhaseResult


class Measuring(Protocol):
    """The framework's measuring functions a case's hook may call (tools/measure/services.py
    implements them; each method's documentation is its implementation's)."""

    def timed_forward(
        self,
        step: Callable[[list], Any],
        dataloader: Iterable,
        evaluator: Callable[[list, Any], float] | None,
        config: CaseView,
        phase: str,
    ) -> PhaseResult:
        """One phase (``validation``, ``inference``) of ``step`` over the data, measured until precise
        (tools/measure/loop.py::timed_forward)."""
        ...

    def measure_kernel(
        self,
        call: Callable[[], Any],
        work: float,
        settings: KernelSettings,
        sync: Callable[[], None] = ...,
        clock: Callable[[], int] = ...,
        contention: Any = None,
    ) -> KernelRate:
        """A kernel's rate, measured until precise (tools/measure/baseline.py::measure_kernel)."""
        ...

    def measure_collective(
        self,
        call: Callable[[], Any],
        work: float,
        settings: KernelSettings,
        agree: Callable[[bool, bool], bool],
        sync: Callable[[], None] = ...,
        clock: Callable[[], int] = ...,
        contention: Any = None,
    ) -> KernelRate:
        """A collective's rate, every rank making the same calls (tools/measure/baseline.py::measure_collective)."""
        ...

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
        """An LLM engine's checks, table and server rows: the performance report
        (tools/measure/llm_stage.py::run_llm_stage)."""
        ...

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
        """A served LLM's greedy check and load steps over HTTP: the performance report
        (tools/measure/serving_stage.py::run_serving_stage)."""
        ...

    def engine_precision(self, engine: Any, config: CaseConfig) -> str:
        """The precision the engine actually ran, its own word first (tools/results/result.py)."""
        ...


_installed: list[Measuring] = []  # at most one: the container side's


def install(implementation: Measuring) -> None:
    """Make ``implementation`` what ``measuring()`` gives (the container side, once; a second
    install replaces the first)."""
    _installed[:] = [implementation]


def measuring() -> Measuring:
    """The installed measuring functions; an EngineError where the container side installed none."""
    if not _installed:
        raise EngineError(
            "contract.measuring: no measuring functions installed: a case measures inside the framework "
            "(run_inference.py, or import tools.measure first)"
        )
    return _installed[0]
