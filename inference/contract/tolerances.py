"""The numeric check's limits per precision, and a case config's overrides of them
(``numeric_tolerance``): measurement defaults the case config checks when it is loaded, so they
are on the contract floor; the check itself is ``tools/checks/numeric.py``.
"""

from __future__ import annotations

import math
from typing import Any

TOLERANCE_KEYS = ("max_rel", "mean_rel", "top1_agreement")

# Default limits per precision. fp32 engines (ONNX Runtime, TensorRT fp32) differ
# from PyTorch only by the order of accumulation: ~1e-6 of the RMS typically, so
# 1e-3 / 1e-4 leaves room for deep models while catching a wrong kernel. tf32
# keeps a 10-bit mantissa in matmuls (~5e-4 per product). fp16 (10-bit mantissa,
# narrow range) and bf16 (7-bit mantissa, ~4e-3 per rounding) round every layer.
# int8 and fp8 (e4m3: 3-bit mantissa) are quantised: only gross errors are caught
# by the element figures, and the top-1 agreement carries the check.
DEFAULT_TOLERANCES: dict[str, dict[str, float]] = {
    "fp32": {"max_rel": 1e-3, "mean_rel": 1e-4, "top1_agreement": 0.99},
    "tf32": {"max_rel": 1e-2, "mean_rel": 1e-3, "top1_agreement": 0.99},
    "fp16": {"max_rel": 2e-2, "mean_rel": 5e-3, "top1_agreement": 0.98},
    "bf16": {"max_rel": 5e-2, "mean_rel": 1e-2, "top1_agreement": 0.98},
    "int8": {"max_rel": 2e-1, "mean_rel": 5e-2, "top1_agreement": 0.95},
    "fp8": {"max_rel": 3e-1, "mean_rel": 8e-2, "top1_agreement": 0.93},
}


def _check_limits(values: Any, where: str) -> dict[str, float]:
    if not isinstance(values, dict):
        raise ValueError(f"{where} must be a mapping of {', '.join(TOLERANCE_KEYS)}, got {values!r}")
    checked: dict[str, float] = {}
    for key, value in values.items():
        name = f"{where}.{key}"
        if key not in TOLERANCE_KEYS:
            raise ValueError(f"{name}: unknown tolerance (known: {', '.join(TOLERANCE_KEYS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
        if key == "top1_agreement" and value > 1:
            raise ValueError(f"{name} is a fraction and must be at most 1, got {value!r}")
        checked[key] = float(value)
    return checked


def tolerances_for(precision: str, overrides: dict | None = None) -> dict[str, float]:
    """The limits for ``precision``: the defaults, updated by the config key ``numeric_tolerance``.

    ``overrides`` is either flat (``{"max_rel": 1e-2}``, applied to this
    precision) or per precision (``{"fp16": {"max_rel": 5e-2}, "fp32": {...}}``,
    of which only this precision's entry applies). Unknown keys and values that
    are not positive numbers raise ValueError naming the key.
    """
    key = str(precision).lower()
    if key not in DEFAULT_TOLERANCES:
        raise ValueError(
            f"precision {precision!r}: no numeric tolerance known (known: {', '.join(DEFAULT_TOLERANCES)})"
        )
    limits = dict(DEFAULT_TOLERANCES[key])
    if overrides is None:
        return limits
    if not isinstance(overrides, dict):
        raise ValueError(f"numeric_tolerance must be a mapping, got {overrides!r}")
    flat = [k for k in overrides if k in TOLERANCE_KEYS]
    nested = [k for k in overrides if k in DEFAULT_TOLERANCES]
    if flat and nested:
        raise ValueError(
            f"numeric_tolerance.{flat[0]}: mixes flat limits with per-precision ones ({nested[0]}); use one form"
        )
    if flat:
        limits.update(_check_limits(overrides, "numeric_tolerance"))
        return limits
    for name, values in overrides.items():
        if name not in DEFAULT_TOLERANCES:
            raise ValueError(
                f"numeric_tolerance.{name}: unknown key (use {', '.join(TOLERANCE_KEYS)} or a precision: "
                f"{', '.join(DEFAULT_TOLERANCES)})"
            )
        checked = _check_limits(values, f"numeric_tolerance.{name}")
        if name == key:
            limits.update(checked)
    return limits
