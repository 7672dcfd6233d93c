"""report.html's roofline: the measured compute and bandwidth roofs, and each case at its
arithmetic intensity, so a reader sees which cases are compute-bound and which memory-bound.

Roofs (Williams, Waterman and Patterson, "Roofline", CACM 2009): attainable FLOP/s at
intensity I = min(compute peak, bandwidth x I). The compute peaks are the base tier's
measured GEMM figures per dtype and the bandwidth its STREAM triad (else copy): from this
run's base cases, else from the measured peaks cached for the host's fingerprint
(utils/results/baselines.py). Nothing is drawn without a measured roof: a roofline of
estimates would only restate the estimate.

A case's point: x = its intensity, FLOP per byte, taken as ``flops`` x batch size over the
model's weight bytes (the ONNX file, ``engine.onnx_bytes``) read once per batch call. That
ignores activations and any re-reading, so it is an upper bound of the true intensity: a
point left of the ridge is memory-bound whatever the activations add. y = the achieved
FLOP/s (``flops`` x core qps).
"""

from __future__ import annotations

from pathlib import Path

from common.record import CaseResult, RecordError, read_result
from common.summary_record import SummaryRecord
from utils.results.baselines import MeasuredPeaks, format_rate, is_imprecise
from utils.results.report.charts import COLOURS, HEIGHT, axis, figure_layout

WIDTH = 720


def _result(record: SummaryRecord) -> CaseResult | None:
    log_dir = record.log_dir
    try:
        return read_result(log_dir) if log_dir else None
    except RecordError:
        return None  # the report's case section says why


def roofs(records: list[SummaryRecord], vendor: str) -> tuple[dict[str, float], float | None, str]:
    """(compute peak by dtype, bandwidth in B/s, where they come from)."""
    compute: dict[str, float] = {}
    bandwidth: dict[str, float] = {}
    for record in records:
        for found in (record.baseline or {}).get("figures") or []:
            if not found.get("verdict", {}).get("valid") or not isinstance(found.get("value"), (int, float)):
                continue
            if found.get("kind") == "compute":
                compute[found["dtype"]] = max(compute.get(found["dtype"], 0.0), found["value"])
            elif found.get("kind") == "bandwidth":
                bandwidth[found["kernel"]] = max(bandwidth.get(found["kernel"], 0.0), found["value"])
    source = "this run's base cases"
    imprecise: list[str] = []
    if not compute or not bandwidth:
        for record in records:
            result = _result(record)
            peaks = MeasuredPeaks.near(Path(record.log_dir)) if record.log_dir else None
            if result is None or peaks is None:
                continue
            cached = peaks.bandwidth(result, vendor) or {}
            found = [(bandwidth, kernel, f"STREAM {kernel}", entry) for kernel, entry in cached.items()]
            for dtype in ("fp32", "bf16", "fp16", "tf32", "int8"):
                entry = peaks.compute_peak(result, vendor, dtype)
                if entry:
                    found.append((compute, dtype, f"{dtype} GEMM", entry))
            for roofs_of, key, name, entry in found:
                if key not in roofs_of:
                    roofs_of[key] = entry["value"]
                    if is_imprecise(entry):
                        imprecise.append(name)
            if compute and bandwidth:
                source = f"the measured peaks cached in {peaks.root}"
                if imprecise:
                    source += f" ({', '.join(imprecise)}: INVALID, not precise enough)"
                break
    memory = bandwidth.get("triad") or bandwidth.get("copy")
    return compute, memory, source


def points(records: list[SummaryRecord]) -> list[dict]:
    """Each successful model case with ``flops``, core qps and weight bytes: its intensity and FLOP/s."""
    found = []
    for record in records:
        flops, qps, batch = record.flops, record.infer_core_qps, record.batchsize
        if not record.succeeded or not (flops and qps and isinstance(batch, int) and batch) or record.aggregate:
            continue
        result = _result(record)
        weights = ((result.engine if result is not None else None) or {}).get("onnx_bytes") or None
        if not weights:
            continue
        found.append(
            {
                "label": f"{record.case} on {record.host}",
                "intensity": flops * batch / weights,
                "flops_per_s": flops * qps,
            }
        )
    return found


def roofline_plot(records: list[SummaryRecord], vendor: str) -> tuple[dict | None, str | None]:
    """(the plotly figure, a note) or (None, why there is none)."""
    compute, memory, source = roofs(records, vendor)
    if not compute or not memory:
        return (
            None,
            "no roofline: no measured compute and bandwidth peaks for this host (run.py --cases base measures them)",
        )
    cases = points(records)
    low = min([0.1] + [p["intensity"] / 3 for p in cases])
    high = max([1000.0] + [p["intensity"] * 3 for p in cases])
    traces = []
    for number, (dtype, peak) in enumerate(sorted(compute.items(), key=lambda item: -item[1])):
        ridge = peak / memory
        xs = [low, ridge, high] if low < ridge < high else [low, high]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{dtype} GEMM {format_rate(peak, 'FLOP/s')}, ridge {ridge:.3g} FLOP/B",
                "x": xs,
                "y": [min(peak, memory * x) for x in xs],
                "line": {"color": COLOURS[number % len(COLOURS)], "width": 2},
                "hoverinfo": "name",
            }
        )
    if cases:
        fp32 = compute.get("fp32") or max(compute.values())
        traces.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": "cases",
                "x": [p["intensity"] for p in cases],
                "y": [p["flops_per_s"] for p in cases],
                "text": [p["label"].split(" on ")[0] for p in cases],
                "textposition": "top center",
                "hovertext": [
                    f"{p['label']}: {p['intensity']:.3g} FLOP/B, {format_rate(p['flops_per_s'], 'FLOP/s')}, "
                    f"{'memory' if p['intensity'] < fp32 / memory else 'compute'}-bound at the fp32 roof"
                    for p in cases
                ],
                "hoverinfo": "text",
                "marker": {"size": 10, "color": "#222", "symbol": "diamond"},
            }
        )
    title = f"Roofline: {format_rate(memory, 'B/s')} STREAM bandwidth roof; roofs from {source}"
    layout = figure_layout(
        title,
        WIDTH,
        HEIGHT + 90,
        xaxis=axis("arithmetic intensity (FLOP per byte of weights read per batch call)", type="log"),
        yaxis=axis("FLOP/s", type="log"),
    )
    note = (
        "Each case's intensity is flops x batch size over its weight bytes (the ONNX file) read once per batch call: "
        "an upper "
        "bound (activations and re-reads are not counted), so a case left of a ridge is memory-bound whatever they add."
    )
    return {"data": traces, "layout": layout}, note


def roofline_section(records: list[SummaryRecord], vendor: str) -> dict | None:
    """A page section holding the roofline (the shape ``sections.case_section`` gives), or None."""
    figure, note = roofline_plot(records, vendor)
    if figure is None:
        return None
    from utils.results.report.section import new_section

    return new_section("Roofline", "roofline", plots=[{"name": "roofline", "figure": figure}], notes=[note])
