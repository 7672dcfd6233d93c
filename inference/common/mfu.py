"""Model FLOPs utilisation (MFU), defined once for both sides.

Terms:
  flops            FLOPs one sample costs (the case config's ``flops``, FlagPerf's key);
  achieved FLOP/s  flops x samples per second (the container writes it as
                   ``achieved_tflops``, in units of 1e12);
  peak             the device's peak FLOP/s at the run's precision, from the vendor's
                   ``analysis_log`` (a number, or a mapping by precision);
  MFU              achieved FLOP/s / peak. Several hosts running one case together:
                   the sum of their achieved FLOP/s over the sum of their peaks.
An MFU above 1 is impossible, so it is never shown: ``plausible_mfu`` turns it
into a note saying which figure is wrong.
"""

from __future__ import annotations

from typing import Any


def achieved_flops(flops: Any, qps: Any) -> float | None:
    """FLOP per second: ``flops`` per sample x ``qps`` samples per second; None when either is unknown or zero."""
    if not (flops and qps):
        return None
    return flops * qps


def peak_for(peak: Any, precision: str | None) -> float | None:
    """The peak FLOP/s that applies: ``peak`` itself when it is a number, its entry for
    ``precision`` (any case) when it is a mapping by precision; else None."""
    if isinstance(peak, (int, float)) and not isinstance(peak, bool):
        return float(peak)
    if isinstance(peak, dict) and precision:
        value = peak.get(precision.lower())
        return float(value) if isinstance(value, (int, float)) else None
    return None


def mfu(flops: Any, qps: Any, peak_flops: float | None) -> float | None:
    """Achieved FLOP/s over ``peak_flops``; None when any of the three is unknown or zero."""
    achieved = achieved_flops(flops, qps)
    if achieved is None or not peak_flops:
        return None
    return achieved / peak_flops


def pooled_mfu(flops: Any, qps: Any, peaks: list[Any]) -> float | None:
    """The MFU of several hosts serving ``qps`` together: achieved FLOP/s over the sum
    of their peaks; None when a host's peak is unknown."""
    if not peaks or any(not peak for peak in peaks):
        return None
    return mfu(flops, qps, sum(peaks))


def plausible_mfu(
    value: float | None, estimate: bool | None, measured: str | None = None
) -> tuple[float | None, str | None]:
    """``(MFU, note)``: an MFU above 100 % is impossible, since the peak (or ``flops``) is wrong,
    so it becomes ``(None, why)``. ``measured``: the peak is a measured baseline (its description,
    utils/results/baselines.py), which a case cannot beat unless the baseline itself is wrong."""
    if value is None or value <= 1.0:
        return value, None
    if measured:
        why = (
            "the baseline is wrong (measured under load or with fewer threads) or flops is; run run.py --cases base "
            "again"
        )
        return None, f"{value:.0%} of the {measured}: {why}"
    if estimate:
        return None, f"{value:.0%} of the estimated peak: the estimate is too low (a nominal clock below the real one)"
    return None, f"{value:.0%} of the peak: flops or the peak FLOPS is wrong"
