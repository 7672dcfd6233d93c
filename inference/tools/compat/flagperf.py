"""FlagPerf's case conventions, accepted next to InferPerf's own (docs/flagperf_migration.md).

Terms:
  case-timed phase  a ``model_forward``/``engine_forward`` that times itself and
                    returns FlagPerf's ``(whole_qps, core_qps, acc)`` instead of
                    ``tools.measure.loop.timed_forward``'s PhaseResult. Its throughputs
                    are reported as the case computed them; it has no per-query
                    latencies, so those fields are null and the verdict says why.
  static batch      an engine built for exactly ``batch_size`` samples per call
                    (FlagPerf's ``has_dynamic_axis: false``): the ONNX export has
                    a fixed batch axis and the partial last batch is dropped, as
                    FlagPerf's loaders do (``drop_last``).
"""

from __future__ import annotations

import numbers
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from common.errors import EngineError
from contract.phase import PhaseResult, Verdict
from tools.compat.loader_view import LoaderView

if TYPE_CHECKING:
    pass

CASE_TIMED_REASON = (
    "timing defined by the case (FlagPerf style): no per-query latencies, so percentiles, minimums and stability "
    "cannot be judged"
)


@dataclass
class CaseTimedPhase(PhaseResult):
    """A phase the case timed itself: only its two throughputs and accuracy are known."""

    reported_whole_qps: float | None = None
    reported_core_qps: float | None = None

    @property
    def whole_qps(self) -> float | None:
        return self.reported_whole_qps

    @property
    def core_qps(self) -> float | None:
        return self.reported_core_qps


def _number(value: Any) -> float | None:
    """A float from a Python/NumPy number or a one-element tensor; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError("a bool is not a number")
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)
    size = getattr(value, "size", None)
    numel = size if isinstance(size, int) else (value.numel() if hasattr(value, "numel") else None)
    if callable(item) and numel == 1:
        return float(item())
    raise TypeError(f"{type(value).__name__} is not a number")


def is_flagperf_triple(value: Any) -> bool:
    """True for FlagPerf's ``(whole_qps, core_qps, acc)``: three numbers (acc may be None)."""
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        return False
    try:
        whole, core, _ = (_number(v) for v in value)
    except (TypeError, ValueError):
        return False
    return whole is not None and core is not None


def case_timed_phase(value: Any, phase: str) -> CaseTimedPhase:
    """FlagPerf's ``(whole_qps, core_qps, acc)`` as a phase record; latency and counts are null."""
    whole, core, acc = (_number(v) for v in value)
    return CaseTimedPhase(
        phase=phase,
        accuracy=acc,
        latency=None,
        verdict=Verdict([CASE_TIMED_REASON]),
        reported_whole_qps=whole,
        reported_core_qps=core,
        **_NOT_COUNTED,
    )


# What a case-timed phase does not know, written as null. PhaseResult (tools/measure/loop.py)
# declares these as numbers, since the framework's own loop always counts them; until it
# declares them Optional, they are passed as one untyped mapping rather than as None
# arguments the type checker would refuse.
_NOT_COUNTED: dict[str, Any] = dict.fromkeys(
    ("samples", "batches", "whole_time_s", "core_time_s", "foo_time_s", "warmup_batches", "passes")
)


def adopt_export(returned: Any, target: Path, case: str) -> None:
    """A FlagPerf ``export_model`` wrote the ONNX file where it chose and returned that path:
    put its bytes at ``target`` (the framework's temporary cache path). The case's own file
    stays where it is, because other vendors' ``exist_onnx_path`` may name it."""
    source = Path(str(returned))
    if not source.is_file():
        raise EngineError(f"benchmarks/{case}: export_model returned {returned}, which is not a file")
    if source.stat().st_size == 0:
        raise EngineError(f"benchmarks/{case}: export_model returned {returned}, which is empty")
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)  # no copy when both live on one file system
    except OSError:
        shutil.copyfile(source, target)


def onnx_static_batch(path: str | None) -> int | None:
    """The fixed batch size of an ONNX file's first input, or None when it is dynamic or unreadable."""
    if not path or not Path(path).is_file():
        return None
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        dims = model.graph.input[0].type.tensor_type.shape.dim
    except Exception:  # an unreadable file is the engine's to report, not this probe's
        return None
    return int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None


class DropPartialBatches(LoaderView):
    """A data loader view that yields only full batches of ``batch_size`` (FlagPerf's ``drop_last``).

    It keeps the attributes the framework reads (``dataset``, ``batch_size``) and
    says ``drop_last = True`` so no warm-up is spent on a tail batch.
    """

    drop_last = True

    def __init__(self, loader: Any, batch_size: int) -> None:
        super().__init__(loader)
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self.loader.dataset) // self.batch_size

    def __iter__(self) -> Iterator:
        from tools.measure.loop import as_input_list

        for x, y in self.loader:
            first = as_input_list(x)[0]
            if len(first) == self.batch_size:
                yield x, y
