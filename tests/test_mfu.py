"""common/mfu.py: MFU's one definition, used by result.json (achieved_tflops), summary.json
(per host and per row) and the multi-host aggregate."""

from __future__ import annotations

import pytest

from common.mfu import achieved_flops, mfu, peak_for, plausible_mfu, pooled_mfu


def test_achieved_flops_is_flops_times_qps_and_none_when_either_is_missing_or_zero():
    assert achieved_flops(2e9, 25.0) == 5e10
    assert achieved_flops(3, 7) == 21
    for flops, qps in ((None, 25.0), (0, 25.0), (2e9, None), (2e9, 0), (0.0, 0.0)):
        assert achieved_flops(flops, qps) is None


def test_peak_for_a_number_or_a_mapping_by_precision():
    assert peak_for(4e12, None) == 4e12 and isinstance(peak_for(4, "fp32"), float)
    assert peak_for({"fp32": 1e12, "fp16": 2e12}, "FP16") == 2e12
    assert peak_for({"fp32": 1e12, "estimate": True}, "fp32") == 1e12
    assert peak_for({"fp32": 1e12}, "fp16") is None  # no peak at that precision
    assert peak_for({"fp32": "fast"}, "fp32") is None
    assert peak_for({"fp32": 1e12}, None) is None
    assert peak_for({"fp32": 1e12}, "") is None
    assert peak_for(True, "fp32") is None  # a bool is not a peak
    assert peak_for(None, "fp32") is None
    assert peak_for("1e12", "fp32") is None


def test_mfu_divides_achieved_by_the_peak():
    assert mfu(2e9, 25.0, 1e12) == pytest.approx(0.05)
    assert mfu(2e9, 25.0, 5e10) == 1.0
    for args in ((None, 25.0, 1e12), (2e9, 0, 1e12), (2e9, 25.0, None), (2e9, 25.0, 0.0)):
        assert mfu(*args) is None


def test_pooled_mfu_sums_the_peaks_and_needs_every_one():
    assert pooled_mfu(2e9, 50.0, [1e12, 1e12]) == pytest.approx(0.05)
    assert pooled_mfu(2e9, 50.0, [4e11, 1e11]) == pytest.approx(0.2)
    assert pooled_mfu(2e9, 50.0, [1e12, None]) is None
    assert pooled_mfu(2e9, 50.0, [1e12, 0.0]) is None
    assert pooled_mfu(2e9, 50.0, []) is None
    assert pooled_mfu(None, 50.0, [1e12, 1e12]) is None
    assert pooled_mfu(2e9, None, [1e12, 1e12]) is None


def test_plausible_mfu_keeps_up_to_one_and_explains_above():
    assert plausible_mfu(None, True) == (None, None)
    assert plausible_mfu(0.25, None) == (0.25, None)
    assert plausible_mfu(1.0, False) == (1.0, None)
    assert plausible_mfu(1.5, True) == (
        None,
        "150% of the estimated peak: the estimate is too low (a nominal clock below the real one)",
    )
    assert plausible_mfu(1.5, False) == (None, "150% of the peak: flops or the peak FLOPS is wrong")
    assert plausible_mfu(1.5, None) == (None, "150% of the peak: flops or the peak FLOPS is wrong")
