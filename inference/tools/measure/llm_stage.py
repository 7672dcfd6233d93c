"""The LLM performance stage: checks, the prefill/decode table and the server rows
for one LLM engine (``contract/llm_base.py``), in ByteMLPerf llm_perf's
and MLPerf LoadGen's terms. The metrics are defined in ``tools/measure/llm.py``.

  checks   greedy agreement and prefill logits against the framework model
           (``tools/checks/generation.py``); a failure invalidates every figure.
  table    one cell per ``input_lengths`` x ``batch_sizes``, each generating
           ``output_length`` tokens, **offline**: every request is queued, batches
           of ``batch_size`` are issued back to back; TTFT counts from the batch's
           issue. ``warmup`` generations of the cell's shape and the settle phase
           run first, untimed.
  server   per rate in ``server_target_qps`` (requests/s), requests arrive as a
           Poisson process from a seeded schedule; input and output lengths are
           uniform integers over ``server_input_length`` and ``server_output_length``
           (inclusive). One worker serves them in arrival order, one request per
           query (the contract has no continuous batching), so TTFT counts from
           the scheduled arrival and queueing shows. Pass: the
           ``server_bound_percentile`` of TTFT and of TPOT within ``ttft_bound_ms``
           and ``tpot_bound_ms``.

Every cell and row has a verdict by the rules every case gets (``tools/measure/verdict.py``,
``tools/measure/precision.py``): the minimums (``min_query_count`` queries, for a
server row ``server_requests``, and ``min_duration_s``); precision: a cell keeps
issuing until its output tokens/s is within ±``precision`` (95 % interval), a
server row until its bound percentile of TTFT is within ±``latency_precision``,
or until ``max_duration_s`` (then INVALID; the stop rule gives up earlier, with stop
reason "precision out of reach", when the figure could not get there in time); drift of
output tokens/s between the first and last third; contention; and the engine-wide checks.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator

from loguru import logger

from common.cells import interval_text
from common.record import LLMBlock, LLMRow, ServingStep
from common.scenario import OFFLINE, SERVER
from common.stats import too_few_note
from contract.config import CaseConfig, CaseView, setting
from contract.llm_base import ModelShape
from contract.llm_workload import LLMWorkload, PromptSource
from contract.phase import Verdict
from contract.settings import MAX_DURATION_REACHED
from tools.measure.contention import CpuContention
from tools.measure.llm import Generation, GenerationFigures, generate_timed
from tools.measure.loop import LoopSettings
from tools.measure.precision import (
    Settle,
    StopRule,
    Target,
    drift,
    measure_figures,
    precision_block,
    precision_reasons,
    settle,
    throughput_interval,
)
from tools.measure.scenarios import poisson_arrivals
from tools.measure.verdict import minimums_met, window_throughputs, window_verdict


# ---- the report ------------------------------------------------------------------
@dataclass
class LLMReport:
    """What the stage hands to result.json: ``llm`` plus the keys every performance report has."""

    model: dict
    table: list[LLMRow] = field(default_factory=list)
    server: list[LLMRow] = field(default_factory=list)
    greedy: dict | None = None
    numeric: dict | None = None
    engine_reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    workload: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)  # no LoadGen-style rows: the cells are in ``llm``
    raw_latencies_ns: list = field(default_factory=list)
    serving: list[ServingStep] = field(default_factory=list)  # a served LLM's steps (tools/measure/serving_stage.py)
    served_by: dict | None = None

    def labelled_reasons(self) -> list[tuple[str, list[str]]]:
        rows: list[LLMRow | ServingStep] = [*self.table, *self.server, *self.serving]
        return [(row.label, list(row.verdict.reasons)) for row in rows]

    def to_dict(self) -> dict:
        llm = LLMBlock(
            self.model,
            self.workload,
            tuple(self.table),
            tuple(self.server),
            self.greedy,
            tuple(self.serving),
            self.served_by,
        )
        return {"rows": [], "numeric": self.numeric, "audits": [], "best": None, "notes": self.notes, "llm": llm}


# ---- the table -------------------------------------------------------------------
THROUGHPUT = "output_tokens_per_s"


@dataclass(frozen=True)
class Limits(LoopSettings):
    """The measurement keys, read as a phase reads them (``LoopSettings``), and the server rows' own
    ``latency_precision`` (None: ``precision``)."""

    latency_precision: float | None = None

    @classmethod
    def from_config(cls, config: CaseView) -> "Limits":
        loop = LoopSettings.from_config(config)
        return cls(
            **{f.name: getattr(loop, f.name) for f in fields(LoopSettings)},
            latency_precision=setting(config, "latency_precision"),
        )


def _settle(engine: Any, prompts: PromptSource, batch: int, length: int, output_length: int, limits: Limits) -> Settle:
    """Warm-up generations of the shape, then the settle phase (``tools.measure.precision.settle``)."""
    for index in range(max(1, limits.warmup)):
        generate_timed(engine, prompts.batch(batch, length, index, PromptSource.WARMUP), output_length)
    count = [0]

    def one() -> int:
        count[0] += 1
        g = generate_timed(engine, prompts.batch(batch, length, count[0], PromptSource.SETTLE), output_length)
        return g.end_ns - g.issued_ns

    return settle(one, time.perf_counter_ns, limits.settle_max_s)


def _judge(
    figures: GenerationFigures,
    target: Target,
    limits: Limits,
    reading: Any,
    engine_reasons: list[str],
    min_queries: int,
    stop: str,
) -> tuple[Verdict, dict]:
    """The verdict of a cell or row and its ``precision`` parts (figures, drifts)."""
    elapsed = figures.window_s()
    timeline = figures.timeline()
    ttft = figures.per_request()[0]
    judged = measure_figures(target, {THROUGHPUT: timeline}, ttft)
    drifts = {THROUGHPUT: drift(timeline, target.precision)} if target.throughput else {}
    precision = precision_reasons(target, judged, drifts, elapsed, stop)
    minimums = (min_queries, limits.min_duration_s)
    verdict = window_verdict(
        len(figures.generations), elapsed, minimums, precision, drifts, reading, limits.contention_limit
    )
    return verdict.extend(engine_reasons), {"figures": judged, "drifts": drifts}


@dataclass(frozen=True)
class _Judgement:
    """How a row was judged: its target, ``_judge``'s parts (the judged figures and drifts), the verdict,
    the settle phase before it, how often the stop rule looked and why the row stopped."""

    target: Target
    parts: dict
    verdict: Verdict
    settled: Settle
    checks: int
    stop: str


def _finish(measured: dict, figures: GenerationFigures, judged: _Judgement, **identity: Any) -> LLMRow:
    """The row's record (the one constructor of both kinds): ``measured`` is ``figures.to_dict()``,
    ``identity`` the cell's shape or the server row's rate, lengths and bounds (``LLMRow``'s fields)."""
    target, parts, verdict, settled, checks, stop = (
        judged.target,
        judged.parts,
        judged.verdict,
        judged.settled,
        judged.checks,
        judged.stop,
    )
    gens = figures.generations
    interval = throughput_interval(figures.timeline())
    row = LLMRow(
        **measured,
        **identity,
        stop_reason=stop,
        window_output_tokens_per_s=window_throughputs(
            [g.end_ns - figures.window_start_ns for g in gens], [g.batch * g.output_length for g in gens]
        ),
        output_tokens_per_s_ci95=interval.around(measured[THROUGHPUT]) if interval else None,
        precision=precision_block(target, parts["figures"], settled, parts["drifts"], checks, stop),
        verdict=verdict.record(),
        flops_known=figures.shape is not None,
    )
    _log_cell(row)
    return row


def measure_cell(
    engine: Any,
    shape: ModelShape,
    prompts: PromptSource,
    batch: int,
    length: int,
    output_length: int,
    limits: Limits,
    engine_reasons: list[str],
) -> LLMRow:
    """One offline cell: warm-up and settle, then queries back to back until the minimums
    are met and output tokens/s is within ``precision`` (or out of its reach), or ``max_duration_s`` passes."""
    settled = _settle(engine, prompts, batch, length, output_length, limits)
    target = Target(throughput=(THROUGHPUT,), precision=limits.precision)
    clock = time.perf_counter_ns
    rule = StopRule(target, clock, limits.max_duration_s)
    contention = CpuContention(limits.device).start()
    gens: list[Generation] = []
    start = clock()
    figures = GenerationFigures(gens, start, shape=shape)
    stop = MAX_DURATION_REACHED
    while True:
        gens.append(generate_timed(engine, prompts.batch(batch, length, len(gens)), output_length, clock))
        now = clock()
        elapsed = now - start
        if minimums_met(len(gens), elapsed / 1e9, limits.min_queries, limits.min_duration_s):
            decided = rule.decide(now, elapsed, lambda: measure_figures(target, {THROUGHPUT: figures.timeline()}))
            if decided is not None:  # precision reached, or out of reach
                stop = decided
                break
        if elapsed / 1e9 >= limits.max_duration_s:
            break
    reading = contention.stop()
    positions = engine.kv_cache_positions(batch, length + output_length)
    verdict, parts = _judge(figures, target, limits, reading, engine_reasons, limits.min_queries, stop)
    return _finish(
        figures.to_dict(),
        figures,
        _Judgement(target, parts, verdict, settled, rule.checks, stop),
        scenario=OFFLINE.name,
        batch_size=batch,
        input_length=length,
        output_length=output_length,
        kv_cache_mib=shape.kv_cache_bytes(positions, engine.bytes_per_value) / 2**20,
        contention=reading.to_dict(),
    )


def _ms(block: dict, name: str = "p50") -> str:
    value = block.get(name)
    return "n/a" if value is None else f"{value:.3g} ms" + interval_text(value, block.get("ci95"), name, share_digits=0)


def _log_cell(row: LLMRow) -> None:
    state = "valid" if row.verdict.valid else "INVALID: " + "; ".join(row.verdict.reasons)
    where = (
        f"{row.scenario} @{row.target_qps:g} req/s" if row.scheduled else f"bs={row.batch_size} in={row.input_length}"
    )
    rate, interval = row.output_tokens_per_s, {"ci95": row.output_tokens_per_s_ci95}
    shown = "n/a" if rate is None else f"{rate:.1f}" + interval_text(rate, interval, "ci95", share_digits=0)
    logger.info(
        f"llm {where}: TTFT p50 {_ms(row.ttft_ms)}, TPOT p50 {_ms(row.tpot_ms)}, {shown} output tokens/s, {state}"
    )


def run_table(
    engine: Any,
    shape: ModelShape,
    prompts: PromptSource,
    workload: LLMWorkload,
    limits: Limits,
    engine_reasons: list[str],
) -> list[LLMRow]:
    return [
        measure_cell(engine, shape, prompts, batch, length, workload.output_length, limits, engine_reasons)
        for length in workload.input_lengths
        for batch in workload.batch_sizes
    ]


# ---- the server scenario -----------------------------------------------------------
@dataclass(frozen=True)
class Request:
    arrival_s: float  # offset from the window start
    input_length: int
    output_length: int


def server_schedule(rate: float, seed: int, input_range: list[int], output_range: list[int]) -> Iterator[Request]:
    """Endless requests: Poisson arrivals at ``rate`` per second (the first at 0), lengths
    uniform over the inclusive ranges; the same seed gives the same schedule."""
    arrivals = poisson_arrivals(rate, random.Random(seed))
    lengths = random.Random(seed + 1)
    while True:
        yield Request(next(arrivals), lengths.randint(*input_range), lengths.randint(*output_range))


def server_target(workload: LLMWorkload, limits: Limits) -> Target:
    """A server row judges the precision of its bound percentile of TTFT, as the other cases' server rows their p99."""
    return Target(
        throughput=(),
        precision=limits.precision,
        percentile=workload.server_bound_percentile,
        latency_precision=limits.latency_precision,
    )


def run_server(
    engine: Any,
    shape: ModelShape,
    prompts: PromptSource,
    workload: LLMWorkload,
    rate: float,
    limits: Limits,
    engine_reasons: list[str],
    schedule: Schedule | None = None,
) -> LLMRow:
    """Requests from the schedule, served one at a time in arrival order, until at least
    ``server_requests`` ran for ``min_duration_s`` and the bound percentile of TTFT is
    within its precision, or ``max_duration_s`` passes (then no request is issued)."""
    schedule = schedule or Schedule()
    seed, sleep, clock = schedule.seed, schedule.sleep, schedule.clock
    settled = _settle(engine, prompts, 1, workload.server_input_length[1], workload.server_output_length[1], limits)
    target = server_target(workload, limits)
    rule = StopRule(target, clock, limits.max_duration_s)
    contention = CpuContention(limits.device).start()
    gens: list[Generation] = []
    arrivals: list[int] = []
    start = clock()
    figures = GenerationFigures(gens, start, arrivals_ns=arrivals, shape=shape)
    stop = MAX_DURATION_REACHED
    for index, request in enumerate(
        server_schedule(rate, seed, workload.server_input_length, workload.server_output_length)
    ):
        due = start + int(request.arrival_s * 1e9)
        now = clock()
        if minimums_met(index, (now - start) / 1e9, workload.server_requests, limits.min_duration_s):
            decided = rule.decide(now, now - start, lambda: measure_figures(target, {}, figures.per_request()[0]))
            if decided is not None:  # precision reached, or out of reach
                stop = decided
                break
        if (max(due, now) - start) / 1e9 >= limits.max_duration_s:
            break
        if due > now:
            sleep((due - now) / 1e9)
        arrivals.append(due)
        gens.append(generate_timed(engine, prompts.batch(1, request.input_length, index), request.output_length, clock))
    reading = contention.stop()
    verdict, parts = _judge(figures, target, limits, reading, [], workload.server_requests, stop)
    measured = figures.to_dict()
    met = _bounds(measured, workload, verdict)
    return _finish(
        measured,
        figures,
        _Judgement(target, parts, verdict.extend(engine_reasons), settled, rule.checks, stop),
        **_server_identity(workload, rate, arrivals, start),
        kv_cache_mib=_mean_kv_mib(engine, shape, gens),
        contention=reading.to_dict(),
        ttft_bound_met=met["ttft"],
        tpot_bound_met=met["tpot"],
    )


@dataclass(frozen=True)
class Schedule:
    """A server row's arrival schedule (its seed) and the clock (ns) and sleep (s) it runs on, injectable
    for tests."""

    seed: int = 0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], int] = time.perf_counter_ns


def _server_identity(workload: LLMWorkload, rate: float, arrivals: list[int], start: int) -> dict[str, Any]:
    """A server row's rate (asked and issued), lengths and bounds (``LLMRow``'s fields)."""
    return dict(
        scenario=SERVER.name,
        target_qps=rate,
        issued_qps=(len(arrivals) - 1) * 1e9 / (arrivals[-1] - start)
        if len(arrivals) > 1 and arrivals[-1] > start
        else None,
        input_length_range=workload.server_input_length,
        output_length_range=workload.server_output_length,
        length_distribution="uniform integers over each inclusive range",
        bound_percentile=workload.server_bound_percentile,
        ttft_bound_ms=workload.ttft_bound_ms,
        tpot_bound_ms=workload.tpot_bound_ms,
    )


def _mean_kv_mib(engine: Any, shape: ModelShape, gens: list[Generation]) -> float | None:
    """The KV cache a request allocated, on average over the row's requests."""
    if not gens:
        return None
    positions = [engine.kv_cache_positions(g.batch, g.input_length + g.output_length) for g in gens]
    return sum(shape.kv_cache_bytes(p, engine.bytes_per_value) for p in positions) / len(positions) / 2**20


def _bounds(measured: dict, workload: LLMWorkload, verdict: Verdict) -> dict[str, bool | None]:
    """The pass condition: the bound percentile of TTFT and of TPOT within their bounds; whether each
    was met (None: too few requests for the percentile), by metric."""
    name = workload.server_bound_percentile
    met: dict[str, bool | None] = {}
    for metric, bound in (("ttft", workload.ttft_bound_ms), ("tpot", workload.tpot_bound_ms)):
        block = measured[f"{metric}_ms"]
        value = block[name]
        met[metric] = None if value is None else value <= bound
        if value is None:
            verdict.add(f"server reports {name} {metric.upper()}: {too_few_note(name, block['count'])}")
        elif value > bound:
            verdict.add(f"{name} {metric.upper()} {value:.4g} ms exceeds {metric}_bound_ms {bound:g}")
    return met


# ---- the whole stage ---------------------------------------------------------------
def stage_model(engine: Any, shape: ModelShape, precision: str) -> dict:
    """The ``llm.model`` block: the model's shape, the precision run and the KV bytes per value."""
    return {**shape.to_dict(), "precision": precision, "bytes_per_kv_value": engine.bytes_per_value}


def check_skipped(config: CaseConfig, reference: Any) -> str | None:
    """Why the generation check does not run (a note), or None when it does."""
    if not config.numeric_check:
        return "generation check skipped (numeric_check: false)"
    if reference is None:
        return "generation check skipped: no framework model (no_validation: true)"
    return None


def run_llm_stage(
    engine: Any,
    reference: Any,
    config: CaseConfig,
    shape: ModelShape,
    prompts: PromptSource,
    precision: str,
    eos_ids: tuple[int, ...] = (),
) -> LLMReport:
    """Checks, then the table, then the server rows. ``reference`` is the framework model
    as ids -> logits (``tools/checks/generation.py``), or None without one; ``eos_ids`` the
    end-of-sequence tokens that neither the engine nor the reference selects."""
    from dataclasses import asdict

    workload = LLMWorkload.from_config(config)
    limits = Limits.from_config(config)
    report = LLMReport(model=stage_model(engine, shape, precision), workload=asdict(workload))
    skipped = check_skipped(config, reference)
    if skipped is not None:
        report.notes.append(skipped)
    else:
        from contract.tolerances import tolerances_for
        from tools.checks.generation import check_generation

        checked = prompts.batch(workload.greedy_prompts, workload.input_lengths[0], 0, PromptSource.CHECK)
        tolerances = tolerances_for(precision, config.numeric_tolerance)
        report.greedy, report.numeric, reasons = check_generation(
            engine,
            reference,
            checked,
            workload.greedy_tokens,
            precision,
            tolerances,
            workload.greedy_agreement_target,
            eos_ids,
        )
        report.engine_reasons.extend(reasons)
    if config.get("test_perf") is False:
        report.notes.append("prefill/decode table and server rows skipped (test_perf: false)")
        return report
    report.table = run_table(engine, shape, prompts, workload, limits, report.engine_reasons)
    for rate in workload.server_target_qps:
        report.server.append(
            run_server(
                engine, shape, prompts, workload, rate, limits, report.engine_reasons, Schedule(seed=int(config.seed))
            )
        )
    return report
