"""The result record's file names and FlagPerf's result keys, defined once for both sides.

The container side writes them (``tools/results/result.py``); the host side reads them
(``utils/results/summary.py``, ``utils/results/aggregate.py``, ``utils/results/compare.py``,
``utils/results/report/``). The whole schema is in docs/result_schema.md.
"""

from __future__ import annotations

import functools
import random
from dataclasses import fields
from pathlib import Path
from typing import Any, Final

from common.codec import Json, Record, derived, json_field
from common.codec import RecordError as RecordError  # the records' one error, where the records are
from common.codec import as_json as as_json  # the container side's blocks that are not records
from common.files import atomic_path

SCHEMA_VERSION: Final = 2
RESULT_FILE: Final = "result.json"
FAILURE_FILE: Final = "failure.json"
# Raw per-query latencies (for pooled percentiles and compare's bootstrap) live
# beside result.json, not in it: int64 nanoseconds, one array per series
# (``validation``, ``inference``, ``performance_<row index>``). A series longer
# than MAX_RAW_LATENCIES is stored as a uniform random sample of that many
# (seeded, in query order); result.json's ``raw_latencies`` says count and stored.
LATENCY_FILE: Final = "latencies.npz"
MAX_RAW_LATENCIES: Final = 100_000


class Key:
    """FlagPerf's result keys, same names and meaning as FlagPerf's (spec §3.2.2)."""

    VENDOR: Final = "vendor"
    COMPILER: Final = "compiler"
    PRECISION: Final = "precision"
    BATCHSIZE: Final = "batchsize"
    FLOPS: Final = "flops"  # FLOPs per sample (FlagPerf: achieved FLOP/s; see docs/flagperf_migration.md)
    E2E_TIME: Final = "e2e_time(second)"
    VAL_WHOLE_QPS: Final = "p_validation_whole(qps)"
    VAL_CORE_QPS: Final = "p_validation_core(qps)"
    INFER_WHOLE_QPS: Final = "p_inference_whole(qps)"
    INFER_CORE_QPS: Final = "*p_inference_core(qps)"
    VAL_ACC: Final = "val_average_acc"
    INFER_ACC: Final = "infer_average_acc"


QPS_KEYS: Final = (Key.VAL_WHOLE_QPS, Key.VAL_CORE_QPS, Key.INFER_WHOLE_QPS, Key.INFER_CORE_QPS)


def flagperf_view(record: dict) -> dict:
    """The dict FlagPerf prints on its Finish Info line."""
    return {key: record.get(key) for key in FLAGPERF_KEYS}


def capped(values: list[int], cap: int = MAX_RAW_LATENCIES, seed: int = 0) -> list[int]:
    """``values``, or a seeded uniform sample of ``cap`` of them in their original order."""
    if len(values) <= cap:
        return list(values)
    keep = sorted(random.Random(seed).sample(range(len(values)), cap))
    return [values[i] for i in keep]


def write_latencies(path: Path, series: dict[str, list[int]]) -> None:
    import numpy as np

    with atomic_path(path) as tmp, open(tmp, "wb") as handle:  # a handle: np.savez would append .npz to a name
        arrays: dict[str, Any] = {name: np.asarray(v, dtype=np.int64) for name, v in series.items()}
        np.savez_compressed(handle, **arrays)


def read_latencies(log_dir: str | Path) -> dict:
    """``{series: int64 ns array}`` from ``log_dir``/latencies.npz; {} when there is none."""
    path = Path(log_dir) / LATENCY_FILE
    if not path.is_file():
        return {}  # numpy not even imported: the run.py side may never need it
    import numpy as np

    with np.load(path) as data:
        return {name: data[name] for name in data.files}


# ---- the records that cross the rooms -------------------------------------------------
# Frozen dataclasses for what the container side writes and the host side reads. Each field is one
# JSON key, in result.json's order; ``to_json()`` and ``from_json()`` are the codec's
# (common/codec.py: what a key left out becomes, and the one line naming the file and key when a
# needed one is missing or of another type). docs/result_schema.md describes every key.

PERCENTILES: Final = ("p50", "p90", "p99", "p99_9")
NOT_PRECISE: Final = "not precise enough: "  # how a verdict's imprecision reason begins (tools/measure/precision.py)


class Verdict(Record, where="verdict"):
    """A figure's verdict as recorded: ``reasons`` make it INVALID; ``not_judged`` are the checks that
    could not run on it, with why. The builder that collects them is ``tools.measure.verdict.Verdict``."""

    valid: bool = derived(lambda verdict: not verdict.reasons)
    reasons: tuple[str, ...] = ()
    not_judged: tuple[str, ...] = json_field(default=(), skip_empty=True)  # absent when every check ran


class LatencyBlock(Record, where="latency_ms"):
    """A performance row's latency figures, ms: the percentiles and the mean (None: not measured)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    mean: float | None = None


RowKey = tuple[int, str, int]  # (batch_size, scenario, clients): a row's identity within a case


class PerformanceRow(Record, where="performance row"):
    """One performance row: a batch size x scenario x clients, from either load generator
    (InferPerf's own, ``tools/measure/stage.py``, or MLPerf LoadGen, ``tools/measure/loadgen.py``),
    both through ``tools.measure.rows.performance_row``. The nested blocks whose shape belongs to
    one producer (contention, precision, server_search, accuracy_in_performance_mode, loadgen)
    stay JSON objects."""

    batch_size: int = json_field(required=True)
    scenario: str = json_field(required=True)
    clients: int = json_field(required=True)
    qps: float | None
    qps_ci95: list[float] | None
    queries: int
    samples: int
    duration_s: float
    latency_ms: LatencyBlock
    latency_ci95: dict[str, list[float] | None] = json_field(missing=lambda: dict.fromkeys(PERCENTILES))
    latency_notes: list[str]
    stop_reason: str | None
    window_qps: list[float]
    contention: Json | None
    target_qps: float | None
    issued_qps: float | None
    latency_bound_ms: float | None
    latency_bound_met: bool | None
    server_search: Json | None
    accuracy_in_performance_mode: Json | None
    precision: Json | None
    verdict: Verdict = json_field(required=True)
    started_at_unix: float | None = None
    finished_at_unix: float | None = None
    load_generator: str = "inferperf"
    loadgen: Json | None = json_field(default=None, skip_none=True)  # LoadGen's summary and settings (mlperf only)
    samples_per_query: int | None = json_field(default=None, skip_none=True)  # a query of several batches; None: one

    @property
    def key(self) -> RowKey:
        return self.batch_size, self.scenario, self.clients

    @property
    def label(self) -> str:
        """How a reason or a log line names the row: ``bs 8 offline x1``."""
        return f"bs {self.batch_size} {self.scenario} x{self.clients}"

    def json_order(self, out: Json) -> Json:
        """A LoadGen row names its generator and LoadGen's block before its window (result.json's order
        since schema 2, which the recorded results keep)."""
        if self.loadgen is None:
            return out
        keys = [key for key in out if key not in ("started_at_unix", "finished_at_unix")]
        at = keys.index("loadgen") + 1
        return {key: out[key] for key in (*keys[:at], "started_at_unix", "finished_at_unix", *keys[at:])}


def _scenario_check(name: Any) -> str | None:
    from common.scenario import scenario

    try:
        scenario(name)
    except ValueError as exc:
        return f"key 'scenario': {exc}"
    return None


@functools.cache
def _is_scheduled(name: str) -> bool:
    """Whether scenario ``name`` schedules its requests (a server row); asked per key when a row is written."""
    from common.scenario import scenario

    return scenario(name).scheduled


def _scheduled(data: Json) -> bool:
    """Whether ``data`` (a row whose scenario was read first) is a server row."""
    return _is_scheduled(data["scenario"])


def _offline(data: Json) -> bool:
    return not _scheduled(data)


def _server_row(row: Any) -> bool:
    return bool(row.scheduled)


def _offline_cell(row: Any) -> bool:
    return not row.scheduled


def _flops_known(row: Any) -> bool:
    return bool(row.flops_known)


class LLMRow(Record, where="llm row"):
    """One row of an LLM case's ``llm`` block (``tools/measure/llm_stage.py``): an offline cell of
    the prefill/decode table (identity: ``batch_size``, ``input_length``, ``output_length``) or a
    server row (identity: ``target_qps``; its length ranges, bounds and whether they were met).
    The figures are ``tools.measure.llm.GenerationFigures.to_dict()``'s; the distributions
    (``ttft_ms``, ``tpot_ms``, ``itl_ms``, ``e2e_ms``, ``prefill_ms``: count, mean, p50/p90/p99, ci95)
    and the ``contention`` and ``precision`` blocks stay JSON objects. Each kind writes its own keys
    (``write_if``): the other kind's fields stay None and absent."""

    queries: int
    requests: int
    duration_s: float
    ttft_ms: Json
    tpot_ms: Json
    itl_ms: Json
    e2e_ms: Json
    prefill_ms: Json
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    output_tokens_per_s: float | None
    requests_per_s: float | None
    # False: no model shape, the two FLOP/s keys are absent; read as whether either key is there
    prefill_flops_per_s: float | None = json_field(kw_only=True, default=None, write_if=_flops_known)
    decode_flops_per_s: float | None = json_field(kw_only=True, default=None, write_if=_flops_known)
    flops_known: bool = json_field(
        kw_only=True,
        default=True,
        write=False,
        read=lambda data, _: "prefill_flops_per_s" in data or "decode_flops_per_s" in data,
    )
    scenario: str = json_field(required=True, check=_scenario_check)
    batch_size: int | None = json_field(kw_only=True, default=None, write_if=_offline_cell, required=_offline)
    input_length: int | None = json_field(kw_only=True, default=None, write_if=_offline_cell, required=_offline)
    output_length: int | None = json_field(kw_only=True, default=None, write_if=_offline_cell, required=_offline)
    target_qps: float | None = json_field(kw_only=True, default=None, write_if=_server_row, required=_scheduled)
    issued_qps: float | None = json_field(kw_only=True, default=None, write_if=_server_row)
    input_length_range: list[int] | None = json_field(kw_only=True, default=None, write_if=_server_row)
    output_length_range: list[int] | None = json_field(kw_only=True, default=None, write_if=_server_row)
    length_distribution: str | None = json_field(kw_only=True, default=None, write_if=_server_row)
    bound_percentile: str | None = json_field(kw_only=True, default=None, write_if=_server_row)
    ttft_bound_ms: float | None = json_field(kw_only=True, default=None, write_if=_server_row)
    tpot_bound_ms: float | None = json_field(kw_only=True, default=None, write_if=_server_row)
    kv_cache_mib: float | None
    contention: Json | None
    ttft_bound_met: bool | None = json_field(kw_only=True, default=None, write_if=_server_row)
    tpot_bound_met: bool | None = json_field(kw_only=True, default=None, write_if=_server_row)
    stop_reason: str | None
    window_output_tokens_per_s: list[float]
    output_tokens_per_s_ci95: list[float] | None
    precision: Json | None
    verdict: Verdict = json_field(required=True)

    @property
    def scheduled(self) -> bool:
        """A server row (requests on a Poisson schedule at ``target_qps``), not an offline cell."""
        return _is_scheduled(self.scenario)

    @property
    def label(self) -> str:
        """How a reason names the row: ``llm bs 2 in 16 out 4``, ``llm server @2 req/s``."""
        if self.scheduled:
            return f"llm {self.scenario} @{self.target_qps:g} req/s"
        return f"llm bs {self.batch_size} in {self.input_length} out {self.output_length}"


# figure -> the step's throughput key (value and ci95)
THROUGHPUT_FIGURES: Final = {
    "output tokens/s": "output_tokens_per_s",
    "requests/s": "requests_per_s",
    "goodput requests/s": "goodput_requests_per_s",
}
# figure -> (the step's distribution, its percentile); the interval is the distribution's ci95[percentile]
LATENCY_FIGURES: Final = {
    "TTFT p50 ms": ("ttft_ms", "p50"),
    "TTFT p90 ms": ("ttft_ms", "p90"),
    "TPOT p50 ms": ("tpot_ms", "p50"),
    "E2E p90 ms": ("e2e_ms", "p90"),
}
DISTRIBUTIONS: Final = ("ttft_ms", "ttfa_ms", "tpot_ms", "itl_ms", "e2e_ms")


def step_figures(throughput: Json, distributions: dict[str, Json]) -> dict[str, tuple[Any, Any]]:
    """A load step's figures that a comparison decides on, from its throughput block (name -> value and
    ci95) and its distributions (``ttft_ms``, ...: percentiles and ci95): ``THROUGHPUT_FIGURES`` and
    ``LATENCY_FIGURES``, each (value, its 95 % interval or None)."""
    out = {}
    for figure, key in THROUGHPUT_FIGURES.items():
        block = throughput.get(key) or {}
        out[figure] = (block.get("value"), block.get("ci95"))
    for figure, (key, name) in LATENCY_FIGURES.items():
        block = distributions.get(key) or {}
        out[figure] = (block.get(name), (block.get("ci95") or {}).get(name))
    return out


class ServingStep(Record, where="serving step"):
    """One load step of an LLM served over HTTP, the one row of every serving measurement: ``run.py
    --endpoint``'s (summary.json's ``rows``) and a serving vendor's (``compiler: vllm``, ``llamacpp``;
    result.json's ``llm.serving``). ``label`` names it (``concurrency 4``, ``rate 2/s poisson``);
    ``phase`` is ``step`` (a sweep's) or ``capacity`` (a capacity probe's); its load is ``concurrency``
    streams or ``request_rate`` requests/s (``inf``: all at once); a vendor's step also has the lengths
    it asked for (``input_length``, ``output_length``). Then the requests and how they ended, the
    distributions (count, mean, percentiles, ci95: JSON objects as result.json has them), each
    throughput as ``{value, ci95, plus_minus}`` (``not_judged`` where it is n/a), the throughputs'
    ``drift``, its ``timeslices`` and the server's ``server_metrics`` (``tools/serving/metrics.py``), the
    SLO block (None without ``--slo``) and the verdict. Made from a step's block
    (``tools.serving.figures.step_figures``') by ``of``."""

    label: str = json_field(required=True)
    phase: str = json_field(required=True)
    concurrency: int | None
    request_rate: float | str | None
    input_length: int | None = json_field(kw_only=True, default=None, skip_none=True)
    output_length: int | None = json_field(kw_only=True, default=None, skip_none=True)
    requests: int
    completed: int
    failed: int
    errors: dict[str, int]
    duration_s: float | None
    token_source: tuple[str, ...]
    input_tokens: int | None  # over the completed requests, counted as token_source says
    output_tokens: int | None
    ttft_ms: Json
    ttfa_ms: Json
    tpot_ms: Json
    itl_ms: Json
    e2e_ms: Json
    throughput: Json
    drift: Json = json_field(kw_only=True, default_factory=dict)
    # each slice of the window's tokens/s and TTFT; the server's own /metrics figures (absent: not measured)
    timeslices: Json | None = json_field(kw_only=True, default=None, skip_none=True)
    server_metrics: Json | None = json_field(kw_only=True, default=None, skip_none=True)
    tokens_per_s_per_user: float | None
    slo: Json | None
    stop_reason: str | None
    verdict: Verdict = json_field(required=True)

    @classmethod
    def of(cls, block: Json, phase: str = "step", **asked: Any) -> ServingStep:
        """The row of a step's block (result.json's ``steps`` or ``capacity_steps`` entry, a vendor's
        ``tools/measure/serving_stage.py::measure_step``'s); ``asked``: a vendor's lengths."""
        load = block.get("load") or {}
        return cls(
            label=str(block["label"]),
            phase=phase,
            concurrency=load.get("concurrency"),
            request_rate=load.get("request_rate"),
            requests=block["requests"],
            completed=block["completed"],
            failed=block["failed"],
            errors=dict(block["errors"]),
            duration_s=block.get("duration_s"),
            token_source=tuple(block.get("token_source") or ()),
            input_tokens=block.get("input_tokens"),
            output_tokens=block.get("output_tokens"),
            ttft_ms=dict(block.get("ttft_ms") or {}),
            ttfa_ms=dict(block.get("ttfa_ms") or {}),
            tpot_ms=dict(block.get("tpot_ms") or {}),
            itl_ms=dict(block.get("itl_ms") or {}),
            e2e_ms=dict(block.get("e2e_ms") or {}),
            throughput={name: dict(value) for name, value in (block.get("throughput") or {}).items()},
            drift=dict(block.get("drift") or {}),
            timeslices=block.get("timeslices"),
            server_metrics=block.get("server_metrics"),
            tokens_per_s_per_user=block.get("tokens_per_s_per_user"),
            slo=block.get("slo"),
            stop_reason=block.get("stopped"),
            verdict=Verdict.from_json(block["verdict"]),
            **asked,
        )

    def rate(self, name: str) -> float | None:
        """A throughput's value (None: not measured, or n/a)."""
        return (self.throughput.get(name) or {}).get("value")

    def figures(self) -> dict[str, tuple[Any, Any]]:
        """The figures a comparison decides on: name -> (value, its 95 % interval or None)."""
        return step_figures(self.throughput, {key: getattr(self, key) for key in DISTRIBUTIONS})


def _served(block: Any) -> bool:
    """A model served over HTTP: its ``serving`` and ``served_by`` keys (absent for an in-process engine)."""
    return bool(block.serving) or block.served_by is not None


class LLMBlock(Record, where="llm"):
    """An LLM case's ``llm`` block (``tools/measure/llm_stage.py``): the model's shape, the workload
    keys, the offline ``table`` and the ``server`` rows, and the greedy check (``tools/checks/generation.py``,
    None when it did not run). ``model``, ``workload`` and ``greedy`` stay JSON objects. An LLM served over
    HTTP (a serving engine) has ``serving`` rows instead of the table and server rows, and the server's facts
    in ``served_by`` (both keys absent otherwise)."""

    model: Json = json_field(required=True)
    workload: Json
    table: tuple[LLMRow, ...] = json_field(default=(), required=True)
    server: tuple[LLMRow, ...] = json_field(default=(), required=True)
    greedy: Json | None = None
    serving: tuple[ServingStep, ...] = json_field(default=(), write_if=_served)
    served_by: Json | None = json_field(default=None, write_if=_served)

    @property
    def rows(self) -> tuple[LLMRow, ...]:
        """The table's cells, then the server rows."""
        return (*self.table, *self.server)


class PhaseBlock(Record, where="phase"):
    """The validation or inference phase of a case (FlagPerf's two loops), as result.json records it."""

    judged: bool
    samples: int
    batches: int
    passes: int
    warmup_batches: int
    whole_time_s: float
    core_time_s: float
    foo_time_s: float
    whole_qps: float | None
    core_qps: float | None
    accuracy: float | None
    accuracy_note: str | None
    core_qps_ci95: list[float] | None
    whole_qps_ci95: list[float] | None
    latency_ms: Json | None  # common.stats.LatencyStats.to_dict(): count, mean, min, max, std, cv, percentiles, notes
    latency_ci95: dict[str, list[float] | None] | None
    precision: Json | None
    window_qps: list[float]
    contention: Json | None
    verdict: Verdict = json_field(required=True)
    started_at_unix: float | None
    finished_at_unix: float | None


def _version_check(version: Any) -> str | None:
    return None if version == SCHEMA_VERSION else f"schema_version {version!r}, this InferPerf reads {SCHEMA_VERSION}"


class CaseResult(Record, where=RESULT_FILE):
    """result.json: FlagPerf's keys (``Key``, same names and meaning), then InferPerf's.

    Built once by ``tools.results.result.build_result`` and parsed once by ``read_result`` on the
    host. ``llm`` (an LLM case's table and server rows) is an ``LLMBlock``. The blocks that belong to
    one part of the code stay JSON objects, typed as such: ``numeric``, ``audits``, ``baseline`` (a
    base case's peaks), ``engine``, ``cache``, ``steps``, ``config``, ``env``, ``raw_latencies``."""

    vendor: str = json_field(key=Key.VENDOR, group="flagperf", required=True)
    compiler: str | None = json_field(key=Key.COMPILER, group="flagperf", required=True)
    precision: str | None = json_field(key=Key.PRECISION, group="flagperf", required=True)
    batchsize: int | None = json_field(key=Key.BATCHSIZE, group="flagperf")
    flops: float | None = json_field(key=Key.FLOPS, group="flagperf")
    e2e_time_s: float | None = json_field(key=Key.E2E_TIME, group="flagperf")
    val_whole_qps: float | None = json_field(key=Key.VAL_WHOLE_QPS, group="flagperf")
    val_core_qps: float | None = json_field(key=Key.VAL_CORE_QPS, group="flagperf")
    infer_whole_qps: float | None = json_field(key=Key.INFER_WHOLE_QPS, group="flagperf")
    infer_core_qps: float | None = json_field(key=Key.INFER_CORE_QPS, group="flagperf")
    val_average_acc: float | None = json_field(key=Key.VAL_ACC, group="flagperf")
    infer_average_acc: float | None = json_field(key=Key.INFER_ACC, group="flagperf")
    ci95: dict[str, list[float] | None]
    schema_version: int = json_field(kw_only=True, default=SCHEMA_VERSION, required=True, check=_version_check)
    status: str = json_field(kw_only=True, default="success")
    verdict: Verdict = json_field(required=True)
    case: str = json_field(required=True)
    framework: str = json_field(required=True)
    accuracy_note: str | None
    achieved_tflops: float | None
    validation: PhaseBlock | None
    inference: PhaseBlock | None
    performance: tuple[PerformanceRow, ...]
    best: Json | None
    numeric: Json | None
    audits: list[Json]
    performance_notes: list[str]
    llm: LLMBlock | None
    baseline: Json | None
    engine: Json | None
    cache: Json
    steps: Json
    config: Json
    env: Json
    started_at: str
    finished_at: str
    raw_latencies: Json | None

    def flagperf(self, key: str) -> Any:
        """A figure by FlagPerf's key (``Key``)."""
        return getattr(self, dict(FLAGPERF_FIELDS)[key])


# In FlagPerf's order (the Finish Info line, summary columns): each key, and the records' attribute for it.
FLAGPERF_FIELDS: Final[tuple[tuple[str, str], ...]] = tuple(
    (f.metadata["json"]["key"], f.name)
    for f in fields(CaseResult)
    if f.metadata.get("json", {}).get("group") == "flagperf"
)
FLAGPERF_KEYS: Final = tuple(key for key, _ in FLAGPERF_FIELDS)


def read_result(log_dir: str | Path) -> CaseResult | None:
    """``log_dir``/result.json as a ``CaseResult``; None when there is none. An unreadable or
    misshapen file raises ``RecordError`` naming it."""
    import json

    path = Path(log_dir) / RESULT_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: unreadable: {exc}") from None
    return CaseResult.from_json(data, str(path))
