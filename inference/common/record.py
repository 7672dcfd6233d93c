"""The result record's file names and FlagPerf's result keys, defined once for both sides.

The container side writes them (``tools/results/result.py``); the host side reads them
(``utils/results/summary.py``, ``utils/results/aggregate.py``, ``utils/results/compare.py``,
``utils/results/report/``). The whole schema is in docs/result_schema.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final, Iterable

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


# In FlagPerf's order (the Finish Info line, summary columns): each key, and CaseResult's attribute for it.
FLAGPERF_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    (Key.VENDOR, "vendor"),
    (Key.COMPILER, "compiler"),
    (Key.PRECISION, "precision"),
    (Key.BATCHSIZE, "batchsize"),
    (Key.FLOPS, "flops"),
    (Key.E2E_TIME, "e2e_time_s"),
    (Key.VAL_WHOLE_QPS, "val_whole_qps"),
    (Key.VAL_CORE_QPS, "val_core_qps"),
    (Key.INFER_WHOLE_QPS, "infer_whole_qps"),
    (Key.INFER_CORE_QPS, "infer_core_qps"),
    (Key.VAL_ACC, "val_average_acc"),
    (Key.INFER_ACC, "infer_average_acc"),
)
FLAGPERF_KEYS: Final = tuple(key for key, _ in FLAGPERF_FIELDS)
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
# Frozen dataclasses for what the container side writes and the host side reads. Each has
# ``to_json()`` (the JSON object, keys in the order result.json has always had them) and
# ``from_json()`` (checks the shape it needs and says what is wrong in one line).
# docs/result_schema.md describes every key.

Json = dict[str, Any]
PERCENTILES: Final = ("p50", "p90", "p99", "p99_9")


class RecordError(ValueError):
    """A result file that is not the shape this version writes: one line naming the file and key."""


def _need(data: Json, key: str, where: str) -> Any:
    if key not in data:
        raise RecordError(f"{where}: no key {key!r}")
    return data[key]


@dataclass(frozen=True)
class Verdict:
    """A figure's verdict as recorded: ``reasons`` make it INVALID; ``not_judged`` are the checks that
    could not run on it, with why. The builder that collects them is ``tools.measure.verdict.Verdict``."""

    reasons: tuple[str, ...] = ()
    not_judged: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.reasons

    def to_json(self) -> Json:
        out: Json = {"valid": self.valid, "reasons": list(self.reasons)}
        if self.not_judged:  # optional key: absent when every check ran
            out["not_judged"] = list(self.not_judged)
        return out

    @classmethod
    def from_json(cls, data: Json | None) -> Verdict:
        data = data or {}
        return cls(tuple(data.get("reasons") or ()), tuple(data.get("not_judged") or ()))


@dataclass(frozen=True)
class LatencyBlock:
    """A performance row's latency figures, ms: the percentiles and the mean (None: not measured)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    mean: float | None = None

    def to_json(self) -> Json:
        return {"p50": self.p50, "p90": self.p90, "p99": self.p99, "p99_9": self.p99_9, "mean": self.mean}

    @classmethod
    def from_json(cls, data: Json | None) -> LatencyBlock:
        data = data or {}
        return cls(**{name: data.get(name) for name in (*PERCENTILES, "mean")})


JsonKey = str | tuple[str, str]  # an attribute written under its own name, or (key, attribute)


def as_json(record: Any, keys: Iterable[JsonKey]) -> Json:
    """``record``'s attributes as a JSON object, in the order of ``keys``: a name is both the key and the
    attribute, a pair is ``(key, attribute)``; each value as ``json_value`` writes it. Every record's
    ``to_json()`` (and the container side's ``to_dict()``) that writes its attributes under keys is this."""
    out: Json = {}
    for key in keys:
        name, attribute = (key, key) if isinstance(key, str) else key
        out[name] = json_value(getattr(record, attribute))
    return out


def json_value(value: Any) -> Any:
    """A value as JSON: a nested record as its own ``to_json()``, a tuple of them as a list."""
    if isinstance(value, tuple):
        return [json_value(v) for v in value]
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else value


RowKey = tuple[int, str, int]  # (batch_size, scenario, clients): a row's identity within a case


# A performance row's keys in result.json's order, up to its verdict (then its window and generator).
_ROW_ORDER: Final = (
    "batch_size",
    "scenario",
    "clients",
    "qps",
    "qps_ci95",
    "queries",
    "samples",
    "duration_s",
    "latency_ms",
    "latency_ci95",
    "latency_notes",
    "stop_reason",
    "window_qps",
    "contention",
    "target_qps",
    "issued_qps",
    "latency_bound_ms",
    "latency_bound_met",
    "server_search",
    "accuracy_in_performance_mode",
    "precision",
    "verdict",
)


@dataclass(frozen=True)
class PerformanceRow:
    """One performance row: a batch size x scenario x clients, from either load generator
    (InferPerf's own, ``tools/measure/stage.py``, or MLPerf LoadGen, ``tools/measure/loadgen.py``),
    both through ``tools.measure.rows.performance_row``. The nested blocks whose shape belongs to
    one producer (contention, precision, server_search, accuracy_in_performance_mode, loadgen)
    stay JSON objects."""

    batch_size: int
    scenario: str
    clients: int
    qps: float | None
    qps_ci95: list[float] | None
    queries: int
    samples: int
    duration_s: float
    latency_ms: LatencyBlock
    latency_ci95: dict[str, list[float] | None]
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
    verdict: Verdict
    started_at_unix: float | None = None
    finished_at_unix: float | None = None
    load_generator: str = "inferperf"
    loadgen: Json | None = None  # LoadGen's own summary and settings (load_generator mlperf only)
    samples_per_query: int | None = None  # a query of several batches (multi_stream); None: one batch

    @property
    def key(self) -> RowKey:
        return self.batch_size, self.scenario, self.clients

    @property
    def label(self) -> str:
        """How a reason or a log line names the row: ``bs 8 offline x1``."""
        return f"bs {self.batch_size} {self.scenario} x{self.clients}"

    def to_json(self) -> Json:
        out = as_json(self, _ROW_ORDER)
        window = {"started_at_unix": self.started_at_unix, "finished_at_unix": self.finished_at_unix}
        if self.loadgen is None:  # InferPerf's own rows: the window, then the generator
            out = {**out, **window, "load_generator": self.load_generator}
        else:  # a LoadGen row names its generator and LoadGen's block first (result.json's order since schema 2)
            out = {**out, "load_generator": self.load_generator, "loadgen": self.loadgen, **window}
        if self.samples_per_query is not None:
            out["samples_per_query"] = self.samples_per_query
        return out

    @classmethod
    def from_json(cls, data: Json, where: str = "performance row") -> PerformanceRow:
        for key in ("batch_size", "scenario", "clients", "verdict"):
            _need(data, key, where)
        return cls(
            batch_size=data["batch_size"],
            scenario=data["scenario"],
            clients=data["clients"],
            qps=data.get("qps"),
            qps_ci95=data.get("qps_ci95"),
            queries=data.get("queries", 0),
            samples=data.get("samples", 0),
            duration_s=data.get("duration_s", 0.0),
            latency_ms=LatencyBlock.from_json(data.get("latency_ms")),
            latency_ci95=data.get("latency_ci95") or dict.fromkeys(PERCENTILES),
            latency_notes=list(data.get("latency_notes") or []),
            stop_reason=data.get("stop_reason"),
            window_qps=list(data.get("window_qps") or []),
            contention=data.get("contention"),
            target_qps=data.get("target_qps"),
            issued_qps=data.get("issued_qps"),
            latency_bound_ms=data.get("latency_bound_ms"),
            latency_bound_met=data.get("latency_bound_met"),
            server_search=data.get("server_search"),
            accuracy_in_performance_mode=data.get("accuracy_in_performance_mode"),
            precision=data.get("precision"),
            verdict=Verdict.from_json(data["verdict"]),
            started_at_unix=data.get("started_at_unix"),
            finished_at_unix=data.get("finished_at_unix"),
            load_generator=data.get("load_generator", "inferperf"),
            loadgen=data.get("loadgen"),
            samples_per_query=data.get("samples_per_query"),
        )


@dataclass(frozen=True)
class LLMRow:
    """One row of an LLM case's ``llm`` block (``tools/measure/llm_stage.py``): an offline cell of
    the prefill/decode table (identity: ``batch_size``, ``input_length``, ``output_length``) or a
    server row (identity: ``target_qps``; its length ranges, bounds and whether they were met).
    The figures are ``tools.measure.llm.GenerationFigures.to_dict()``'s; the distributions
    (``ttft_ms``, ``tpot_ms``, ``itl_ms``, ``e2e_ms``, ``prefill_ms``: count, mean, p50/p90/p99, ci95)
    and the ``contention`` and ``precision`` blocks stay JSON objects. An offline cell and a
    server row keep their own key order; the fields of the other kind stay None and absent."""

    scenario: str
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
    kv_cache_mib: float | None
    contention: Json | None
    stop_reason: str | None
    window_output_tokens_per_s: list[float]
    output_tokens_per_s_ci95: list[float] | None
    precision: Json | None
    verdict: Verdict
    prefill_flops_per_s: float | None = None
    decode_flops_per_s: float | None = None
    flops_known: bool = True  # False: no model shape, the two FLOP/s keys are absent
    # an offline cell's shape
    batch_size: int | None = None
    input_length: int | None = None
    output_length: int | None = None
    # a server row's rate, lengths and bounds
    target_qps: float | None = None
    issued_qps: float | None = None
    input_length_range: list[int] | None = None
    output_length_range: list[int] | None = None
    length_distribution: str | None = None
    bound_percentile: str | None = None
    ttft_bound_ms: float | None = None
    tpot_bound_ms: float | None = None
    ttft_bound_met: bool | None = None
    tpot_bound_met: bool | None = None

    @property
    def scheduled(self) -> bool:
        """A server row (requests on a Poisson schedule at ``target_qps``), not an offline cell."""
        from common.scenario import scenario

        return scenario(self.scenario).scheduled

    @property
    def label(self) -> str:
        """How a reason names the row: ``llm bs 2 in 16 out 4``, ``llm server @2 req/s``."""
        if self.scheduled:
            return f"llm {self.scenario} @{self.target_qps:g} req/s"
        return f"llm bs {self.batch_size} in {self.input_length} out {self.output_length}"

    def to_json(self) -> Json:
        out = as_json(self, _LLM_HEAD)
        if self.flops_known:
            out.update(as_json(self, ("prefill_flops_per_s", "decode_flops_per_s")))
        out["scenario"] = self.scenario
        out.update(as_json(self, _LLM_SERVER_ORDER if self.scheduled else _LLM_CELL_ORDER))
        out.update(as_json(self, ("stop_reason", "window_output_tokens_per_s", "output_tokens_per_s_ci95")))
        out.update(as_json(self, ("precision", "verdict")))
        return out

    @classmethod
    def from_json(cls, data: Json, where: str = "llm row") -> LLMRow:
        if not isinstance(data, dict):
            raise RecordError(f"{where}: not a JSON object")
        from common.scenario import scenario

        name = _need(data, "scenario", where)
        try:
            scheduled = scenario(name).scheduled
        except ValueError as exc:
            raise RecordError(f"{where}: key 'scenario': {exc}") from None
        identity = _LLM_SERVER_KEYS if scheduled else _LLM_CELL_KEYS
        for key in (*(identity[:1] if scheduled else identity), "verdict"):  # a server row's identity: its rate
            _need(data, key, where)
        values: dict[str, Any] = {name: data.get(name) for name in (*_LLM_FIGURES, *identity, *_LLM_TAIL)}
        values.update({name: data.get(name) or {} for name in _LLM_DISTRIBUTIONS})
        values["queries"], values["requests"] = data.get("queries", 0), data.get("requests", 0)
        values["duration_s"] = data.get("duration_s", 0.0)
        values["window_output_tokens_per_s"] = list(data.get("window_output_tokens_per_s") or [])
        values["verdict"] = Verdict.from_json(data["verdict"])
        values["flops_known"] = "prefill_flops_per_s" in data or "decode_flops_per_s" in data
        return cls(scenario=data["scenario"], **values)


# LLMRow's keys by part (its from_json); to_json spells each kind's order.
_LLM_DISTRIBUTIONS: Final = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "prefill_ms")
_LLM_RATES: Final = ("prefill_tokens_per_s", "decode_tokens_per_s", "output_tokens_per_s", "requests_per_s")
_LLM_FIGURES: Final = (
    *_LLM_RATES,
    "prefill_flops_per_s",
    "decode_flops_per_s",
    "kv_cache_mib",
    "contention",
)
_LLM_CELL_KEYS: Final = ("batch_size", "input_length", "output_length")
_LLM_SERVER_KEYS: Final = (
    "target_qps",
    "issued_qps",
    "input_length_range",
    "output_length_range",
    "length_distribution",
    "bound_percentile",
    "ttft_bound_ms",
    "tpot_bound_ms",
    "ttft_bound_met",
    "tpot_bound_met",
)
_LLM_TAIL: Final = ("stop_reason", "output_tokens_per_s_ci95", "precision")
# to_json's order: the figures, the FLOP/s where known, the scenario, each kind's identity and
# conditions, then the window, the interval, the precision and the verdict.
_LLM_HEAD: Final = (
    "queries",
    "requests",
    "duration_s",
    *_LLM_DISTRIBUTIONS,
    *_LLM_RATES,
)
_LLM_SERVER_ORDER: Final = (*_LLM_SERVER_KEYS[:8], "kv_cache_mib", "contention", *_LLM_SERVER_KEYS[8:])
_LLM_CELL_ORDER: Final = (*_LLM_CELL_KEYS, "kv_cache_mib", "contention")


@dataclass(frozen=True)
class ServingRow:
    """One load step of an LLM served over HTTP (``tools/measure/serving_stage.py``, for a serving engine such as
    ``inference_engine/cpu/vllm.py``): ``concurrency`` closed-loop streams, each request ``input_length``
    prompt tokens and ``output_length`` generated ones. The figures are ``tools.serving.figures.step_figures``'
    (docs/serving.md); the distributions (``ttft_ms``, ``tpot_ms``, ``itl_ms``, ``e2e_ms``: count, mean,
    p50/p90/p99, ci95), ``errors`` (kind -> count) and ``drift`` stay JSON objects."""

    concurrency: int
    input_length: int
    output_length: int
    requests: int
    completed: int
    failed: int
    input_tokens: int | None  # over the completed requests, counted as token_source says
    output_tokens: int | None
    duration_s: float
    ttft_ms: Json
    tpot_ms: Json
    itl_ms: Json
    e2e_ms: Json
    requests_per_s: float | None
    requests_per_s_ci95: list[float] | None
    output_tokens_per_s: float | None
    output_tokens_per_s_ci95: list[float] | None
    tokens_per_s_per_user: float | None
    token_source: list[str]
    errors: Json
    drift: Json
    stop_reason: str | None
    verdict: Verdict

    @property
    def label(self) -> str:
        """How a reason names the row: ``serving x4``."""
        return f"serving x{self.concurrency}"

    def to_json(self) -> Json:
        return as_json(self, _SERVING_ORDER)

    @classmethod
    def from_json(cls, data: Json, where: str = "serving row") -> ServingRow:
        if not isinstance(data, dict):
            raise RecordError(f"{where}: not a JSON object")
        for key in ("concurrency", "verdict"):
            _need(data, key, where)
        values: dict[str, Any] = {name: data.get(name) for name in _SERVING_ORDER}
        values.update({name: data.get(name) or {} for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "errors")})
        values["drift"] = data.get("drift") or {}
        values["token_source"] = list(data.get("token_source") or [])
        for name in ("requests", "completed", "failed", "input_length", "output_length"):
            values[name] = data.get(name, 0)
        values["duration_s"] = data.get("duration_s", 0.0)
        values["verdict"] = Verdict.from_json(data["verdict"])
        return cls(**values)


_SERVING_ORDER: Final = tuple(f.name for f in fields(ServingRow))


@dataclass(frozen=True)
class LLMBlock:
    """An LLM case's ``llm`` block (``tools/measure/llm_stage.py``): the model's shape, the workload
    keys, the offline ``table`` and the ``server`` rows, and the greedy check (``tools/checks/generation.py``,
    None when it did not run). ``model``, ``workload`` and ``greedy`` stay JSON objects. An LLM served over
    HTTP (a serving engine) has ``serving`` rows instead of the table and server rows, and the server's facts
    in ``served_by`` (both keys absent otherwise)."""

    model: Json
    workload: Json
    table: tuple[LLMRow, ...] = ()
    server: tuple[LLMRow, ...] = ()
    greedy: Json | None = None
    serving: tuple[ServingRow, ...] = ()
    served_by: Json | None = None

    @property
    def rows(self) -> tuple[LLMRow, ...]:
        """The table's cells, then the server rows."""
        return (*self.table, *self.server)

    def to_json(self) -> Json:
        out = {
            "model": self.model,
            "workload": self.workload,
            "table": [cell.to_json() for cell in self.table],
            "server": [row.to_json() for row in self.server],
            "greedy": self.greedy,
        }
        if self.serving or self.served_by is not None:  # optional keys: absent for an in-process engine
            out["serving"] = [row.to_json() for row in self.serving]
            out["served_by"] = self.served_by
        return out

    @classmethod
    def from_json(cls, data: Json | None, where: str = "llm") -> LLMBlock | None:
        if data is None:
            return None
        if not isinstance(data, dict):
            raise RecordError(f"{where}: not a JSON object")
        for key in ("model", "table", "server"):
            _need(data, key, where)

        def rows(key: str) -> tuple[LLMRow, ...]:
            items = data[key] or []
            if not isinstance(items, list):
                raise RecordError(f"{where}: key {key!r} is not a list")
            return tuple(LLMRow.from_json(row, f"{where}.{key}[{i}]") for i, row in enumerate(items))

        serving = data.get("serving") or []
        if not isinstance(serving, list):
            raise RecordError(f"{where}: key 'serving' is not a list")
        return cls(
            data["model"],
            data.get("workload") or {},
            rows("table"),
            rows("server"),
            data.get("greedy"),
            tuple(ServingRow.from_json(row, f"{where}.serving[{i}]") for i, row in enumerate(serving)),
            data.get("served_by"),
        )


@dataclass(frozen=True)
class PhaseBlock:
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
    verdict: Verdict
    started_at_unix: float | None
    finished_at_unix: float | None

    def to_json(self) -> Json:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["verdict"] = self.verdict.to_json()
        return out

    @classmethod
    def from_json(cls, data: Json | None, where: str = "phase") -> PhaseBlock | None:
        if data is None:
            return None
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        values["verdict"] = Verdict.from_json(_need(data, "verdict", where))
        values["window_qps"] = list(values["window_qps"] or [])
        return cls(**values)


@dataclass(frozen=True)
class CaseResult:
    """result.json: FlagPerf's keys (``Key``, same names and meaning), then InferPerf's.

    Built once by ``tools.results.result.build_result`` and parsed once by ``read_result`` on the
    host. ``llm`` (an LLM case's table and server rows) is an ``LLMBlock``. The blocks that belong to
    one part of the code stay JSON objects, typed as such: ``numeric``, ``audits``, ``baseline`` (a
    base case's peaks), ``engine``, ``cache``, ``steps``, ``config``, ``env``, ``raw_latencies``."""

    vendor: str
    compiler: str | None
    precision: str
    batchsize: int | None
    flops: float | None
    e2e_time_s: float | None
    val_whole_qps: float | None
    val_core_qps: float | None
    infer_whole_qps: float | None
    infer_core_qps: float | None
    val_average_acc: float | None
    infer_average_acc: float | None
    ci95: dict[str, list[float] | None]
    verdict: Verdict
    case: str
    framework: str
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
    status: str = "success"
    schema_version: int = SCHEMA_VERSION

    def flagperf(self, key: str) -> Any:
        """A figure by FlagPerf's key (``Key``)."""
        return getattr(self, dict(FLAGPERF_FIELDS)[key])

    def to_json(self) -> Json:
        out: Json = {key: getattr(self, name) for key, name in FLAGPERF_FIELDS}
        out.update(
            {
                "ci95": self.ci95,
                "schema_version": self.schema_version,
                "status": self.status,
                "verdict": self.verdict.to_json(),
                "case": self.case,
                "framework": self.framework,
                "accuracy_note": self.accuracy_note,
                "achieved_tflops": self.achieved_tflops,
                "validation": self.validation.to_json() if self.validation else None,
                "inference": self.inference.to_json() if self.inference else None,
                "performance": [row.to_json() for row in self.performance],
                "best": self.best,
                "numeric": self.numeric,
                "audits": self.audits,
                "performance_notes": self.performance_notes,
                "llm": self.llm.to_json() if self.llm is not None else None,
                "baseline": self.baseline,
                "engine": self.engine,
                "cache": self.cache,
                "steps": self.steps,
                "config": self.config,
                "env": self.env,
                "started_at": self.started_at,
                "finished_at": self.finished_at,
                "raw_latencies": self.raw_latencies,
            }
        )
        return out

    @classmethod
    def from_json(cls, data: Json, where: str = RESULT_FILE) -> CaseResult:
        if not isinstance(data, dict):
            raise RecordError(f"{where}: not a JSON object")
        version = _need(data, "schema_version", where)
        if version != SCHEMA_VERSION:
            raise RecordError(f"{where}: schema_version {version!r}, this InferPerf reads {SCHEMA_VERSION}")
        for key in (Key.VENDOR, Key.COMPILER, Key.PRECISION, "case", "framework", "verdict"):
            _need(data, key, where)
        flagperf: dict[str, Any] = {name: data.get(key) for key, name in FLAGPERF_FIELDS}
        return cls(
            **flagperf,
            ci95=data.get("ci95") or {},
            verdict=Verdict.from_json(data["verdict"]),
            case=data["case"],
            framework=data["framework"],
            accuracy_note=data.get("accuracy_note"),
            achieved_tflops=data.get("achieved_tflops"),
            validation=PhaseBlock.from_json(data.get("validation"), f"{where}: validation"),
            inference=PhaseBlock.from_json(data.get("inference"), f"{where}: inference"),
            performance=tuple(
                PerformanceRow.from_json(row, f"{where}: performance[{i}]")
                for i, row in enumerate(data.get("performance") or [])
            ),
            best=data.get("best"),
            numeric=data.get("numeric"),
            audits=list(data.get("audits") or []),
            performance_notes=list(data.get("performance_notes") or []),
            llm=LLMBlock.from_json(data.get("llm"), f"{where}: llm"),
            baseline=data.get("baseline"),
            engine=data.get("engine"),
            cache=data.get("cache") or {},
            steps=data.get("steps") or {},
            config=data.get("config") or {},
            env=data.get("env") or {},
            started_at=data.get("started_at", ""),
            finished_at=data.get("finished_at", ""),
            raw_latencies=data.get("raw_latencies"),
            status=data.get("status", "success"),
            schema_version=version,
        )


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
