"""The streaming client against a real loopback server: exact TTFT/ITL/TPOT/E2E arithmetic on a
clock the server steps (no wall-clock assertion), every fault counted with its reason, the SSE
parser at its edges, and the load modes' concurrency."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tools.serving.client import (
    Channel,
    MalformedSSE,
    RequestRecord,
    RequestSpec,
    SSEParser,
    chunk_text,
    count_tokens,
    finish_reason_name,
    request_body,
    stamping_connector,
    stream_request,
)
from tools.serving.load import Endpoint, Load, run_load, sessions_of
from tools.serving.loopback import LoopbackServer, Plan, SteppedClock, steady


async def _one(url: str, spec: RequestSpec, chat: bool, clock, timeout=None) -> RequestRecord:
    # As run_load's sessions: arrivals stamped as bytes come in, the headers' too, which a stepped loopback
    # waits for before it sets the first token's time (else it waits its 10-s limit, then goes on).
    async with aiohttp.ClientSession(connector=stamping_connector(clock)) as session:
        record = RequestRecord(spec.index)
        route = url + ("/chat/completions" if chat else "/completions")
        await stream_request(Channel(session, route, chat, clock, timeout), request_body(spec, "m", chat), record)
        count_tokens(record, spec.prompt)
        return record


@pytest.mark.parametrize("chat", [False, True])
def test_scripted_timings_give_exact_ttft_itl_tpot_e2e(chat):
    clock = SteppedClock(start_ns=1_000)
    gaps = [0.010, 0.025, 0.005, 0.040]
    with LoopbackServer(lambda i, body, n: Plan(ttft_s=0.050, gaps_s=gaps), model="m", clock=clock) as server:
        record = asyncio.run(_one(server.url, RequestSpec(0, "one two three", 5), chat, clock))
    assert record.ok and record.error is None
    assert record.ttft_ns == 50_000_000
    assert record.itl_ns() == [10_000_000, 25_000_000, 5_000_000, 40_000_000]
    assert record.output_tokens == 5 and record.token_source == "usage"
    assert record.input_tokens == 3  # the loopback's usage: one token a word
    assert record.tpot_ns == pytest.approx(80_000_000 / 4)
    assert record.e2e_ns == 130_000_000
    assert record.text == " t0 t1 t2 t3 t4"


@pytest.mark.parametrize("chat", [False, True])
def test_a_reply_whose_only_event_is_the_finish_is_complete_and_timed_from_it(chat):
    """One event carries the whole reply with empty text and the finish_reason (a server that merged
    every token into it): a completed request, its first output at that event, no TPOT from one event."""
    clock = SteppedClock(start_ns=1_000)
    with LoopbackServer(lambda i, body, n: Plan(ttft_s=0.030, text=""), model="m", clock=clock) as server:
        record = asyncio.run(_one(server.url, RequestSpec(0, "one two", 1), chat, clock))
    assert record.ok and record.error is None and record.finish_reason == "length"
    assert (record.ttft_ns, record.e2e_ns, record.itl_ns(), record.output_tokens) == (30_000_000, 30_000_000, [], 1)
    assert record.tpot_ns is None and record.text == ""


def test_tpot_needs_two_token_events():
    assert RequestRecord(0, token_ns=[5], output_tokens=16).tpot_ns is None
    assert RequestRecord(0, token_ns=[5, 35], output_tokens=16).tpot_ns == 2.0


def test_two_requests_in_a_row_each_time_from_their_own_sending():
    clock = SteppedClock()
    plans = [Plan(ttft_s=0.002, gaps_s=[0.001]), Plan(ttft_s=0.007, gaps_s=[0.003, 0.003])]
    with LoopbackServer(lambda i, body, n: plans[i], model="m", clock=clock) as server:
        first = asyncio.run(_one(server.url, RequestSpec(0, "a", 2), False, clock))
        second = asyncio.run(_one(server.url, RequestSpec(1, "a", 3), False, clock))
    assert (first.ttft_ns, first.e2e_ns) == (2_000_000, 3_000_000)
    assert (second.ttft_ns, second.itl_ns(), second.e2e_ns) == (7_000_000, [3_000_000, 3_000_000], 13_000_000)


def test_without_usage_or_tokenizer_the_token_events_are_counted():
    record = RequestRecord(0, token_ns=[1, 2, 3], text="abc")
    count_tokens(record, "x y")
    assert (record.token_source, record.output_tokens, record.input_tokens) == ("events", 3, None)


class _Words:
    """A tokenizer that makes one token of each character (a stand-in with a known count)."""

    def encode(self, text, add_special_tokens=True):
        return list(text)


def test_a_tokenizer_counts_before_usage():
    record = RequestRecord(0, token_ns=[1, 2], text="abcd", usage={"prompt_tokens": 99, "completion_tokens": 2})
    count_tokens(record, "xyz", _Words())
    assert (record.token_source, record.output_tokens, record.input_tokens, record.usage_output_tokens) == (
        "tokenizer",
        4,
        3,
        2,
    )


def test_prefer_usage_counts_with_the_server_even_with_a_tokenizer():
    record = RequestRecord(0, token_ns=[1, 2], text="abcd", usage={"prompt_tokens": 99, "completion_tokens": 2})
    count_tokens(record, "xyz", _Words(), prefer_usage=True)
    assert (record.token_source, record.output_tokens, record.input_tokens) == ("usage", 2, 99)
    without = RequestRecord(0, token_ns=[1, 2], text="abcd")
    count_tokens(without, "xyz", _Words(), prefer_usage=True)  # no usage: the tokenizer after all
    assert (without.token_source, without.output_tokens) == ("tokenizer", 4)


def _faults(index: int, body: dict, in_flight: int) -> Plan:
    plans = {
        0: Plan(gaps_s=[0.0] * 3),
        1: Plan(status=429),
        2: Plan(status=500),
        3: Plan(gaps_s=[0.0] * 5, fault="drop", fault_at=2),
        4: Plan(gaps_s=[0.0] * 5, fault="malformed", fault_at=1),
        5: Plan(gaps_s=[0.0] * 5, fault="stall", fault_at=2),
        6: Plan(gaps_s=[0.0] * 3),
        7: Plan(gaps_s=[0.0] * 3, fault="error", fault_at=1),
        8: Plan(gaps_s=[0.0] * 3, done_marker=False),  # finished, no [DONE]: complete
        9: Plan(gaps_s=[0.0] * 3, fault="drop", fault_at=4),  # every token and its finish sent, then cut: dropped
        10: Plan(gaps_s=[0.0] * 3, fault="unfinished", fault_at=2),  # [DONE] with no finish_reason: cut short
    }
    return plans[index]


def test_every_fault_is_an_error_with_its_reason_and_the_run_completes():
    with LoopbackServer(_faults, model="m") as server:
        # The stall is request 5's alone: a token of the others 3 s late on a busy machine would be one too.
        endpoint = Endpoint(server.url, "m", stall_timeout_s=3.0, request_timeout_s=30)
        specs = [RequestSpec(i, "a b", 4) for i in range(11)]
        result = asyncio.run(run_load(endpoint, sessions_of(specs), Load(concurrency=1)))
    kinds = {r.index: (r.error or {}).get("kind") for r in result.records}
    assert kinds == {
        0: None,
        1: "http_429",
        2: "http_500",
        3: "dropped",
        4: "malformed",
        5: "stall",
        6: None,
        7: "stream_error",
        8: None,
        9: "dropped",
        10: "unfinished",
    }
    by_index = {r.index: r for r in result.records}
    assert "after 2 token events" in by_index[3].error["detail"]
    assert "not JSON" in by_index[4].error["detail"]
    assert "after 2 token events" in by_index[5].error["detail"]
    assert "scripted status 429" in by_index[1].error["detail"]
    assert [r.ok for r in result.records].count(True) == 3
    assert by_index[8].output_tokens == 4 and "scripted error mid-stream" in by_index[7].error["detail"]
    assert by_index[10].error["detail"] == "[DONE] came with no finish_reason after 2 token events"
    assert (by_index[0].finish_reason, by_index[8].finish_reason, by_index[10].finish_reason) == ("length",) * 2 + (
        None,
    )


def test_the_total_request_timeout_is_a_timeout_not_a_stall():
    with LoopbackServer(lambda i, b, n: Plan(gaps_s=[0.2] * 10), model="m") as server:
        endpoint = Endpoint(server.url, "m", stall_timeout_s=5, request_timeout_s=0.5)
        result = asyncio.run(run_load(endpoint, [[RequestSpec(0, "a", 11)]], Load(concurrency=1)))
    assert result.records[0].error["kind"] == "timeout"


def test_a_refused_connection_is_a_connect_error():
    with LoopbackServer(model="m") as server:
        url = server.url
    result = asyncio.run(run_load(Endpoint(url, "m"), [[RequestSpec(0, "a", 2)]], Load(concurrency=1)))
    assert result.records[0].error["kind"] == "connect"


# ---- SSE at its edges ---------------------------------------------------------------------
def test_sse_events_split_anywhere_and_crlf():
    parser = SSEParser()
    stream = b': keep-alive\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata: [DONE]\n\n'
    events = []
    for i in range(len(stream)):
        events += parser.feed(stream[i : i + 1])
    assert events == [b'{"a":\n1}', b"[DONE]"]


def test_sse_rejects_a_line_that_is_no_field():
    with pytest.raises(MalformedSSE):
        SSEParser().feed(b"hello world\n\n")


def test_chunk_text_skips_role_preamble_finish_only_and_usage():
    assert chunk_text({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, chat=True) is None
    assert chunk_text({"choices": [{"text": "", "finish_reason": "length"}]}, chat=False) is None
    assert chunk_text({"choices": [], "usage": {}}, chat=False) is None
    assert (
        chunk_text({"choices": [{"text": "", "finish_reason": None}]}, chat=False) == ""
    )  # a token that decodes to nothing
    assert chunk_text({"choices": [{"delta": {"content": "x"}}]}, chat=True) == "x"
    with pytest.raises(MalformedSSE):
        chunk_text({"id": 1}, chat=False)


# ---- load modes -----------------------------------------------------------------------------
def test_closed_loop_keeps_exactly_n_streams_in_flight():
    with LoopbackServer(steady(20.0, 2.0), model="m") as server:
        specs = [RequestSpec(i, "a b c", 4) for i in range(12)]
        result = asyncio.run(run_load(Endpoint(server.url, "m"), sessions_of(specs), Load(concurrency=3)))
        assert server.max_in_flight == 3
    assert len(result.records) == 12 and all(r.ok for r in result.records)


def test_a_rate_capped_by_max_concurrency_never_exceeds_the_cap():
    with LoopbackServer(steady(30.0, 1.0), model="m") as server:
        specs = [RequestSpec(i, "a", 3) for i in range(8)]
        load = Load(rate=float("inf"), max_concurrency=2)
        result = asyncio.run(run_load(Endpoint(server.url, "m"), sessions_of(specs), load))
        assert server.max_in_flight == 2
    assert len(result.records) == 8
    assert all(r.scheduled_ns == result.start_ns for r in result.records)  # all due at once, sent when a slot freed


def test_multi_turn_carries_the_replies():
    from tools.serving.workload import LengthSpec, multi_turn

    chains = multi_turn([["hello there", "and then"]], LengthSpec("fixed", 2), seed=0)
    with LoopbackServer(steady(0.0, 0.0), model="m") as server:
        result = asyncio.run(run_load(Endpoint(server.url, "m", chat=True), chains, Load(concurrency=1)))
        second = server.bodies[1]["messages"]
    assert [r.turn for r in result.records] == [0, 1]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == " t0 t1" and second[2]["content"] == "and then"


def test_load_runs_stamp_arrivals_in_the_protocol_with_exact_times():
    import sys

    stepped = SteppedClock()
    callers = []

    def clock():
        callers.append(sys._getframe(1).f_code.co_name)
        return stepped()

    with LoopbackServer(
        lambda i, body, n: Plan(ttft_s=0.030, gaps_s=[0.004, 0.011]), model="m", clock=stepped
    ) as server:
        result = asyncio.run(
            run_load(
                Endpoint(server.url, "m"),
                [[RequestSpec(0, "a b", 3)], [RequestSpec(1, "a", 3)]],
                Load(concurrency=1),
                clock=clock,
            )
        )
    assert [(r.ttft_ns, r.itl_ns(), r.e2e_ns) for r in result.records] == [
        (30_000_000, [4_000_000, 11_000_000], 45_000_000)
    ] * 2
    assert callers.count("data_received") >= 6  # every token's arrival read where the bytes arrived


def test_finish_reason_names_openai_strings_and_sglang_objects():
    assert finish_reason_name("length") == "length"
    assert finish_reason_name({"type": "stop", "matched": 2}) == "stop"
    assert finish_reason_name({"matched": 2}) == "{'matched': 2}"
