"""The server's own telemetry (``tools/serving/metrics.py``) and reasoning replies, against real loopback
servers on 127.0.0.1: one exposing vLLM-named metrics (a chosen set of them), one exposing nothing, one
answering garbage, one answering HTML; the name map per server on expositions in each server's own
names; histogram percentiles from bucket differences. No figure here depends on the wall clock: the
loopback's gauges are fixed values, its counters grow by fixed amounts per request, and its TTFT
histogram observes each request's scripted TTFT."""

from __future__ import annotations

import asyncio
import json
import socketserver
import threading
from pathlib import Path

import pytest

from tests.infra.serving_summary import summary_md
from tools.serving import metrics
from tools.serving.cli import main
from tools.serving.client import RequestRecord, RequestSpec, chunk_parts, count_tokens
from tools.serving.figures import step_figures
from tools.serving.load import Endpoint, Load, run_load, sessions_of
from tools.serving.loopback import LoopbackServer, Plan, SteppedClock, VllmMetrics, steady


def _run(tmp_path: Path, url: str, *extra: str, model: str = "m") -> int:
    args = ["--endpoint", url, "--served-model", model, "--output-dir", str(tmp_path), "--warmup", "1"]
    return main(args + list(extra))


def _result(tmp_path: Path) -> tuple[dict, Path]:
    (run,) = [p for p in tmp_path.glob("run*") if p.is_dir()]
    return json.loads((run / "serving" / "result.json").read_text()), run


# ---- the parser and the name map --------------------------------------------------------------
VLLM_TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4.0
# TYPE http_requests_total counter
http_requests_total{handler="/metrics"} 12.0
"""


def test_a_vllm_exposition_is_read_through_the_map_summing_engines_and_averaging_ratios():
    assert metrics.identify(VLLM_TEXT) == "vllm"
    snap = metrics.parse(VLLM_TEXT, "vllm")
    assert snap.gauges == {"running": 5.0, "kv_cache_usage": 0.375}
    assert snap.counters == {"preemptions": 7.0}
    assert snap.histograms["ttft"] == {"buckets": {0.01: 1.0, 0.1: 3.0, float("inf"): 4.0}, "sum": 0.5, "count": 4.0}
    assert "waiting" not in snap.gauges and "queue_time" not in snap.histograms


@pytest.mark.parametrize(
    "server, text, figure, kind, value",
    [
        ("sglang", 'sglang:token_usage{model_name="m"} 0.28\n', "kv_cache_usage", "gauges", 0.28),
        ("sglang", 'sglang:num_queue_reqs{model_name="m"} 4\n', "waiting", "gauges", 4.0),
        ("sglang", 'sglang:cache_hit_rate{model_name="m"} 0.75\n', "prefix_hit_rate", "gauges", 0.75),
        ("llamacpp", "llamacpp:requests_processing 1\n", "running", "gauges", 1.0),
        ("llamacpp", "llamacpp:requests_deferred 6\n", "waiting", "gauges", 6.0),
        ("llamacpp", "llamacpp:kv_cache_usage_ratio 0.125\n", "kv_cache_usage", "gauges", 0.125),
        ("tgi", "tgi_queue_size 9\n", "waiting", "gauges", 9.0),
        ("tgi", "tgi_batch_current_size 8\n", "running", "gauges", 8.0),
        ("vllm", 'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n', "kv_cache_usage", "gauges", 0.5),  # before 0.10
        ("vllm", 'vllm:prefix_cache_hits_total{model_name="m"} 11\n', "prefix_hits", "counters", 11.0),
    ],
)
def test_each_servers_names_are_mapped(server, text, figure, kind, value):
    assert metrics.identify(text) == server
    assert getattr(metrics.parse(text, server), kind) == {figure: value}


def test_histogram_quantiles_interpolate_within_the_buckets_difference():
    before = {"buckets": {0.01: 1.0, 0.1: 1.0, float("inf"): 1.0}, "sum": 0.005, "count": 1.0}
    after = {"buckets": {0.01: 1.0, 0.1: 5.0, float("inf"): 6.0}, "sum": 0.405, "count": 6.0}
    out = metrics.histogram_figures(before, after)
    # over the step: 4 in (0.01, 0.1], 1 above 0.1; the mean is exact from the sums: 0.4 s / 5
    assert out["count"] == 5 and out["mean"] == pytest.approx(80.0)
    assert out["p50"] == pytest.approx((0.01 + 0.09 * 2.5 / 4) * 1e3)
    assert out["p99"] == pytest.approx(100.0)  # in the +Inf bucket: the highest finite bound
    assert out["p50_bucket_ms"] == [10.0, 100.0]
    assert metrics.histogram_figures(after, after) == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None}
    one = {"buckets": {0.3: 4.0, 0.5: 4.0, float("inf"): 4.0}, "sum": 0.00004, "count": 4.0}
    single = metrics.histogram_figures(None, one)  # vLLM's queue times of 0.01 ms, all in its first bucket
    assert single["p50"] is None and single["mean"] == pytest.approx(0.01) and single["p50_bucket_ms"] == [0.0, 300.0]
    assert metrics.histogram_figures(before, None) == metrics.NOT_EXPOSED


def test_the_metrics_url_is_the_endpoints_origin():
    assert metrics.metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics.metrics_url("https://[::1]:9/api/v1/") == "https://[::1]:9/metrics"


# ---- against the loopback server -------------------------------------------------------------
def test_every_figure_of_a_vllm_named_server_per_step_beside_the_clients(tmp_path):
    exposed = VllmMetrics(
        kv_cache_usage=0.375,
        waiting=2,
        prefix_hit_share=0.25,
        preemptions_per_request=1,
        queue_time_s=0.004,
        spec_drafts_per_request=2,
        spec_draft_tokens_per_request=8,
        spec_accepted_per_request=6,
    )
    with LoopbackServer(steady(30.0, 1.0), model="m", metrics=exposed) as server:
        code = _run(
            tmp_path, server.url, "--concurrency", "1,2", "--num-requests", "6", "--output-len", "4",
            "--input-len", "8", "--metrics-interval-s", "0.05",
        )  # fmt: skip
    assert code == 0
    result, run = _result(tmp_path)
    assert result["server_metrics"]["exposed"] and result["server_metrics"]["server"] == "vllm"
    for step in result["steps"]:
        m = step["server_metrics"]
        assert m["exposed"] and m["server"] == "vllm" and m["url"] == server.url.removesuffix("/v1") + "/metrics"
        assert m["samples"] >= 1  # the first sample is taken as the step starts
        assert m["kv_cache_usage"]["mean"] == m["kv_cache_usage"]["peak"] == 0.375
        assert m["waiting"]["mean"] == m["waiting"]["peak"] == 2.0
        assert 0 <= m["running"]["peak"] <= step["load"]["concurrency"]
        # the counters over the step only: the warm-up request is before the first scrape
        assert m["preemptions"] == 6
        assert m["prefix_cache"] == {"hits": 6 * 2.0, "queries": 6 * 8.0}  # 8 words a prompt, a quarter hit
        assert m["prefix_cache_hit_rate"] == 0.25
        assert m["spec_decode"]["acceptance_rate"] == 0.75
        assert m["spec_decode"]["mean_accepted_length"] == 1 + 36 / 12
        assert m["ttft_ms"]["count"] == 6 and m["ttft_ms"]["mean"] == pytest.approx(30.0)
        assert m["ttft_ms"]["p50_bucket_ms"] == [20.0, 40.0]  # vLLM's buckets around 30 ms
        assert m["ttft_ms"]["p50"] is None and "one bucket" in m["ttft_ms"]["percentiles"]  # not its middle
        assert m["queue_time_ms"]["count"] == 6 and m["queue_time_ms"]["mean"] == pytest.approx(4.0)
        check = m["ttft_crosscheck"]
        assert check["judged"] and check["server_requests"] == check["client_requests"] == 6
        # the server stamps its scripted TTFT; the client's clock adds the HTTP and SSE transit on top
        assert check["client_mean_ms"] >= check["server_mean_ms"] and check["difference_mean_ms"] >= 0
        assert "transit" in check["why"]
    summary = summary_md(run)
    assert "## The server's own figures (GET " in summary
    assert "| concurrency 1 | vllm | 37.5 % / 37.5 % | 25.0 % |" in summary
    assert "TTFT cross-check, concurrency 2: client mean" in summary
    from utils.results.report import write_report

    assert not (run / "serving" / "report.html").exists()  # the run's one report.html, from its rows
    report = write_report(run).read_text()
    assert 'class="server-metrics"' in report and "TTFT cross-check, concurrency 2: client mean" in report
    assert "<td>37.5 % / 37.5 %</td>" in report and "transit" in report
    assert 'aria-label="server kv-cache use over each step"' in report
    assert 'aria-label="server requests running over each step"' in report


def test_a_metric_the_server_does_not_expose_reads_not_exposed_never_zero(tmp_path):
    only = VllmMetrics(expose=("running", "ttft"))
    with LoopbackServer(steady(5.0, 0.0), model="m", metrics=only) as server:
        assert _run(tmp_path, server.url, "--num-requests", "4", "--output-len", "3", "--metrics-interval-s", "0") == 0
    result, run = _result(tmp_path)
    m = result["steps"][0]["server_metrics"]
    assert m["exposed"] and m["samples"] == 0  # interval 0: before and after only
    for figure in ("kv_cache_usage", "waiting", "prefix_cache_hit_rate", "preemptions", "spec_decode"):
        assert m[figure] == metrics.NOT_EXPOSED, figure
    assert m["queue_time_ms"] == metrics.NOT_EXPOSED
    assert m["ttft_ms"]["count"] == 4
    row = next(line for line in summary_md(run).splitlines() if line.startswith("| concurrency 1 | vllm"))
    assert row.count("not exposed") == 6 and " 0 |" not in row
    csv_row = (run / "serving" / "steps.csv").read_text().splitlines()[1]
    assert "not exposed" in csv_row


@pytest.mark.parametrize(
    "exposition, says",
    [
        (None, "HTTP 404"),  # a server exposing nothing: /metrics is not a route
        (VllmMetrics(status=500), "HTTP 500"),
        (VllmMetrics(body=b"this is not {prometheus} at all\n"), "not the Prometheus text format"),
        (VllmMetrics(body=b"<html><body>dashboard</body></html>"), "not the Prometheus text format"),
        (VllmMetrics(body=b'vllm:num_requests_running{engine="0" 1\n'), "not the Prometheus text format"),
        (VllmMetrics(body=b"\xff\xfe\x00garbage" * 100), "not the Prometheus text format"),
        (VllmMetrics(body=b"# TYPE other_thing gauge\nother_thing 1\n"), "none of the names"),
    ],
)
def test_a_server_without_metrics_or_with_broken_ones_is_not_exposed_in_one_note(tmp_path, exposition, says):
    with LoopbackServer(steady(0.0, 0.0), model="m", metrics=exposition) as server:
        code = _run(tmp_path, server.url, "--concurrency", "1,2", "--num-requests", "3", "--output-len", "2")
    assert code == 0  # the measurement is whole
    result, run = _result(tmp_path)
    assert [s["completed"] for s in result["steps"]] == [3, 3]
    first, second = (s["server_metrics"] for s in result["steps"])
    assert not first["exposed"] and first["note"].startswith("not exposed: ") and says in first["note"]
    assert not second["exposed"] and "not asked again" in second["note"]
    assert result["server_metrics"]["exposed"] is False
    notes = [line for line in summary_md(run).splitlines() if line.startswith("server metrics:")]
    assert len(notes) == 1 and says in notes[0]
    if exposition is not None:
        assert exposition.scrapes == 1  # asked once, at the first step; never again


def test_a_metrics_endpoint_that_never_answers_does_not_stall_the_step(tmp_path):
    """A /metrics that accepts the connection and sends nothing: each scrape ends at its bound."""
    stop = threading.Event()

    class Silent(socketserver.BaseRequestHandler):
        def handle(self):
            stop.wait(30)

    silent = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Silent)
    silent.daemon_threads = True
    thread = threading.Thread(target=silent.serve_forever, daemon=True)
    thread.start()
    try:
        with LoopbackServer(steady(0.0, 0.0), model="m") as server:
            url = f"http://127.0.0.1:{silent.server_address[1]}/metrics"
            code = _run(tmp_path, server.url, "--num-requests", "3", "--output-len", "2", "--metrics-url", url)
    finally:
        stop.set()
        silent.shutdown()
        silent.server_close()
        thread.join(10)
    assert code == 0
    result, _ = _result(tmp_path)
    note = result["steps"][0]["server_metrics"]["note"]
    assert result["steps"][0]["completed"] == 3 and f"took over {metrics.SCRAPE_TIMEOUT_S:g} s" in note


def test_metrics_off_scrapes_nothing(tmp_path):
    exposed = VllmMetrics()
    with LoopbackServer(steady(0.0, 0.0), model="m", metrics=exposed) as server:
        assert _run(tmp_path, server.url, "--num-requests", "2", "--output-len", "2", "--metrics-url", "off") == 0
    result, _ = _result(tmp_path)
    assert exposed.scrapes == 0 and result["steps"][0]["server_metrics"]["exposed"] is False


def test_the_sampler_keeps_a_bounded_timeline(monkeypatch):
    monkeypatch.setattr(metrics, "MAX_SAMPLES", 4)
    exposed = VllmMetrics()

    async def sample(url: str) -> metrics.Sampler:
        sampler = metrics.Sampler(url, interval_s=0.001)
        await sampler.start()
        while exposed.scrapes < 12:
            await asyncio.sleep(0.001)
        await sampler.stop()
        return sampler

    with LoopbackServer(steady(0.0, 0.0), model="m", metrics=exposed) as server:
        sampler = asyncio.run(sample(server.url.removesuffix("/v1") + "/metrics"))
    assert sampler.failure is None and 1 <= len(sampler.samples) < 4
    assert sampler.report()["exposed"]


# ---- reasoning models -------------------------------------------------------------------------
def test_chunk_parts_separates_the_reasoning_from_the_answer():
    assert chunk_parts({"choices": [{"delta": {"reasoning_content": "hm"}}]}, chat=True) == (None, "hm")
    assert chunk_parts({"choices": [{"delta": {"reasoning": "hm"}}]}, chat=True) == (None, "hm")
    assert chunk_parts({"choices": [{"delta": {"content": "A", "reasoning_content": None}}]}, chat=True) == ("A", None)
    assert chunk_parts({"choices": [{"text": "A"}]}, chat=False) == ("A", None)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_tokens_are_counted_apart_and_the_first_answer_token_is_timed(tmp_path, field):
    """Each reply: 10 tokens 20 ms apart after a TTFT of 30 ms, the first 4 the reasoning's: the first answer
    token comes 4 gaps after the first token."""
    plan = lambda i, body, n: Plan(ttft_s=0.030, gaps_s=[0.020] * 9, reasoning_tokens=4, reasoning_field=field)
    with LoopbackServer(plan, model="m") as server:
        code = _run(tmp_path, server.url, "--api", "chat", "--num-requests", "3", "--output-len", "10")
    assert code == 0
    result, run = _result(tmp_path)
    step = result["steps"][0]
    assert step["reasoning"] == {
        "requests": 3,
        "reasoning_tokens": 12,
        "answer_tokens": 18,
        "counted_by": ["events"],
        "without_answer": 0,
    }
    assert step["output_tokens"] == 30  # the server's usage: reasoning and answer
    for record in result["records"]["concurrency 1"]:
        assert (record["reasoning_tokens"], record["answer_tokens"]) == (4, 6)
        assert record["ttfa_ms"] > record["ttft_ms"]  # the answer's first token is the fifth
    assert step["ttfa_ms"]["p50"] > step["ttft_ms"]["p50"]
    summary = summary_md(run)
    assert "3 replies reasoned: 12 reasoning tokens and 18 answer tokens" in summary
    assert "ttfa_p50_ms" in summary


@pytest.mark.parametrize("chat", [True, False])
def test_the_time_to_the_first_answer_token_is_exact_on_a_clock_the_server_steps(chat):
    """TTFT 30 ms, then a token every 20 ms, the first 4 the reasoning's: the first answer token at 110 ms
    (chat). The completions API carries no reasoning: its first answer token is its first token."""
    clock = SteppedClock(start_ns=1_000)
    plan = lambda i, body, n: Plan(ttft_s=0.030, gaps_s=[0.020] * 9, reasoning_tokens=4)
    with LoopbackServer(plan, model="m", clock=clock) as server:
        endpoint = Endpoint(server.url, "m", chat=chat)
        specs = sessions_of([RequestSpec(0, "a b", 10), RequestSpec(1, "c", 10)])
        result = asyncio.run(run_load(endpoint, specs, Load(concurrency=1), clock=clock))
    block = step_figures(result.records, None, None)
    for record in result.records:
        assert record.ok and record.ttft_ns == 30_000_000
        assert record.ttfa_ns == (110_000_000 if chat else 30_000_000)
        assert (record.reasoning_tokens, record.answer_tokens) == ((4, 6) if chat else (0, 10))
        if chat:
            assert record.reasoning_text == " t0 t1 t2 t3" and record.answer_text == " t4 t5 t6 t7 t8 t9"
    assert block["ttfa_ms"]["p50"] == (110.0 if chat else 30.0) and block["ttft_ms"]["p50"] == 30.0
    assert block["reasoning"]["reasoning_tokens"] == (8 if chat else 0)


def test_a_reply_without_reasoning_has_its_ttfa_equal_to_its_ttft():
    with LoopbackServer(steady(0.0, 0.0), model="m") as server:
        endpoint = Endpoint(server.url, "m", chat=True)
        result = asyncio.run(run_load(endpoint, sessions_of([RequestSpec(0, "a b", 3)]), Load(concurrency=1)))
    (record,) = result.records
    assert record.ok and record.ttfa_ns == record.ttft_ns and record.reasoning_tokens == 0
    assert record.answer_text == record.text == " t0 t1 t2"


def test_the_servers_reasoning_count_is_used_when_it_gives_one_and_believable():
    record = RequestRecord(0, token_ns=[1, 2, 3], reasoning_events=2, reasoning_text="ab")
    record.usage = {"completion_tokens": 3, "completion_tokens_details": {"reasoning_tokens": 2}}
    count_tokens(record, "x")
    assert (record.reasoning_tokens, record.reasoning_source, record.answer_tokens) == (2, "usage", 1)
    odd = RequestRecord(0, token_ns=[1, 2, 3], reasoning_events=2, reasoning_text="ab")
    odd.usage = {"completion_tokens": 3, "completion_tokens_details": {"reasoning_tokens": 99}}
    count_tokens(odd, "x")
    assert (odd.reasoning_tokens, odd.reasoning_source) == (2, "events")  # more than generated: not believed


def test_usage_reasoning_counts_from_the_loopback(tmp_path):
    plan = lambda i, body, n: Plan(gaps_s=[0.0] * 5, reasoning_tokens=2, usage_reasoning=True)
    with LoopbackServer(plan, model="m") as server:
        assert _run(tmp_path, server.url, "--api", "chat", "--num-requests", "2", "--output-len", "6") == 0
    result, _ = _result(tmp_path)
    assert result["steps"][0]["reasoning"]["counted_by"] == ["usage"]
    assert result["steps"][0]["reasoning"]["reasoning_tokens"] == 4


def test_a_conversation_carries_the_answer_not_the_reasoning(tmp_path):
    plan = lambda i, body, n: Plan(gaps_s=[0.0] * 3, reasoning_tokens=2)
    with LoopbackServer(plan, model="m") as server:
        code = _run(tmp_path, server.url, "--multi-turn", "2", "--num-requests", "1", "--output-len", "4")
        bodies = list(server.bodies)
    assert code == 0
    second = next(b for b in bodies[1:] if len(b["messages"]) == 3)  # after the warm-up's turns
    assert second["messages"][1] == {"role": "assistant", "content": " t2 t3"}


class _Engine:
    """What the serving stage asks of a serving engine, pointed at a loopback server."""

    def __init__(self, url: str) -> None:
        self.url, self.served_model = url, "m"

    def request_extra(self, output_length: int) -> dict:
        return {"ignore_eos": True}

    def prompt(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))

    def failure(self) -> str | None:
        return None


def test_the_serving_vendor_step_scrapes_the_servers_metrics_too():
    from types import SimpleNamespace

    from contract.llm_workload import PromptSource
    from tools.measure import serving_stage

    exposed = VllmMetrics(preemptions_per_request=1, kv_cache_usage=0.5)
    workload = serving_stage.ServingWorkload(concurrency=[2], requests=4, input_length=8, output_length=3, warmup=1)
    config = SimpleNamespace(precision=0.99, max_duration_s=5.0)
    with LoopbackServer(steady(0.0, 0.0), model="m", metrics=exposed) as server:
        block = serving_stage.measure_step(_Engine(server.url), PromptSource(0, 100, 0), workload, 2, config)
    m = block["server_metrics"]
    assert m["exposed"] and m["server"] == "vllm"
    assert m["preemptions"] == block["requests"] and m["ttft_ms"]["count"] == block["requests"]
    assert m["kv_cache_usage"]["peak"] == 0.5 and len(block["_records"]) == block["requests"]
    assert "kv_cache_mean_peak 50.0 % / 50.0 %" in serving_stage.server_line(block)
    assert serving_stage.server_line({"server_metrics": {"exposed": False, "note": "not exposed: x"}}).endswith(
        "not exposed: x"
    )
