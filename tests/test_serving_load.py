"""Workloads (reproducible from the seed, the shipped prompt files, bad files), arrival processes,
a step's figures (goodput, SLO attainment, intervals) and the capacity bisection."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from common.errors import ConfigError, DataError
from tools.serving import workload
from tools.serving.capacity import search
from tools.serving.client import RequestRecord
from tools.serving.figures import SLO, StepStop, slo_verdict, step_figures, wilson
from tools.serving.load import Load, arrivals

FIXTURES = Path(__file__).parent / "fixtures" / "serving"
FIXED = workload.LengthSpec("fixed", 8)


# ---- workloads --------------------------------------------------------------------------
def test_a_seed_makes_the_same_requests_and_another_seed_others():
    spec = workload.LengthSpec.parse("uniform:4:40", "--input-len")
    a = workload.synthetic(20, spec, spec, seed=3, text=workload.Text())
    b = workload.synthetic(20, spec, spec, seed=3, text=workload.Text())
    c = workload.synthetic(20, spec, spec, seed=4, text=workload.Text())
    assert [(s.prompt, s.max_tokens) for s in a] == [(s.prompt, s.max_tokens) for s in b]
    assert [s.prompt for s in a] != [s.prompt for s in c]
    assert all(4 <= len(s.prompt.split()) <= 40 and 4 <= s.max_tokens <= 40 for s in a)


@pytest.mark.parametrize(
    "text, message",
    [("0", "at least 1"), ("uniform:9:3", "MIN <= MAX"), ("zipf:1:2", "not a length"), ("x", "not a length")],
)
def test_bad_lengths_are_one_config_line(text, message):
    with pytest.raises(ConfigError, match=message):
        workload.LengthSpec.parse(text, "--input-len")


def test_a_normal_length_is_never_below_one():
    rng = random.Random(0)
    assert min(workload.LengthSpec("normal", 2, 50).draw(rng) for _ in range(500)) == 1


class _Chars:
    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_with_a_tokenizer_a_synthetic_prompt_has_exactly_its_length():
    specs = workload.synthetic(5, workload.LengthSpec("fixed", 37), FIXED, seed=1, text=workload.Text(_Chars()))
    assert all(len(s.prompt) == 37 and s.input_tokens == 37 for s in specs)


def test_shared_prefix_groups_share_their_prefix():
    specs = workload.shared_prefix(9, 3, 16, FIXED, FIXED, seed=0, text=workload.Text())
    prefixes = {s.group: " ".join(s.prompt.split()[:16]) for s in specs}
    assert len(set(prefixes.values())) == 3
    assert all(" ".join(s.prompt.split()[:16]) == prefixes[s.group] for s in specs)
    assert [s.group for s in specs] == [0, 1, 2] * 3


def test_the_shipped_sharegpt_and_jsonl_files_read():
    share = workload.read_prompts(FIXTURES / "sharegpt_tiny.json")
    assert len(share) == 3 and share[0][0] == [
        "What is the capital of France and why is it famous",
        "Name one museum there",
    ]
    assert share[0][1] == len("Paris is the capital of France and is famous for art food and the Eiffel Tower".split())
    lines = workload.read_prompts(FIXTURES / "prompts_tiny.jsonl")
    assert [n for _, n in lines] == [24, 8, None, 1]
    specs = workload.from_prompt_file(FIXTURES / "prompts_tiny.jsonl", 8, None, seed=5, text=workload.Text())
    again = workload.from_prompt_file(FIXTURES / "prompts_tiny.jsonl", 8, None, seed=5, text=workload.Text())
    assert [s.prompt for s in specs] == [s.prompt for s in again]
    assert {s.prompt for s in specs} == {p[0][0] for p in lines}  # cycles through the file


@pytest.mark.parametrize(
    "content, where",
    [
        ('{"prompt": "ok"}\n{"prompt": \n', "bad.jsonl:2: not valid JSON or JSONL"),
        ('[{"prompt": "a"}, ', "bad.jsonl: not valid JSON"),
        ('{"prompt": 5}\n', "bad.jsonl:1: a prompt record needs a string 'prompt'"),
        ("\n\n", "bad.jsonl: no prompts"),
        ('{"prompt": "a", "output_tokens": 0}\n', "bad.jsonl:1: 'output_tokens' must be a positive integer"),
    ],
)
def test_a_bad_prompt_file_is_a_data_error_naming_the_line(tmp_path, content, where):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DataError) as err:
        workload.read_prompts(path)
    assert where in str(err.value) and "\n" not in str(err.value)


def test_a_trace_replays_from_its_first_timestamp_in_order():
    specs = workload.read_trace(FIXTURES / "trace_tiny.jsonl", None, seed=0, text=workload.Text())
    assert [s.arrival_s for s in specs] == [0.0, 0.0, 0.25, 0.7]
    assert [s.max_tokens for s in specs] == [4, 2, 3, 5]
    assert len(specs[0].prompt.split()) == 12 and specs[3].prompt == "a prompt from the trace itself"


def test_multi_turn_conversations_keep_their_order():
    chains = workload.multi_turn([["a", "b", "c"], ["d"]], FIXED, seed=0)
    assert [[(s.conversation, s.turn) for s in c] for c in chains] == [[(0, 0), (0, 1), (0, 2)], [(1, 0)]]


# ---- arrivals -------------------------------------------------------------------------------
def test_constant_arrivals_are_evenly_spaced():
    it = arrivals(4.0, "constant", 1.0, seed=0)
    assert [next(it) for _ in range(4)] == pytest.approx([0.0, 0.25, 0.5, 0.75])


@pytest.mark.parametrize("shape, burstiness", [("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)])
def test_random_arrivals_have_the_rate_and_repeat_from_the_seed(shape, burstiness):
    it = arrivals(10.0, shape, burstiness, seed=7)
    times = [next(it) for _ in range(20001)]
    again = arrivals(10.0, shape, burstiness, seed=7)
    assert [next(again) for _ in range(50)] == times[:50]
    gaps = [b - a for a, b in zip(times, times[1:])]
    mean = sum(gaps) / len(gaps)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
    assert mean == pytest.approx(0.1, rel=0.05)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.1)  # gamma's CV is 1 / sqrt(shape)


def test_an_infinite_rate_sends_everything_at_once():
    it = arrivals(math.inf, "poisson", 1.0, seed=0)
    assert [next(it) for _ in range(3)] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"concurrency": 0}, "concurrency"),
        ({"rate": 0.0}, "request_rate"),
        ({"rate": 1.0, "burstiness": 0.0}, "burstiness"),
        ({"rate": 1.0, "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_bad_loads_are_config_errors(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        Load(**kwargs)


# ---- a step's figures --------------------------------------------------------------------------
def _record(i: int, ttft_ms: float, gap_ms: float, tokens: int = 5, ok: bool = True) -> RequestRecord:
    sent = i * 100_000_000
    first = sent + int(ttft_ms * 1e6)
    token_ns = [first + int(k * gap_ms * 1e6) for k in range(tokens)]
    record = RequestRecord(
        i,
        sent_ns=sent,
        token_ns=token_ns,
        end_ns=token_ns[-1],
        output_tokens=tokens,
        input_tokens=10,
        token_source="usage",
    )
    if not ok:
        record.error = {"kind": "http_500", "detail": "x"}
    return record


def test_goodput_and_attainment_count_only_requests_meeting_every_bound():
    records = [_record(i, ttft_ms=10 if i % 2 else 30, gap_ms=4) for i in range(40)]  # odd: TTFT 10, even: 30
    records[1].error = {"kind": "stall", "detail": "x"}  # a failure never meets the SLO
    slo = SLO(ttft_ms=20, tpot_ms=5)
    block = step_figures(records, slo, precision=None)
    window = (records[-1].end_ns - records[0].sent_ns) / 1e9
    assert block["slo"]["met"] == 19 and block["slo"]["attainment"] == pytest.approx(19 / 40)
    assert block["throughput"]["goodput_requests_per_s"]["value"] == pytest.approx(19 / window)
    assert block["throughput"]["goodput_tokens_per_s"]["value"] == pytest.approx(19 * 5 / window)
    assert block["throughput"]["requests_per_s"]["value"] == pytest.approx(39 / window)
    assert block["throughput"]["total_tokens_per_s"]["value"] == pytest.approx(39 * 15 / window)
    assert block["failed"] == 1 and block["errors"] == {"stall": 1}
    assert block["slo"]["attainment_ci95"] == pytest.approx(wilson(19, 40))
    assert block["slo"]["verdict"] == "misses"  # 47.5 % of 40 cannot reach the default 90 %
    assert block["tpot_ms"]["mean"] == pytest.approx(4.0)
    assert block["tokens_per_s_per_user"] == pytest.approx(250.0)
    assert block["itl_ms"]["count"] == 39 * 4
    assert (block["input_tokens"], block["output_tokens"]) == (39 * 10, 39 * 5)  # the completed requests'


def test_prompt_tokens_no_request_knows_are_none_not_zero():
    # token_source "events" (no usage, no tokenizer): output tokens counted one event a token, input unknown
    records = [_record(i, 10, 4) for i in range(8)]
    for record in records:
        record.input_tokens, record.token_source = None, "events"
    block = step_figures(records, None, None)
    assert block["input_tokens"] is None and block["output_tokens"] == 8 * 5
    records[3].input_tokens = 7  # one known: the sum of what is known
    assert step_figures(records, None, None)["input_tokens"] == 7


def test_a_tight_tpot_bound_fails_every_request():
    block = step_figures([_record(i, 10, 4) for i in range(20)], SLO(tpot_ms=3.9), None)
    assert block["slo"]["met"] == 0 and block["throughput"]["goodput_requests_per_s"]["value"] == 0


def test_wilson_interval_and_slo_verdicts():
    assert wilson(0, 0) is None
    low, high = wilson(50, 50)
    assert high == pytest.approx(1.0) and low == pytest.approx(50 / (50 + 1.959964**2), rel=1e-6)
    assert slo_verdict(1.0, [0.93, 1.0], 0.9) == "meets"
    assert slo_verdict(0.5, [0.3, 0.7], 0.9) == "misses"
    assert slo_verdict(0.9, [0.85, 0.95], 0.9) == "undecided"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"ttft_ms": -1}, "--slo.ttft_ms: -1 is negative"),
        ({"tpot_ms": "fast"}, "--slo.tpot_ms: 'fast' must be a number"),
        ({"latency": 3}, "--slo.latency: unknown SLO key"),
        ({"percentile": 90}, "give at least one of"),
        ({"ttft_ms": 5, "percentile": 0}, "--slo.percentile"),
    ],
)
def test_bad_slos_are_one_config_line(data, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        SLO.parse(data, "--slo")


def test_a_step_asking_precision_is_invalid_without_it():
    block = step_figures([_record(i, 10, 4) for i in range(8)], None, precision=0.05)
    assert not block["verdict"]["valid"]
    assert any("requests_per_s has no interval" in r for r in block["verdict"]["reasons"])


def test_the_stop_rule_waits_for_its_minimum_then_stops_without_precision():
    stop = StepStop(min_requests=5, precision=None, max_duration_s=10)
    records = [_record(i, 10, 4) for i in range(5)]
    assert not stop(records[:4], 0)
    assert stop(records, 0) and stop.reason == "minimums met"


def test_the_stop_rule_stops_at_max_duration_when_imprecise():
    stop = StepStop(min_requests=2, precision=0.01, max_duration_s=1.0)
    records = [_record(i, 10, 4) for i in range(3)]
    assert not stop(records, 500_000_000)
    assert stop(records, 1_000_000_000) and stop.reason == "max_duration_s reached"


# ---- capacity bisection ----------------------------------------------------------------------
def test_concurrency_bisection_finds_the_largest_meeting_load_and_counts_its_probes():
    asked = []
    found = search("concurrency", lambda c: asked.append(c) or ("meets" if c <= 37 else "misses"), 1, 64)
    assert (found.capacity, found.interval) == (37, [37, 38])
    assert len(found.probes) == len(asked) == 2 + math.ceil(math.log2(63))


def test_undecided_counts_as_a_miss():
    found = search("concurrency", lambda c: "meets" if c <= 3 else ("undecided" if c == 4 else "misses"), 1, 16)
    assert found.capacity == 3


def test_rate_bisection_brackets_within_its_tolerance():
    found = search("rate", lambda r: "meets" if r <= 7.3 else "misses", 1.0, 100.0, rtol=0.1)
    low, high = found.interval
    assert low <= 7.3 < high and high / low <= 1.1 and found.capacity == low


def test_capacity_outside_the_range_says_so():
    assert search("concurrency", lambda c: "misses", 1, 8).capacity is None
    above = search("concurrency", lambda c: "meets", 1, 8)
    assert above.capacity == 8 and above.above_range and len(above.probes) == 2


def test_a_tokenizer_count_far_from_usage_is_noted():
    records = [_record(i, 10, 4) for i in range(4)]
    for r in records:
        r.token_source, r.usage_output_tokens, r.tokenizer_output_tokens = "tokenizer", 4, 5
    assert (
        "counted 20 output tokens where the server's usage says 16"
        in step_figures(records, None, None)["token_count_note"]
    )
    for r in records:
        r.usage_output_tokens = 5
    assert step_figures(records, None, None)["token_count_note"] is None


def test_the_report_orders_steps_by_load_and_draws_their_timeslices():
    from common.serving_record import ServingStep
    from utils.results.report.serving import ordered, timeslice_plots

    def step(label, load, out, per_user):
        block = step_figures([_record(i, 10, 4) for i in range(20)], SLO(ttft_ms=20), None)
        block["throughput"]["output_tokens_per_s"]["value"] = out
        block.update(label=label, load=load, tokens_per_s_per_user=per_user)
        return block

    steps = [
        step("rate inf/s", {"request_rate": "inf"}, 90, 10),
        step("concurrency 4", {"concurrency": 4}, 80, 20),
        step("rate 2/s", {"request_rate": 2.0}, 30, 50),
    ]
    steps.append(step("concurrency 1", {"concurrency": 1}, 20, 60))
    rows = tuple(ServingStep.of(s) for s in steps)
    assert [s.label for s in ordered(rows)] == ["concurrency 1", "concurrency 4", "rate 2/s", "rate inf/s"]
    from tools.serving.tables import pareto

    front = pareto(steps)
    assert sorted(p["label"] for p in front) == ["concurrency 1", "concurrency 4", "rate 2/s", "rate inf/s"]
    steps.append(step("concurrency 2", {"concurrency": 2}, 25, 40))  # beaten by rate 2/s on both
    assert "concurrency 2" not in [p["label"] for p in pareto(steps)]
    plots = dict(timeslice_plots(list(ordered(rows))))
    tokens = plots["output tokens/s per timeslice"]
    assert tokens is not None and [t["name"] for t in tokens["data"]] == [s.label for s in ordered(rows)]
    slices = rows[0].timeslices["items"]
    assert tokens["data"][0]["x"] == [i["index"] + 1 for i in slices]
    assert plots["TTFT p50 per timeslice"] is not None


def _at(i: int, sent_ms: float) -> RequestRecord:
    sent = int(sent_ms * 1e6)
    tokens = [sent + 5_000_000 + k * 1_000_000 for k in range(5)]
    return RequestRecord(
        i, sent_ns=sent, token_ns=tokens, end_ns=tokens[-1], output_tokens=5, input_tokens=3, token_source="usage"
    )


def test_a_step_whose_throughput_steps_up_is_invalid_as_drifting():
    slow = [_at(i, 100.0 * i) for i in range(60)]  # 10 requests/s for 6 s ...
    fast = [_at(60 + i, 6000.0 + 20.0 * i) for i in range(300)]  # ... then 50 requests/s for 6 s
    block = step_figures(slow + fast, None, precision=None)
    assert block["drift"]["requests_per_s"]["drifting"]
    assert any(r.startswith("drifting: requests_per_s rose") for r in block["verdict"]["reasons"])
    steady_block = step_figures([_at(i, 20.0 * i) for i in range(600)], None, precision=None)
    assert steady_block["verdict"]["valid"] and not steady_block["drift"]["requests_per_s"]["drifting"]


def test_a_capacity_probe_runs_enough_requests_to_decide_its_percentile():
    from tools.serving.session import requests_to_decide

    for percentile in (50, 90, 95, 99):
        n = requests_to_decide(percentile)
        assert slo_verdict(1.0, wilson(n, n), percentile / 100) == "meets"
        assert slo_verdict(1.0, wilson(n - 1, n - 1), percentile / 100) == "undecided"
    assert requests_to_decide(90) == 35 and requests_to_decide(100) == 1
    assert slo_verdict(1.0, wilson(3, 3), 1.0) == "meets" and slo_verdict(0.99, wilson(99, 100), 1.0) == "misses"


# ---- honest figures and output audits (issue 41, items 3 and 4) ----------------------------------
def test_a_one_event_reply_under_a_tpot_bound_is_not_judged_not_met():
    records = [_record(i, 10, 4) for i in range(10)]
    for r in records[:3]:  # one event carrying the whole reply: no TPOT
        r.token_ns = r.token_ns[:1]
        r.end_ns = r.token_ns[0]
    block = step_figures(records, SLO(ttft_ms=20, tpot_ms=5), None)
    assert (block["slo"]["met"], block["slo"]["not_judged"]) == (7, 3)
    assert block["slo"]["attainment"] == pytest.approx(1.0)  # 7 of the 7 judged, not 10 of 10
    assert block["slo"]["attainment_ci95"] == pytest.approx(wilson(7, 7))
    assert any("3 of 10 requests not judged on TPOT" in w for w in block["verdict"]["not_judged"])
    assert block["audits"]["tpot_not_judged"] == 3
    slow = records[0]
    slow.token_ns = [slow.sent_ns + 50_000_000]  # TTFT 50 ms: it misses on TTFT whatever its TPOT
    assert SLO(ttft_ms=20, tpot_ms=5).judge(slow) == "missed"
    assert SLO(ttft_ms=200).judge(slow) == "met"  # no TPOT bound: nothing left unjudged


def test_total_tokens_per_s_is_na_when_a_prompt_count_is_unknown():
    records = [_record(i, 10, 4) for i in range(8)]
    assert step_figures(records, None, None)["throughput"]["total_tokens_per_s"]["value"] is not None
    records[5].input_tokens = None
    total = step_figures(records, None, None)["throughput"]["total_tokens_per_s"]
    assert total["value"] is None and total["ci95"] is None and "n/a" in total["not_judged"]


def _scheduled(records, gap_ms: float, late_ms: list[float], slot_ms: list[float] | None = None):
    for k, r in enumerate(records):
        r.scheduled_ns = int(k * gap_ms * 1e6)
        base = r.scheduled_ns + (int(slot_ms[k] * 1e6) if slot_ms else 0)
        r.slot_ns = base if slot_ms else None
        shift = base + int(late_ms[k] * 1e6) - r.sent_ns
        r.sent_ns += shift
        r.token_ns = [t + shift for t in r.token_ns]
        r.end_ns = (r.end_ns or 0) + shift
    return records


def test_a_rate_step_whose_client_fell_behind_is_invalid_naming_the_lag():
    n = 20
    on_time = _scheduled([_record(i, 10, 4) for i in range(n)], 100.0, [1.0] * n)
    block = step_figures(on_time, None, None)
    assert block["verdict"]["valid"] and block["audits"]["schedule"]["bound_ms"] == pytest.approx(100.0)
    late = _scheduled([_record(i, 10, 4) for i in range(n)], 100.0, [1.0] * (n - 1) + [250.0])
    block = step_figures(late, None, None)
    (reason,) = [r for r in block["verdict"]["reasons"] if "coordinated omission" in r]
    assert "schedule lag p99" in reason and "above 100.0 ms" in reason
    # under max_concurrency, the wait for a slot is the cap's, not the client's lag
    capped = _scheduled([_record(i, 10, 4) for i in range(n)], 100.0, [1.0] * n, slot_ms=[400.0] * n)
    block = step_figures(capped, None, None)
    assert block["verdict"]["valid"] and block["schedule_lag_ms_p99"] > 400 and block["client_lag_ms_p99"] < 2
    # rate inf: every arrival due at once, nothing to keep to
    burst = _scheduled([_record(i, 10, 4) for i in range(n)], 0.0, [float(k) * 30 for k in range(n)])
    block = step_figures(burst, None, None)
    assert block["verdict"]["valid"] and "every request was due at once" in block["verdict"]["not_judged"][0]


def test_the_output_length_audit_follows_test09_and_spares_replies_ended_on_eos():
    records = [_record(i, 10, 4, tokens=5) for i in range(10)]
    for r in records:
        r.max_tokens, r.finish_reason, r.usage_output_tokens = 5, "length", 5
    assert step_figures(records, None, None)["audits"]["output_length"]["ratio"] == 1.0
    for r in records[:4]:
        r.max_tokens = 10  # asked 10, made 5: mean 5 against 7 asked
    block = step_figures(records, None, None)
    assert any("output length audit" in r and "±10%" in r for r in block["verdict"]["reasons"])
    for r in records[:4]:
        r.finish_reason = "stop"  # ended on EOS: not held to the length asked
    block = step_figures(records, None, None)
    assert block["audits"]["output_length"]["requests"] == 6 and block["verdict"]["valid"]
    for r in records:
        r.finish_reason = "stop"
    assert step_figures(records, None, None)["audits"]["output_length"] == {
        "judged": False,
        "why": "every completed reply ended on EOS",
    }


def test_the_token_count_audit_notes_re_encoding_and_fails_a_wrong_count():
    records = [_record(i, 10, 4, tokens=5) for i in range(6)]
    for r in records:
        r.usage_output_tokens, r.tokenizer_output_tokens = 5, 7  # 1.4x: re-encoding, noted
    block = step_figures(records, None, None)
    assert block["verdict"]["valid"] and block["token_count_note"] and block["audits"]["token_counts"]["ratio"] == 1.4
    for r in records:
        r.tokenizer_output_tokens = 15  # 3x: no re-encoding explains that
    block = step_figures(records, None, None)
    assert any("token count audit" in r and "says 30" in r and "counts 90" in r for r in block["verdict"]["reasons"])
    for r in records:
        r.tokenizer_output_tokens = None
    assert step_figures(records, None, None)["audits"]["token_counts"]["judged"] is False


def test_usage_that_cannot_be_true_is_refused_with_a_note():
    from tools.serving.client import count_tokens

    for bad in (-5, 10**12, True, "12", 2.5):
        record = RequestRecord(0, token_ns=[1, 2, 3], text="abc", bytes_received=400)
        record.usage = {"prompt_tokens": 3, "completion_tokens": bad}
        count_tokens(record, "x y z")
        assert (record.token_source, record.output_tokens, record.usage_output_tokens) == ("events", 3, None)
        assert record.notes and record.notes[0].startswith("usage refused: completion_tokens")
    record = RequestRecord(0, token_ns=[1], text="abc", bytes_received=400, usage={"completion_tokens": 64})
    count_tokens(record, "x")
    assert (record.token_source, record.output_tokens, record.notes) == ("usage", 64, [])


class _ClosedUnder:
    """An aiohttp session's stand-in for ``post``: a request that is cancelled while it waits for its
    answer ends in the ClientOSError aiohttp raises when the connection is closed under it, and the
    cancellation itself is not passed on (what was seen with real aiohttp, a stop sent during a run)."""

    def __init__(self) -> None:
        self.posts = 0

    def post(self, url: str, json: dict, timeout: object) -> "_ClosedUnder":
        self.posts += 1
        return self

    async def __aenter__(self) -> None:
        import asyncio

        import aiohttp

        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise aiohttp.ClientOSError("connection closed") from None

    async def __aexit__(self, *exc: object) -> bool:
        return False


def test_a_cancelled_stream_sends_no_further_request_when_its_reply_swallows_the_cancel():
    import asyncio

    from tools.serving.client import Channel, RequestSpec
    from tools.serving.load import Endpoint, _Issuer

    session = _ClosedUnder()

    async def scenario() -> tuple[int, bool]:
        issuer = _Issuer(Endpoint("http://127.0.0.1:9/v1", "m"), Channel(session, "http://127.0.0.1:9/v1", False), None)
        chains = iter([[RequestSpec(k, "hello", 4)] for k in range(5)])
        task = asyncio.ensure_future(issuer.stream(chains))
        while session.posts == 0:
            await asyncio.sleep(0)
        task.cancel()
        for _ in range(20):  # turns of the loop, not time: the stream either ends or sends its next request
            await asyncio.sleep(0)
        posts, cancelled = session.posts, task.done() and task.cancelled()
        while not task.done():  # without the rule, each cancel ends one request: 5 at most
            task.cancel()
            await asyncio.sleep(0)
        return posts, cancelled

    assert asyncio.run(scenario()) == (1, True)
