"""What a vendor's ``analysis_log`` reports, in one typed shape.

``docker_images/<vendor>/<vendor>_analysis.py`` defines ``analysis_log(path)`` over its
monitor's output. Three return shapes are in use, and ``VendorAnalysis.from_return`` is the
one place that reads them:

- InferPerf's ``(max_mem_used_GiB, total_mem_GiB, peak_flops)``, the peak one number or a
  peak per precision ``{"fp32": ..., "fp16": ...}`` (or None: MFU n/a);
- FlagPerf's spec (§4.1.3) ``(max_mem_used, total_mem)``: no peak;
- FlagPerf's code ``(max_mem_used, total_mem, fp32_peak, fp16_peak)``: a peak per precision.

A vendor may also return a ``VendorAnalysis`` itself (it is InferPerf's three-tuple).
"""

from __future__ import annotations

from typing import Any, NamedTuple

Peak = float | dict[str, float] | None


class VendorAnalysis(NamedTuple):
    """Memory used and available on the device, in GiB, and its peak FLOPS."""

    max_mem_used_gib: float | None
    total_mem_gib: float | None
    peak_flops: Peak

    @classmethod
    def from_return(cls, value: Any) -> VendorAnalysis:
        """``analysis_log``'s return in any of the three shapes; ValueError(reason) for anything else."""
        if isinstance(value, (tuple, list)) and len(value) == 2:
            return cls(value[0], value[1], None)
        if isinstance(value, (tuple, list)) and len(value) == 4:
            return cls(value[0], value[1], {"fp32": value[2], "fp16": value[3]})
        if isinstance(value, tuple) and len(value) == 3:
            return cls(*value)
        raise ValueError(
            "analysis_log must return (max_mem_used_GiB, total_mem_GiB, peak_flops), or FlagPerf's "
            f"(max_mem_used, total_mem) or (max_mem_used, total_mem, fp32_peak, fp16_peak), got {value!r:.80}"
        )


NO_ANALYSIS = VendorAnalysis(None, None, None)
