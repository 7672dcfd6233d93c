"""Exact intervals for the rates the benches quote: a binomial share k/n and a Poisson count per points."""

from __future__ import annotations


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial rate k/n."""
    from scipy.stats import beta

    if n == 0:
        return 0.0, 1.0
    alpha = 1 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def rate(k: int, n: int) -> str:
    """``3/40 = 7.5 % [1.6, 20.4]``: the share with its exact 95 % interval, in percent."""
    low, high = clopper_pearson(k, n)
    share = k / n if n else float("nan")
    return f"{k}/{n} = {share:.1%} [{low * 100:.1f}, {high * 100:.1f}]"


def poisson_per(k: int, exposure: float, per: float = 100.0, confidence: float = 0.95) -> str:
    """``2 in 640 points = 0.31 per 100 [0.04, 1.13]``: an exact (Garwood) interval of a count's rate."""
    from scipy.stats import chi2

    alpha = 1 - confidence
    low = 0.0 if k == 0 else float(chi2.ppf(alpha / 2, 2 * k)) / 2
    high = float(chi2.ppf(1 - alpha / 2, 2 * k + 2)) / 2
    scale = per / exposure if exposure else float("nan")
    return f"{k} in {exposure:g} points = {k * scale:.2f} per {per:g} [{low * scale:.2f}, {high * scale:.2f}]"
