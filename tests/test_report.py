"""report.html (self-contained, every plot present, renders in a real browser) and multi-host aggregation.

The runs are synthetic: ``make_run`` writes what run.py and run_inference.py
write (summary.json; per case and host result.json, latencies.npz and the
monitors' JSON lines) from seeded random latencies, so every figure is known.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from common.record import read_latencies, write_latencies
from common.stats import LatencyStats
from utils.aggregate import aggregate_records, with_aggregates
from utils.report import pareto_front, phase_spans, write_report
from utils.summary import write_summary

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
T0 = 1_800_000_000.0
PLOTS = {"throughput vs batch size", "latency distribution", "throughput-latency frontier", "monitor timeline", "top ops"}


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
                {
                    "batch_size": bs,
                    "scenario": scenario,
                    "clients": clients,
                    "qps": qps,
                    "queries": 700,
                    "samples": 700 * bs,
                    "duration_s": 1.0,
                    "latency_ms": {k: getattr(stats, k) for k in ("p50", "p90", "p99", "p99_9", "mean")},
                    "latency_notes": stats.notes,
                    "window_qps": [qps * (1 + 0.01 * ((w * 7) % 5 - 2)) for w in range(10)],
                    "target_qps": None,
                    "latency_bound_met": None,
                    "started_at_unix": T0 + 5 + i,
                    "finished_at_unix": T0 + 5.8 + i,
                    "accuracy_in_performance_mode": {"name": "accuracy_in_performance_mode", "passed": True, "detail": "all match"},
                    "verdict": {"valid": i != 1, "reasons": [] if i != 1 else ["throughput not stable: synthetic"]},
                }
            )
        inference_stats = LatencyStats.from_ns(raw["inference"])
        core_qps = 16 * 1e9 / float(np.mean(raw["inference"]))
        result = {
            "case": case,
            "framework": "pytorch",
            "precision": "fp32",
            "inference": {"samples": 800 * 16, "started_at_unix": T0 + 2, "finished_at_unix": T0 + 4},
            "validation": {"samples": 800 * 16, "started_at_unix": T0 + 0.5, "finished_at_unix": T0 + 1.5},
            "performance": perf,
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
                "performance_data": [{"node": f"n{k}", "op_type": "Conv", "calls": 5, "mean_ms": 1.0 / (k + 1), "total_ms": 5.0 / (k + 1)} for k in range(4)],
            },
            "env": {"hostname": host, "cpu_model": "AMD EPYC", "packages": {"onnxruntime": "1.31.1"}},
        }
        (log_dir / "result.json").write_text(json.dumps(result))
        write_latencies(log_dir / "latencies.npz", raw)
        sys_lines = [{"timestamp": T0 + t, "cpu_percent": 50.0 + t, "mem_used_gib": 1.0 + 0.1 * t, "mem_total_gib": 16.0, "power_w": None} for t in range(10)]
        (log_dir / "sys_monitor.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sys_lines))
        (log_dir / "cpu_monitor.jsonl").write_text(
            "".join(json.dumps({"timestamp": T0 + t, "utilization": 40.0, "mem_used_gib": 1.2}) + "\n" for t in range(10))
        )
        records.append(
            {
                "case": case,
                "framework": "pytorch",
                "host": host,
                "noderank": rank,
                "status": status,
                "failed_step": None if status == "success" else "engine_inference",
                "error": None if status == "success" else "boom",
                "exit_code": None,
                "wall_time_s": 10.0,
                "log_dir": str(log_dir),
                "vendor": "cpu",
                "compiler": "onnxruntime",
                "precision": "fp32",
                "batchsize": 16,
                "flops": 1e6,
                "e2e_time(second)": 10.0,
                "p_validation_whole(qps)": 900.0,
                "p_validation_core(qps)": 1000.0,
                "p_inference_whole(qps)": 1234.5678,
                "*p_inference_core(qps)": core_qps,
                "val_average_acc": 0.98,
                "infer_average_acc": 0.97 + 0.01 * rank,
                "verdict": {"valid": rank == 0, "reasons": [] if rank == 0 else ["inference: contention: synthetic"]},
                "accuracy_note": None,
                "latency_ms": {k: getattr(inference_stats, k) for k in ("p50", "p90", "p99", "p99_9", "mean")},
                "latency_batches": 800,
                "latency_notes": [],
                "sys_monitor": None,
                "vendor_usage(GiB)": 1.5,
                "vendor_max_mem(GiB)": 16.0,
                "peak_flops": 1e11,
                "mfu_is_estimate": True,
                "peak_flops_source": "synthetic",
                "MFU": 1e6 * core_qps / 1e11,
                "performance": perf,
                "best": None,
                "numeric": None,
                "audits": [],
            }
        )
    config = SimpleNamespace(mode="local", vendor="cpu", hosts=[SimpleNamespace(label=h) for h in hosts], flagperf_path=INFERENCE)
    from datetime import datetime, timezone

    write_summary(run_dir, name, config, records, datetime(2026, 1, 1, tzinfo=timezone.utc))
    return run_dir


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _parse(html: str) -> list[tuple[str, dict]]:
    collector = _Collector()
    collector.feed(html)
    return collector.tags


# ---- the page ----------------------------------------------------------------------
def test_report_is_self_contained_with_every_plot(tmp_path):
    run_dir = make_run(tmp_path, "run1")
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    tags = _parse(html)
    links = [attrs.get(key) for _, attrs in tags for key in ("src", "href") if attrs.get(key)]
    assert links and not [x for x in links if x.startswith(("http:", "https:", "//", "file:"))]
    assert not [t for t, _ in tags if t in ("script", "link", "iframe")]
    images = [attrs for tag, attrs in tags if tag == "img"]
    assert {img["alt"] for img in images} == PLOTS
    for img in images:
        assert img["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(img["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    # The summary table's figures and the verdict with its reasons; compile report; top ops.
    table = html.split('id="summary"')[1].split("</table>")[0]
    assert "1234.57" in table and ">valid<" in table and "INVALID" not in table
    assert "sg_percent" in html and "87.5" in html and "NonZero" in html and '<td class="l">2 (1)</td>' in html
    assert html.count('<td class="l">n0</td>') == 1 and "throughput not stable: synthetic" in html


def test_report_shows_the_multi_host_aggregate_and_invalid_reasons(tmp_path):
    run_dir = make_run(tmp_path, "run2", hosts=("10.0.0.1", "10.0.0.2"))
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    assert "all 2 hosts" in html and "inference: contention: synthetic" in html
    assert "invalid on host(s) 10.0.0.2" in html


def test_report_of_a_failed_case_says_so(tmp_path):
    run_dir = make_run(tmp_path, "run3", status="failed")
    html = write_report(run_dir, INFERENCE).read_text(encoding="utf-8")
    assert "failed at engine_inference" in html and "boom" in html


def test_pareto_front_keeps_only_undominated_points():
    # (latency, throughput): (3, 50) is beaten by (2, 60); (5, 60) by (2, 60).
    points = [(1.0, 10.0), (3.0, 50.0), (2.0, 60.0), (4.0, 80.0), (5.0, 60.0)]
    assert pareto_front(points) == [0, 2, 3]


def test_phase_spans_come_from_result_json():
    result = {
        "validation": {"started_at_unix": 1.0, "finished_at_unix": 2.0},
        "inference": {},
        "performance": [{"batch_size": 4, "scenario": "offline", "clients": 2, "started_at_unix": 3.0, "finished_at_unix": 4.5}],
    }
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
    records = [{"case": "a", "framework": "f", "status": "failed"}, {"case": "a", "framework": "f", "status": "success"}]
    assert aggregate_records(records) == []
    assert with_aggregates([{"case": "a", "framework": "f"}, {"case": "b", "framework": "f"}], [{"case": "a", "framework": "f", "x": 1}]) == [
        {"case": "a", "framework": "f"},
        {"case": "a", "framework": "f", "x": 1},
        {"case": "b", "framework": "f"},
    ]


def test_latency_file_round_trips_and_caps(tmp_path):
    from common.record import MAX_RAW_LATENCIES, capped

    write_latencies(tmp_path / "latencies.npz", {"inference": [1, 2, 3_000_000_000_000]})
    assert read_latencies(tmp_path)["inference"].tolist() == [1, 2, 3_000_000_000_000]
    assert read_latencies(tmp_path / "nothing") == {}
    values = list(range(MAX_RAW_LATENCIES + 10))
    kept = capped(values)
    assert len(kept) == MAX_RAW_LATENCIES and kept == sorted(kept) and kept == capped(values)


# ---- a real headless browser --------------------------------------------------------------
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push('error: ' + (e.message || (e.target && e.target.src) || 'resource')), true);
const origError = console.error; console.error = (...a) => { window.__errors.push('console: ' + a.join(' ')); origError(...a); };
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0)).map(i => i.alt);
  const out = document.createElement('pre'); out.id = 'probe';
  out.textContent = JSON.stringify({images: imgs.length, broken: bad, errors: window.__errors});
  document.body.appendChild(out);
});
</script>"""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_renders_in_headless_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (scripts/install_system_deps.sh installs it)")
        pytest.skip("chromium is not installed")
    run_dir = make_run(tmp_path, "run6", hosts=("10.0.0.1", "10.0.0.2"))
    page = write_report(run_dir, INFERENCE)
    # The probe goes into a copy, so the report itself stays script-free.
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    common = [browser, "--headless", "--disable-gpu", "--no-sandbox", "--user-data-dir=" + str(tmp_path / "profile"), "--virtual-time-budget=5000"]
    dom = subprocess.run(common + ["--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    probe = json.loads(dom.stdout.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0].replace("&quot;", '"'))
    assert probe == {"images": 11, "broken": [], "errors": []}  # 5 plots per host, throughput for the aggregate
    shot = tmp_path / "shot.png"
    subprocess.run(common + ["--window-size=1280,2000", f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
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
        [sys.executable, "run.py", "--config", str(config), "--set", "min_duration_s=0.3", "--set", "min_query_count=32", "--set", "batch_sizes=[4,16]"],
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
    assert result["raw_latencies"]["series"]["inference"] == {"count": result["inference"]["batches"], "stored": result["inference"]["batches"]}
    assert len(raw["performance_1"]) == result["performance"][1]["queries"]
    p50 = LatencyStats.from_ns([int(v) for v in raw["performance_1"]]).p50
    assert p50 == pytest.approx(result["performance"][1]["latency_ms"]["p50"], rel=1e-12)
    spans = phase_spans(result)
    assert [s[1] for s in spans] == ["validation", "inference", "bs 4 offline", "bs 16 offline"]
    assert all(a < b for _, _, a, b in spans) and all(spans[i][3] <= spans[i + 1][2] for i in range(len(spans) - 1))
    html = (run_dir / "report.html").read_text()
    assert {attrs["alt"] for tag, attrs in _parse(html) if tag == "img"} == PLOTS
