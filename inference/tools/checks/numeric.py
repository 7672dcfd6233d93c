"""Numeric check: do the vendor engine's outputs match the framework's on the same inputs?

ByteMLPerf's ``test_numeric`` divides each element's difference by that
element's reference value, so an output with values near zero reports relative
differences of 1e6 for an error nobody would notice. Here every difference is
divided by the **scale** of the reference tensor instead:

  scale    = root-mean-square of the (finite) reference values, at least ``TINY``.
             RMS rather than the maximum because one outlier logit must not hide
             errors in the rest, and rather than the mean absolute value because
             it is what a signal-to-noise ratio is measured against;
  max_rel  = max |actual - reference| / scale;
  mean_rel = mean |actual - reference| / scale;
  top1_agreement = for a 2-D ``[batch, classes > 1]`` floating output, the
             fraction of rows whose argmax is the same in both (classifiers).

Both relative figures are reported as exactly 0 when the tensors are equal, so
an all-zero reference compared with an all-zero output passes; an all-zero
reference compared with anything else fails (its scale is ``TINY``).
Everything is compared in float64, on CPU. Reference positions that are NaN or
infinite are left out of the figures (the framework itself produced no number
there); a NaN or infinity in the engine's output where the framework's value is
finite fails the check.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# The normaliser's floor: the smallest positive normal float64.
TINY = 2.2250738585072014e-308


@dataclass
class TensorDiff:
    """How one output differs, aggregated over every compared batch."""

    name: str  # "output0", "output1", ... (position in the output list)
    shape: list[int]  # the reference shape in the first compared batch
    max_abs: float  # largest |actual - reference|
    mean_abs: float  # mean |actual - reference| over all compared elements
    scale: float  # RMS of the reference over all compared elements, at least TINY
    max_rel: float  # max_abs / scale (0 when the tensors are equal)
    mean_rel: float  # mean_abs / scale (0 when the tensors are equal)
    top1_agreement: float | None  # classifiers (2-D [batch, classes > 1] floating output) only


@dataclass
class NumericReport:
    precision: str
    tolerances: dict[str, float]
    batches: int  # batches compared (the smaller count if the two disagree)
    samples: int  # samples in those batches (axis 0 of the first reference output)
    outputs: list[TensorDiff]  # each output compared in at least one batch
    passed: bool
    reasons: list[str] = field(default_factory=list)  # one sentence each; empty when passed

    def to_dict(self) -> dict:
        return asdict(self)


class _Accumulator:
    """Running sums for one output over batches (float64 scalars)."""

    def __init__(self, shape: list[int]):
        self.shape = shape
        self.max_abs = 0.0
        self.sum_abs = 0.0
        self.sum_sq_ref = 0.0
        self.count = 0
        self.rows = 0
        self.rows_agree = 0
        self.classifier = True

    def finish(self, name: str) -> TensorDiff:
        rms = math.sqrt(self.sum_sq_ref / self.count) if self.count else 0.0
        scale = max(rms, TINY)
        mean_abs = self.sum_abs / self.count if self.count else 0.0
        equal = self.max_abs == 0.0
        return TensorDiff(
            name=name,
            shape=list(self.shape),
            max_abs=self.max_abs,
            mean_abs=mean_abs,
            scale=scale,
            max_rel=0.0 if equal else self.max_abs / scale,
            mean_rel=0.0 if equal else mean_abs / scale,
            top1_agreement=(self.rows_agree / self.rows) if (self.classifier and self.rows) else None,
        )


def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _tensor(x: Any):
    import torch

    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    return t.detach().cpu()


def _samples_in(batch: list) -> int:
    if not batch:
        return 0
    first = _tensor(batch[0])
    return int(first.shape[0]) if first.dim() > 0 else 1


class _Reasons:
    """Reasons keyed by what went wrong, each kept once with the number of batches it happened in."""

    def __init__(self) -> None:
        self._items: dict[tuple, list] = {}

    def add(self, key: tuple, text: str) -> None:
        if key in self._items:
            self._items[key][1] += 1
        else:
            self._items[key] = [text, 1]

    def render(self, batches: int) -> list[str]:
        out = []
        for text, count in self._items.values():
            out.append(text if batches <= 1 else f"{text} (in {count} of {batches} batches)")
        return out


class _Comparison:
    """The running state of one ``compare_outputs`` call: the per-output sums and the reasons found so far."""

    def __init__(self, label: str, against: str):
        self.label, self.against = label, against
        self.structural = _Reasons()
        self.nonfinite = _Reasons()
        self.accs: dict[int, _Accumulator] = {}
        self.samples = 0

    def add_batch(self, ref_batch: list, act_batch: list) -> None:
        """One batch: its output count and shapes checked, each comparable output added to its sums."""
        label, against = self.label, self.against
        self.samples += _samples_in(ref_batch)
        if len(ref_batch) != len(act_batch):
            self.structural.add(
                ("count", len(ref_batch), len(act_batch)),
                f"{label}: the engine returned {len(act_batch)} outputs, {against} {len(ref_batch)}",
            )
        for i in range(min(len(ref_batch), len(act_batch))):
            name = f"output{i}"
            ref, act = _tensor(ref_batch[i]), _tensor(act_batch[i])
            if tuple(ref.shape) != tuple(act.shape):
                self.structural.add(
                    ("shape", i, tuple(ref.shape), tuple(act.shape)),
                    f"{label}: {name} has shape {list(act.shape)} but {against}'s has {list(ref.shape)}",
                )
                continue
            acc = self.accs.setdefault(i, _Accumulator(list(ref.shape)))
            if _add_output(acc, ref, act):
                self.nonfinite.add(
                    ("nonfinite", i),
                    f"{label}: {name} has NaN or infinite values where {against}'s are finite",
                )

    def limit_reasons(self, d: TensorDiff, tolerances: dict[str, float], precision: str) -> list[str]:
        """Why one output's figures fail ``tolerances``; empty when they pass."""
        label, against = self.label, self.against
        where = f"at {precision}"
        max_limit = tolerances.get("max_rel")
        mean_limit = tolerances.get("mean_rel")
        top1_limit = tolerances.get("top1_agreement")
        if d.scale == TINY and d.max_abs > 0:
            return [f"{label}: {d.name} of {against} is all zeros but the engine's differs by up to {d.max_abs:.1e}"]
        reasons = []
        if max_limit is not None and d.max_rel > max_limit:
            reasons.append(
                f"{label}: {d.name} differs from {against} by {d.max_rel:.1e} of its RMS (limit {max_limit:.1e} "
                f"{where})"
            )
        if mean_limit is not None and d.mean_rel > mean_limit:
            reasons.append(
                f"{label}: {d.name} differs from {against} by {d.mean_rel:.1e} of its RMS on average (limit "
                f"{mean_limit:.1e} {where})"
            )
        if top1_limit is not None and d.top1_agreement is not None and d.top1_agreement < top1_limit:
            reasons.append(
                f"{label}: {d.name}'s top-1 class agrees with {against} on {d.top1_agreement:.1%} of samples (limit "
                f"{top1_limit:.1%} {where})"
            )
        return reasons


def _add_output(acc: _Accumulator, ref: Any, act: Any) -> bool:
    """Add one output of one batch (same shapes) to ``acc``, in float64; True when the engine
    has NaN or infinity where the reference is finite (those positions are left out)."""
    import torch

    r = ref.to(torch.float64).reshape(-1)
    a = act.to(torch.float64).reshape(-1)
    ref_ok = torch.isfinite(r)
    act_ok = torch.isfinite(a)
    bad = int((ref_ok & ~act_ok).sum())
    both = ref_ok & act_ok
    r_f, a_f = r[both], a[both]
    if r_f.numel():
        diff = (a_f - r_f).abs()
        acc.max_abs = max(acc.max_abs, float(diff.max()))
        acc.sum_abs += float(diff.sum())
        acc.sum_sq_ref += float((r_f * r_f).sum())
        acc.count += int(r_f.numel())
    is_classifier = ref.is_floating_point() and ref.dim() == 2 and ref.shape[1] > 1
    if not is_classifier:
        acc.classifier = False
    elif acc.classifier:
        ref_top = ref.to(torch.float64).argmax(dim=1)
        act_top = act.to(torch.float64).nan_to_num(nan=-math.inf).argmax(dim=1)
        acc.rows += int(ref.shape[0])
        acc.rows_agree += int((ref_top == act_top).sum())
    return bool(bad)


def compare_outputs(
    reference: list[list],
    actual: list[list],
    precision: str,
    tolerances: dict[str, float],
    *,
    label: str = "numeric check",
    against: str = "the framework",
) -> NumericReport:
    """Compare the engine's outputs ``actual[b]`` with the framework's ``reference[b]``, batch by batch.

    Never raises for a mismatch: a different number of batches or outputs, a
    different shape, or NaN/Inf where the reference is finite give a failed
    report whose reasons say so. ``label`` and ``against`` only word the reasons
    (the accuracy-in-performance-mode audit compares with accuracy mode).
    """
    comparison = _Comparison(label, against)
    reasons: list[str] = []
    n_batches = min(len(reference), len(actual))
    if len(reference) != len(actual):
        reasons.append(f"{label}: {against} gave {len(reference)} batches of outputs, the engine {len(actual)}")
    for b in range(n_batches):
        comparison.add_batch(_as_list(reference[b]), _as_list(actual[b]))
    reasons += comparison.structural.render(n_batches) + comparison.nonfinite.render(n_batches)
    if n_batches == 0:
        reasons.append(f"{label}: there were no outputs to compare")
    diffs = [comparison.accs[i].finish(f"output{i}") for i in sorted(comparison.accs)]
    for d in diffs:
        reasons += comparison.limit_reasons(d, tolerances, precision)
    return NumericReport(
        precision=precision,
        tolerances=dict(tolerances),
        batches=n_batches,
        samples=comparison.samples,
        outputs=diffs,
        passed=not reasons,
        reasons=reasons,
    )
