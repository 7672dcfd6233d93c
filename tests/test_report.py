"""report.html (self-contained, every plot present with its plotly spec, renders in a real browser) and multi-host
aggregation.

The runs are synthetic: ``make_run`` writes what run.py and run_inference.py
write (summary.json; per case and host result.json, latencies.npz and the
monitors' JSON lines) from seeded random latencies, so every figure is known.
"""

from __future__ import annotations

import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from common.record import CaseResult, LatencyBlock, Verdict, read_latencies, write_latencies
from common.stats import LatencyStats
from common.summary_record import SummaryRecord, SummaryRow
from tests.infra.browser import browser_args, chromium_or_skip, probe_page
from tests.infra.summary_records import typed_row
from tests.measure_config import CHEAP_SET
from tests.result_records import case_result, performance_row, phase_block, write_result
from utils.results.aggregate import aggregate_records, with_aggregates
from utils.results.report import decimate, ecdf_points, pareto_front, phase_spans, plotly_js, script_json, write_report
from utils.results.summary import write_summary

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
T0 = 1_800_000_000.0
PLOTS = {
    "throughput vs batch size",
    "latency distribution",
    "throughput-latency frontier",
    "monitor timeline",
    "top ops",
}


def latencies_ns(seed: int, n: int, median_ms: float) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(v) for v in rng.lognormal(np.log(median_ms * 1e6), 0.25, n)]


def make_run(
    root: Path,
    name: str,
    hosts=("10.0.0.1",),
    scale: float = 1.0,
    case: str = "digits",
    seed: int = 0,
    rows=((1, "offline", 1), (4, "offline", 1), (16, "offline", 1)),
    status: str = "success",
    ops: list[dict] | None = None,
) -> Path:
    """A finished run directory; host i's latencies are ``scale`` x (1 + i) times the base ones."""
    run_dir = root / name
    records = []
    for rank, host in enumerate(hosts):
        log_dir = run_dir / f"{case}:pytorch" / f"{host}_noderank{rank}"
        log_dir.mkdir(parents=True)
        factor = scale * (1 + rank)
        raw = {"inference": latencies_ns(seed + 10 * rank, 800, 2.0 * factor)}
        perf = []
        for i, (bs, scenario, clients) in enumerate(rows):
            values = latencies_ns(seed + 10 * rank + i + 1, 700, (0.5 + 0.2 * bs) * factor)
            raw[f"performance_{i}"] = values
            qps = bs * 1e9 / float(np.mean(values))
            stats = LatencyStats.from_ns(values)
            perf.append(
                typed_row(
                    bs,
                    scenario,
                    clients,
                    qps=qps,
                    queries=700,
                    samples=700 * bs,
                    duration_s=1.0,
                    latency_ms=LatencyBlock(**{k: getattr(stats, k) for k in ("p50", "p90", "p99", "p99_9", "mean")}),
                    latency_notes=stats.notes,
                    window_qps=[qps * (1 + 0.01 * ((w * 7) % 5 - 2)) for w in range(10)],
                    started_at_unix=T0 + 5 + i,
                    finished_at_unix=T0 + 5.8 + i,
                    accuracy_in_performance_mode={
                        "name": "accuracy_in_performance_mode",
                        "passed": True,
                        "detail": "all match",
                    },
                    verdict=Verdict(() if i != 1 else ("throughput not stable: synthetic",)),
                )
            )
        inference_stats = LatencyStats.from_ns(raw["inference"])
        core_qps = 16 * 1e9 / float(np.mean(raw["inference"]))
        result = {  # a complete result.json: the recorded digits result (tests/result_records.py) with these keys
            "case": case,
            "framework": "pytorch",
            "precision": "fp32",
            "inference": phase_block("inference", samples=800 * 16, started_at_unix=T0 + 2, finished_at_unix=T0 + 4),
            "validation": phase_block(
                "validation", samples=800 * 16, started_at_unix=T0 + 0.5, finished_at_unix=T0 + 1.5
            ),
            "performance": [row.to_json() for row in perf],
            "best": None,
            "numeric": {"passed": True, "samples": 32, "reasons": [], "outputs": [{"max_rel": 5e-7}]},
            "audits": [{"name": "anti_caching", "passed": True, "detail": "1.01x"}],
            "engine": {
                "version": "onnxruntime 1.31.1",
                "compile_report": {
                    "compile_status": "success",
                    "compile_precision": "FP32",
                    "compile_duration": 0.01,
                    "sg_percent": 87.5,
                    "node_count": 8,
                    "fallback_ops": ["NonZero"],
                    "segments": [{"is_fallback": False}, {"is_fallback": True}],
                },
                "performance_data": ops
                if ops is not None
                else [
                    {
                        "node": f"n{k}",
                        "op_type": "Conv",
                        "calls": 5,
                        "mean_ms": 1.0 / (k + 1),
                        "total_ms": 5.0 / (k + 1),
                    }
                    for k in range(4)
                ],
            },
            "env": {"hostname": host, "cpu_model": "AMD EPYC", "packages": {"onnxruntime": "1.31.1"}},
        }
        write_result(log_dir, result)
        write_latencies(log_dir / "latencies.npz", raw)
        sys_lines = [
            {
                "timestamp": T0 + t,
                "cpu_percent": 50.0 + t,
                "mem_used_gib": 1.0 + 0.1 * t,
                "mem_total_gib": 16.0,
                "power_w": None,
            }
            for t in range(10)
        ]
        (log_dir / "sys_monitor.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sys_lines))
        (log_dir / "cpu_monitor.jsonl").write_text(
            "".join(
                json.dumps({"timestamp": T0 + t, "utilization": 40.0, "mem_used_gib": 1.2}) + "\n" for t in range(10)
            )
        )
        records.append(
            SummaryRecord(
                case=case,
                framework="pytorch",
                host=host,
                noderank=rank,
                status=status,
                failed_step=None if status == "success" else "engine_inference",
                error=None if status == "success" else "boom",
                wall_time_s=10.0,
                log_dir=str(log_dir),
                vendor="cpu",
                compiler="onnxruntime",
                precision="fp32",
                batchsize=16,
                flops=1e6,
                e2e_time_s=10.0,
                val_whole_qps=900.0,
                val_core_qps=1000.0,
                infer_whole_qps=1234.5678,
                infer_core_qps=core_qps,
                val_average_acc=0.98,
                infer_average_acc=0.97 + 0.01 * rank,
                verdict=Verdict(() if rank == 0 else ("inference: contention: synthetic",)),
                latency_ms=LatencyBlock(
                    **{k: getattr(inference_stats, k) for k in ("p50", "p90", "p99", "p99_9", "mean")}
                ),
                latency_batches=800,
                vendor_usage_gib=1.5,
                vendor_max_mem_gib=16.0,
                peak_flops=1e11,
                mfu_is_estimate=True,
                peak_flops_source="synthetic",
                mfu=1e6 * core_qps / 1e11,
                performance=tuple(SummaryRow.of(row, None, None) for row in perf),
            )
        )
    config = SimpleNamespace(
        mode="local", vendor="cpu", hosts=[SimpleNamespace(label=h) for h in hosts], flagperf_path=INFERENCE
    )
    from datetime import datetime, timezone

    write_summary(run_dir, name, config, records, datetime(2026, 1, 1, tzinfo=timezone.utc))
    return run_dir


class _Page(HTMLParser):
    """Every start tag, and every <script> element with its text as an HTML parser splits them:
    text that broke out of a JSON spec would end its element early and fail to parse."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._script: tuple[dict, list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = (dict(attrs), [])

    def handle_data(self, data):
        if self._script is not None:
            self._script[1].append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script[0], "".join(self._script[1])))
            self._script = None

    def plots(self) -> list[dict]:
        """The plot divs in page order, each with its name and parsed spec."""
        specs = {attrs.get("id"): text for attrs, text in self.scripts if attrs.get("type") == "application/json"}
        out = []
        for tag, attrs in self.tags:
            if tag == "div" and attrs.get("class") == "plot":
                text = specs[attrs["id"] + "-spec"]
                assert "<" not in text and ">" not in text, text[:200]  # nothing in it can end the <script>
                out.append(
                    {
                        "id": attrs["id"],
                        "name": attrs["aria-label"],
                        "style": attrs.get("style", ""),
                        "spec": json.loads(text),
                    }
                )
        return out


def _page(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def _parse(html: str) -> list[tuple[str, dict]]:
    return _page(html).tags


# ---- the page ----------------------------------------------------------------------
def test_report_is_self_contained_with_every_plot(tmp_path):
    run_dir = make_run(tmp_path, "run1")
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    page = _page(html)
    links = [attrs.get(key) for _, attrs in page.tags for key in ("src", "href") if attrs.get(key)]
    assert links and not [x for x in links if x.startswith(("http:", "https:", "//", "file:"))]
    assert not [t for t, attrs in page.tags if t in ("link", "iframe", "img") or (t == "script" and "src" in attrs)]
    # plotly.js's basic bundle inlined once, from the vendored file; then the one script that draws every plot
    code = [text for attrs, text in page.scripts if not attrs]
    assert (
        len(code) == 2
        and code[0].strip() == str(plotly_js()).strip()
        and "plotly.js (basic - minified) v4." in code[0][:200]
    )
    assert "Plotly.newPlot" in code[1] and html.count("Plotly.newPlot(div") == 1
    plots = page.plots()
    assert [p["name"] for p in plots] == [
        "throughput vs batch size",
        "latency distribution",
        "throughput-latency frontier",
        "monitor timeline",
        "top ops",
    ]
    for p in plots:
        layout = p["spec"]["layout"]
        assert p["spec"]["data"] and layout["title"]["text"] and f"width:{layout['width']}px" in p["style"]
        assert p["spec"]["config"]["toImageButtonOptions"]["filename"] == f"digits:pytorch on 10.0.0.1 {p['name']}"
    # Without plotly.js, the page is a few tens of kB: the specs stay small; with it, well under 1.5 MB.
    assert len(html.encode()) - len(str(plotly_js()).encode()) < 150_000
    assert len(html.encode()) < 1_400_000
    # The summary table's figures and the verdict with its reasons; compile report; top ops.
    table = html.split('id="summary"')[1].split("</table>")[0]
    assert "1234.57" in table and ">valid<" in table and "INVALID" not in table
    assert "sg_percent" in html and "87.5" in html and "NonZero" in html and '<td class="l">2 (1)</td>' in html
    assert html.count('<td class="l">n0</td>') == 1 and "throughput not stable: synthetic" in html


def _specs(run_dir: Path) -> dict[str, dict]:
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    plots = _page(html).plots()
    specs = {p["name"]: p["spec"] for p in plots}
    assert len(specs) == len(plots)  # one host: each plot once
    return specs


def test_each_plot_spec_holds_its_data(tmp_path):
    run_dir = make_run(
        tmp_path, "run9", rows=((1, "offline", 1), (4, "offline", 1), (16, "offline", 1), (4, "server", 2))
    )
    result = json.loads(next(run_dir.glob("digits:pytorch/*/result.json")).read_text())
    rows, raw = result["performance"], read_latencies(next(run_dir.glob("digits:pytorch/*")))
    specs = _specs(run_dir)

    # throughput: a point per row at (batch size, qps), one line per scenario x clients, hollow = invalid (row 1)
    throughput = specs["throughput vs batch size"]
    assert throughput["layout"]["title"]["text"] == "Throughput vs batch size (hollow = invalid verdict)"
    assert [t["name"] for t in throughput["data"]] == ["offline x1", "server x2"]
    points = {
        text.split(":")[0]: (x, y, symbol, text)
        for t in throughput["data"]
        for x, y, symbol, text in zip(t["x"], t["y"], t["marker"]["symbol"], t["text"], strict=True)
    }
    assert list(points) == ["bs 1 offline", "bs 4 offline", "bs 16 offline", "bs 4 server x2"] and len(rows) == 4
    for i, (row, (x, y, symbol, text)) in enumerate(zip(rows, points.values())):
        assert x == row["batch_size"] and y == pytest.approx(row["qps"], rel=1e-4)
        assert (symbol, text.endswith("INVALID")) == (("circle-open", True) if i == 1 else ("circle", False))
    assert throughput["layout"]["xaxis"]["type"] == "log" and throughput["layout"]["xaxis"]["tickvals"] == [1, 4, 16]

    # latency: the inference pass and every row, each a step CDF on a log axis, n = every query
    latency = specs["latency distribution"]
    assert [t["name"] for t in latency["data"]] == [
        "FlagPerf inference pass (core) (n=800)",
        "bs 1 offline (n=700)",
        "bs 4 offline (n=700)",
        "bs 16 offline (n=700)",
        "bs 4 server x2 (n=700)",
    ]
    assert latency["layout"]["xaxis"]["type"] == "log" and [a["text"] for a in latency["layout"]["annotations"]] == [
        "p50",
        "p90",
        "p99",
    ]
    for trace, series in zip(
        latency["data"], ["inference", "performance_0", "performance_1", "performance_2", "performance_3"]
    ):
        ms = np.sort(raw[series]) / 1e6
        assert trace["line"]["shape"] == "hv" and len(trace["x"]) <= 500 and trace["x"] == sorted(trace["x"])
        assert (
            trace["x"][0] == pytest.approx(ms[0], rel=1e-4)
            and trace["x"][-1] == pytest.approx(ms[-1], rel=1e-4)
            and trace["y"][-1] == 1.0
        )
        median = trace["x"][next(i for i, y in enumerate(trace["y"]) if y >= 0.5)]
        assert median == pytest.approx(np.percentile(ms, 50), rel=0.02)

    # frontier: every row labelled, the frontier trace = pareto_front of (headline latency, qps)
    frontier = specs["throughput-latency frontier"]
    everything, front = frontier["data"]
    assert len(everything["x"]) == 4 and everything["text"][0] == "bs 1 offline (p90)" and front["name"] == "frontier"
    points = [(r["latency_ms"]["p90"], r["qps"]) for r in rows]
    expected = [points[i] for i in pareto_front(points)]
    assert (
        len(expected) >= 2
        and front["x"] == pytest.approx([p[0] for p in expected], rel=1e-4)
        and front["y"] == pytest.approx([p[1] for p in expected], rel=1e-4)
    )

    # timeline: utilisation and memory panels, the phases shaded in each, one legend entry per kind
    timeline = specs["monitor timeline"]
    assert {t["name"] for t in timeline["data"]} == {
        "system CPU %",
        "device utilisation %",
        "system memory used",
        "device memory used",
    }
    assert "yaxis3" not in timeline["layout"]  # no power readings: two panels
    shapes = timeline["layout"]["shapes"]
    assert len(shapes) == 2 * (2 + len(rows)) and {s["fillcolor"] for s in shapes} == {"#9ecae1", "#a1d99b", "#fdd0a2"}
    assert sorted(s["name"] for s in shapes if s.get("showlegend")) == [
        "inference (measured)",
        "performance (measured)",
        "validation (measured)",
    ]
    validation = next(s for s in shapes if s["yref"] == "y domain" and s["fillcolor"] == "#9ecae1")
    assert (validation["x0"], validation["x1"]) == (0.5, 1.5)  # seconds since the first monitor sample (T0)

    # top ops: one bar per op, the largest first
    (bars,) = specs["top ops"]["data"]
    assert bars["x"] == [5.0, 2.5, 1.6667, 1.25] and bars["orientation"] == "h"
    assert specs["top ops"]["layout"]["yaxis"]["ticktext"] == ["Conv: n0", "Conv: n1", "Conv: n2", "Conv: n3"]


def test_a_hostile_case_name_or_op_name_stays_inside_its_script(tmp_path):
    """A case or op named "</script>..." must neither end a spec's <script> element nor reach the page as markup."""
    hostile = "</script><script>window.__pwned=1</script><!--"
    ops = [{"node": hostile, "op_type": "Conv</SCRIPT >", "calls": 1, "mean_ms": 1.0, "total_ms": 1.0}]
    run_dir = make_run(tmp_path, "run10", case=hostile, ops=ops)
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    page = _page(html)
    assert len(page.scripts) == 2 + 5 and "__pwned" not in "".join(text for attrs, text in page.scripts if not attrs)
    plots = page.plots()  # each spec parses whole, and holds the names unchanged
    assert len(plots) == 5 and all(
        p["spec"]["config"]["toImageButtonOptions"]["filename"].startswith(hostile + ":pytorch on ") for p in plots
    )
    (bars,) = plots[-1]["spec"]["data"]
    assert bars["text"] == [f"Conv</SCRIPT >: {hostile}"]
    assert (
        html.count("<script") == 7 and html.lower().count("</script") == 7
    )  # the name appears escaped everywhere else
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=1" in html


def test_script_json_escapes_markup_and_drops_non_finite_numbers():
    value = {"a": "</script><!-- & >", "b": [1.5, float("nan"), float("inf")], "c": "é\u2028"}
    text = script_json(value)
    assert not set(text) & set("<>&") and text.isascii()
    assert json.loads(text) == {"a": "</script><!-- & >", "b": [1.5, None, None], "c": "é\u2028"}


def test_long_series_are_downsampled_on_the_exact_curve():
    values = np.random.default_rng(3).lognormal(np.log(2e6), 0.5, 100_000).astype(np.int64)
    xs, ys = ecdf_points(values)
    ms, n = np.sort(values) / 1e6, len(values)
    assert len(xs) <= 500 and xs[0] == ms[0] and xs[-1] == ms[-1] and ys[-1] == 1.0
    # every kept point is a step of the exact CDF; the tail is kept densely (p99.9 and beyond)
    ranks = np.round(ys * n).astype(int)
    assert np.array_equal(ms[ranks - 1], xs) and np.all(np.diff(ranks) > 0)
    assert (ys > 0.999).sum() >= 30 and (ys > 0.99).sum() >= 55  # about 25 points a decade of the tail
    short = ecdf_points([3, 1, 2])
    assert short[0].tolist() == [1e-6, 2e-6, 3e-6] and short[1].tolist() == pytest.approx([1 / 3, 2 / 3, 1])

    points = [(t * 0.1, 50.0 + (t % 7)) for t in range(10_000)]
    points[4321] = (432.1, 999.0)  # a one-sample spike
    points[8765] = (876.5, -5.0)  # and a dip
    kept = decimate(points)
    assert len(kept) <= 2000 and kept == sorted(kept) and set(kept) <= set(points)
    assert (432.1, 999.0) in kept and (876.5, -5.0) in kept and kept[0] == points[0]
    assert decimate(points[:100]) == points[:100]


def test_a_long_case_makes_a_small_spec(tmp_path):
    """An hour of 10 Hz monitors and 100 000 queries per row stay within the point limits."""
    from utils.results.report import latency_plot, timeline_plot

    raw = {"performance_0": latencies_ns(1, 100_000, 0.3), "performance_1": latencies_ns(2, 100_000, 40.0)}
    valid = {"valid": True, "reasons": []}
    rows = [
        SummaryRow.from_json({"batch_size": 1, "scenario": "offline", "clients": 1, "verdict": valid}),
        SummaryRow.from_json({"batch_size": 64, "scenario": "offline", "clients": 1, "verdict": valid}),
    ]
    latency = latency_plot(rows, raw, np.array(latencies_ns(3, 100_000, 1.0)))
    assert [len(t["x"]) for t in latency["data"]] == [500, 500, 500] or max(len(t["x"]) for t in latency["data"]) <= 500
    sys_samples = [
        {"timestamp": T0 + t / 10, "cpu_percent": 50.0, "mem_used_gib": 1.0, "power_w": 200.0 + t % 3}
        for t in range(36_000)
    ]
    sys_samples[5]["cpu_percent"] = float("nan")  # a monitor's bad reading is dropped, not written as NaN
    timeline = timeline_plot(sys_samples, [], [("inference", "inference", T0 + 3, T0 + 20)])
    assert {t["name"] for t in timeline["data"]} == {"system CPU %", "system memory used", "package power"}
    assert "yaxis3" in timeline["layout"] and max(len(t["x"]) for t in timeline["data"]) <= 2000
    text = script_json({"data": latency["data"] + timeline["data"]})
    assert "NaN" not in text and len(text) < 200_000


def test_report_shows_the_multi_host_aggregate_and_invalid_reasons(tmp_path):
    run_dir = make_run(tmp_path, "run2", hosts=("10.0.0.1", "10.0.0.2"))
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    assert "all 2 hosts" in html and "inference: contention: synthetic" in html
    assert "invalid on host(s) 10.0.0.2" in html
    plots = _page(html).plots()
    assert (
        len(plots) == 11 and len({p["id"] for p in plots}) == 11
    )  # 5 per host, the aggregate's throughput; ids unique
    (aggregate,) = [
        p
        for p in plots
        if p["spec"]["config"]["toImageButtonOptions"]["filename"].startswith("digits:pytorch on all 2 hosts")
    ]
    assert aggregate["name"] == "throughput vs batch size" and sum(len(t["x"]) for t in aggregate["spec"]["data"]) == 3


def test_report_of_a_failed_case_says_so(tmp_path):
    run_dir = make_run(tmp_path, "run3", status="failed")
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    assert "failed at engine_inference" in html and "boom" in html


def test_report_without_plotly_still_written_and_says_why(tmp_path, monkeypatch):
    from utils.cli.summary import write_report_safely
    from utils.results.report import page

    monkeypatch.setattr(
        page, "PLOTLY_BUNDLE", tmp_path / "gone" / "plotly-basic.min.js"
    )  # a checkout that lost the file
    page.plotly_js.cache_clear()
    run_dir = make_run(tmp_path, "run11")
    try:
        assert write_report_safely(run_dir, INFERENCE) == run_dir / "report.html"
    finally:
        page.plotly_js.cache_clear()
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "No plots: plotly.js (plotly-basic.min.js) is missing beside page.py in this checkout" in html
    assert len(_page(html).plots()) == 5 and "1234.57" in html and len(html.encode()) < 150_000
    (run_dir / "summary.json").write_text("{not json")  # a report that cannot be written never fails the run
    assert write_report_safely(run_dir, INFERENCE) is None


def test_the_charts_use_only_trace_types_the_inlined_bundle_has(tmp_path):
    """The page carries plotly.js's basic bundle: every trace of every chart must be of a type it registers."""
    from utils.results.report import PLOTLY_BUNDLE, TRACE_TYPES

    run_dir = make_run(tmp_path, "run12", rows=((1, "offline", 1), (4, "offline", 1), (4, "server", 2)))
    used = {trace["type"] for spec in _specs(run_dir).values() for trace in spec["data"]}
    assert used == set(TRACE_TYPES) == {"scatter", "bar"}
    registered = set(re.findall(r'moduleType:"trace",name:"(\w+)"', PLOTLY_BUNDLE.read_text(encoding="utf-8")))
    assert registered == {"scatter", "bar", "pie"}  # the basic bundle; the whole library registers 47


def test_pareto_front_keeps_only_undominated_points():
    # (latency, throughput): (3, 50) is beaten by (2, 60); (5, 60) by (2, 60).
    points = [(1.0, 10.0), (3.0, 50.0), (2.0, 60.0), (4.0, 80.0), (5.0, 60.0)]
    assert pareto_front(points) == [0, 2, 3]


def test_phase_spans_come_from_result_json():
    result = case_result(
        validation=phase_block("validation", started_at_unix=1.0, finished_at_unix=2.0),
        inference=phase_block("inference", started_at_unix=None, finished_at_unix=None),  # a phase without its span
        performance=[
            performance_row(batch_size=4, scenario="offline", clients=2, started_at_unix=3.0, finished_at_unix=4.5)
        ],
    )
    assert phase_spans(result) == [("validation", "validation", 1.0, 2.0), ("performance", "bs 4 offline x2", 3.0, 4.5)]


# ---- aggregation -------------------------------------------------------------------------
def test_aggregate_sums_throughput_and_pools_raw_latencies(tmp_path):
    run_dir = make_run(tmp_path, "run4", hosts=("10.0.0.1", "10.0.0.2"))
    summary = json.loads((run_dir / "summary.json").read_text())
    records, (agg,) = summary["results"], summary["aggregates"]
    assert agg["host"] == "all 2 hosts" and agg["hosts"] == ["10.0.0.1", "10.0.0.2"]
    assert agg["*p_inference_core(qps)"] == pytest.approx(sum(r["*p_inference_core(qps)"] for r in records))
    assert agg["p_inference_whole(qps)"] == pytest.approx(2 * 1234.5678)
    pooled = np.concatenate([read_latencies(r["log_dir"])["inference"] for r in records]) / 1e6
    assert agg["latency_batches"] == 1600
    assert agg["latency_ms"]["p50"] == pytest.approx(float(np.percentile(pooled, 50)), rel=1e-12)
    assert agg["latency_ms"]["p99"] == pytest.approx(float(np.percentile(pooled, 99)), rel=1e-12)
    # Host 2 is twice as slow: the pooled p99 is not the average of the hosts' p99s.
    mean_of_p99 = (records[0]["latency_ms"]["p99"] + records[1]["latency_ms"]["p99"]) / 2
    assert abs(agg["latency_ms"]["p99"] - mean_of_p99) / mean_of_p99 > 0.05
    assert agg["verdict"] == {"valid": False, "reasons": ["invalid on host(s) 10.0.0.2"]}
    assert agg["concurrent"] is True
    assert agg["infer_average_acc"] == pytest.approx(0.975)
    assert agg["MFU"] == pytest.approx(1e6 * agg["*p_inference_core(qps)"] / 2e11)
    row = agg["performance"][2]
    assert (row["batch_size"], row["queries"], row["pooled_queries"]) == (16, 1400, 1400)
    assert row["qps"] == pytest.approx(records[0]["performance"][2]["qps"] + records[1]["performance"][2]["qps"])
    pooled_row = np.concatenate([read_latencies(r["log_dir"])["performance_2"] for r in records]) / 1e6
    assert row["latency_ms"]["p90"] == pytest.approx(float(np.percentile(pooled_row, 90)), rel=1e-12)
    md = (run_dir / "summary.md").read_text()
    lines = [line for line in md.splitlines() if line.startswith("| digits:pytorch")]
    assert [line.split("|")[2].strip() for line in lines[:3]] == ["10.0.0.1", "10.0.0.2", "all 2 hosts"]


def test_no_aggregate_for_a_single_host_or_failed_hosts(tmp_path):
    run_dir = make_run(tmp_path, "run5")
    assert json.loads((run_dir / "summary.json").read_text())["aggregates"] == []

    def record(case: str, status: str = "success", host: str = "h", **kw) -> SummaryRecord:
        return SummaryRecord(case=case, framework="f", host=host, noderank=0, status=status, **kw)

    assert aggregate_records([record("a", "failed"), record("a")]) == []
    a, b, aggregate = record("a"), record("b"), record("a", aggregate=True, host="all 2 hosts")
    assert with_aggregates([a, b], [aggregate]) == [a, aggregate, b]


def test_latency_file_round_trips_and_caps(tmp_path):
    from common.record import MAX_RAW_LATENCIES, capped

    write_latencies(tmp_path / "latencies.npz", {"inference": [1, 2, 3_000_000_000_000]})
    assert read_latencies(tmp_path)["inference"].tolist() == [1, 2, 3_000_000_000_000]
    assert read_latencies(tmp_path / "nothing") == {}
    values = list(range(MAX_RAW_LATENCIES + 10))
    kept = capped(values)
    assert len(kept) == MAX_RAW_LATENCIES and kept == sorted(kept) and kept == capped(values)


# ---- a real headless browser (tests/infra/browser.py) ------------------------------------------
def test_report_renders_in_headless_chromium(tmp_path):
    """Every plot drawn by plotly (an svg.main-svg with its traces in each plot div), no JS error,
    and a case named "</script>..." runs no script of its own."""
    browser = chromium_or_skip()
    case = "</script><script>window.__pwned=1</script>digits"
    run_dir = make_run(tmp_path, "run6", hosts=("10.0.0.1", "10.0.0.2"), case=case)
    page = write_report(run_dir, INFERENCE)
    probe = probe_page(page, tmp_path)
    titles = probe.pop("titles")
    assert probe == {
        "plots": 11,
        "missing": [],
        "errors": [],
        "pwned": False,
        "fetched": [],  # nothing loaded from elsewhere: plotly.js is inlined
    }  # 5 plots per host, throughput for the aggregate
    assert (
        titles.count("Throughput vs batch size (hollow = invalid verdict)") == 3
        and titles.count("Throughput-latency frontier") == 2
    )
    common = browser_args(browser, tmp_path)
    shot = tmp_path / "shot.png"
    subprocess.run(
        common + ["--window-size=1280,2000", f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120
    )
    pixels = np.frombuffer(shot.read_bytes(), dtype=np.uint8)
    assert shot.stat().st_size > 20_000 and pixels.size  # a blank page compresses to a few kB


# ---- one real run ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_real_digits_run_writes_latencies_spans_and_the_report(tmp_path):
    """run.py on digits (short minimums): latencies.npz matches result.json, phases have
    wall-clock spans inside the run, and the console's last line names report.html."""
    import shutil as _shutil
    import sys

    import yaml

    from benchmarks.digits.pytorch.prepare import prepare_digits

    data = tmp_path / "digits"
    prepare_digits(data)
    perf = tmp_path / "inference"
    _shutil.copytree(INFERENCE, perf, ignore=_shutil.ignore_patterns("onnxs", "result", "__pycache__"))
    config = tmp_path / "host.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "MODE": "local",
                "VENDOR": "cpu",
                "FLAGPERF_PATH": str(perf),
                "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
                "HOSTS": ["127.0.0.1"],
                "CASES": {"digits:pytorch": str(data)},
            }
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "run.py",
            "--config",
            str(config),
            "--set",
            "min_duration_s=0.3",
            "--set",
            "min_query_count=32",
            "--set",
            "batch_sizes=[4,16]",
        ]
        + list(CHEAP_SET),
        cwd=perf,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "result").glob("run*")
    assert done.stdout.rstrip().splitlines()[-1] == f"report: {run_dir / 'report.html'}"
    (log_dir,) = run_dir.glob("digits:pytorch/*_noderank0")
    result = json.loads((log_dir / "result.json").read_text())
    raw = read_latencies(log_dir)
    assert sorted(raw) == ["inference", "performance_0", "performance_1", "validation"]
    assert result["raw_latencies"]["series"]["inference"] == {
        "count": result["inference"]["batches"],
        "stored": result["inference"]["batches"],
    }
    assert len(raw["performance_1"]) == result["performance"][1]["queries"]
    p50 = LatencyStats.from_ns([int(v) for v in raw["performance_1"]]).p50
    assert p50 == pytest.approx(result["performance"][1]["latency_ms"]["p50"], rel=1e-12)
    spans = phase_spans(CaseResult.from_json(result))
    assert [s[1] for s in spans] == ["validation", "inference", "bs 4 offline", "bs 16 offline"]
    assert all(a < b for _, _, a, b in spans) and all(spans[i][3] <= spans[i + 1][2] for i in range(len(spans) - 1))
    html = (run_dir / "report.html").read_text()
    assert {p["name"] for p in _page(html).plots()} == PLOTS


def test_summary_md_and_report_html_say_the_same_mfu(tmp_path):
    """One function decides a record's MFU cell: an MFU over 100 % of the peak reads the same in both views."""
    from dataclasses import replace

    from common.summary_record import read_summary
    from utils.results.report.sections import summary_rows
    from utils.results.summary import markdown_table

    run_dir = make_run(tmp_path, "run1")
    (record,) = read_summary(run_dir / "summary.json").results
    over = replace(record, mfu=None, mfu_note="130% of the estimated peak: the estimate is too low")
    measured = replace(over, peak_measured="measured fp32 GEMM peak (500 GFLOP/s)", mfu_is_estimate=False)
    for r, text in (
        (record, f"{record.mfu * 100:.2f}% est."),
        (over, "n/a (over 100%: peak too low)"),
        (measured, "n/a (over 100% of the measured peak: the baseline is wrong, see below)"),
    ):
        assert summary_rows([r])[0]["mfu"] == text and f"| {text} |" in markdown_table([r])
    base = replace(over, baseline={"figures": []})  # a base-tier case measures the peak: no MFU of its own
    assert summary_rows([base])[0]["mfu"] == "-" and markdown_table([base]).splitlines()[2].endswith("| - |")


def test_a_run_without_repetitions_prints_no_empty_repetitions_part(tmp_path):
    html = write_report(make_run(tmp_path, "run1"), INFERENCE).read_text(encoding="utf-8")
    assert "no data" not in html and "repetitions" not in html.lower()


def test_a_base_tier_case_has_no_empty_throughput_or_latency_part(tmp_path):
    """A base-tier case has no performance rows and no inference pass: those parts are left out."""
    run_dir = make_run(tmp_path, "run1", rows=())
    (result_file,) = run_dir.glob("*/*/result.json")
    result = json.loads(result_file.read_text())
    result.update(inference=None, validation=None)
    result_file.write_text(json.dumps(result))
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    assert "no data" not in html and [p["name"] for p in _page(html).plots()] == ["monitor timeline", "top ops"]
