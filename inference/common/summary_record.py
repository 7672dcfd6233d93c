"""summary.json as types: the run (``Summary``), one record per case x host (``SummaryRecord``), its
performance rows (``SummaryRow``: a result row with its MFU; ``AggregateRow``: a row summed over
hosts), an LLM case's block (``SummaryLLM``, ``SummaryLLMRow``, ``DecodeMBU``), and the
``repetitions`` block of a case run more than once (``Repetitions``, ``RepetitionFigure``).

Built typed where they are made (``utils/results/summary.py``'s ``merge_outcome``,
``utils/results/aggregate.py``, ``utils/results/figures.py``'s ``merge_repetitions``,
``utils/results/llm_summary.py``, ``utils/results/baselines.py``'s ``add_mbu``) and read by
attribute (summary.md, ``run.py``, ``run.py compare``, report.html). ``to_json()`` writes
summary.json's bytes as they were before the record was typed (tests/test_golden_results.py);
``from_json()`` reads them back, and a record without its identity (case, framework, host, noderank,
status) or with a key of the wrong type is one ``RecordError`` line naming the file and key. The keys
are described in docs/result_schema.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, Union

from common.record import (
    FLAGPERF_FIELDS,
    Json,
    LatencyBlock,
    LLMBlock,
    LLMRow,
    PerformanceRow,
    RecordError,
    RowKey,
    ServingRow,
    Verdict,
    _need,
    as_json,
    json_value,
)

SUMMARY_SCHEMA_VERSION: Final = 1
SUMMARY_FILE: Final = "summary.json"
_NUMBER: Final = (int, float)
_NAMES: Final = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a JSON object"}


def _typed(data: Json, key: str, types: tuple[type, ...], where: str, default: Any = None) -> Any:
    """``data[key]`` when it is one of ``types`` (or null); ``default`` when the key is absent."""
    value = data.get(key, default)
    if value is None or (isinstance(value, types) and not (isinstance(value, bool) and bool not in types)):
        return value
    expected = "a number" if types == _NUMBER else " or ".join(_NAMES.get(t, t.__name__) for t in types)
    raise RecordError(f"{where}: key {key!r} is not {expected}")


def _required(data: Json, key: str, types: tuple[type, ...], where: str) -> Any:
    _need(data, key, where)
    value = _typed(data, key, types, where)
    if value is None:
        raise RecordError(f"{where}: key {key!r} is null")
    return value


def _verdict(data: Json, where: str) -> Verdict | None:
    block = _typed(data, "verdict", (dict,), where)
    return None if block is None else Verdict.from_json(block)


def _latency(data: Json, where: str) -> LatencyBlock | None:
    block = _typed(data, "latency_ms", (dict,), where)
    return LatencyBlock.from_json(block) if block else None


@dataclass(frozen=True)
class SummaryRow(PerformanceRow):
    """A host's performance row in summary.json: result.json's row, then its MFU (and why it is null)."""

    mfu: float | None = None
    mfu_note: str | None = None

    def to_json(self) -> Json:
        return {**super().to_json(), "MFU": self.mfu, "MFU_note": self.mfu_note}

    @classmethod
    def of(cls, row: PerformanceRow, mfu: float | None, mfu_note: str | None) -> SummaryRow:
        return cls(**{f.name: getattr(row, f.name) for f in fields(PerformanceRow)}, mfu=mfu, mfu_note=mfu_note)

    @classmethod
    def from_json(cls, data: Json, where: str = "performance row") -> SummaryRow:
        row = cls.of(
            PerformanceRow.from_json(data, where),
            _typed(data, "MFU", _NUMBER, where),
            _typed(data, "MFU_note", (str,), where),
        )
        # a row without intervals has none, not intervals that could not be computed (summary.md's "± n/a")
        return row if "latency_ci95" in data else replace(row, latency_ci95={})


@dataclass(frozen=True)
class AggregateRow:
    """A performance row summed over the hosts that ran it together (``utils/results/aggregate.py``):
    qps summed, percentiles of every host's queries pooled (``latency_ms`` None: not every host kept them)."""

    batch_size: int
    scenario: str
    clients: int
    qps: float | None
    queries: int
    samples: int
    latency_ms: LatencyBlock | None
    latency_notes: list[str]
    pooled_queries: int | None
    target_qps: float | None
    latency_bound_met: bool | None
    mfu: float | None
    mfu_note: str | None
    verdict: Verdict
    # what a host's row has and a sum has not
    qps_ci95: None = field(default=None, init=False, repr=False)
    duration_s: None = field(default=None, init=False, repr=False)
    load_generator: str = field(default="inferperf", init=False, repr=False)

    @property
    def key(self) -> RowKey:
        return self.batch_size, self.scenario, self.clients

    @property
    def latency_ci95(self) -> dict[str, list[float] | None]:
        return {}

    def to_json(self) -> Json:
        out = as_json(self, _AGGREGATE_KEYS)
        out["latency_ms"] = out["latency_ms"] or {}  # not every host kept its queries: an empty block
        return out

    @classmethod
    def from_json(cls, data: Json, where: str = "aggregate row") -> AggregateRow:
        return cls(
            batch_size=_required(data, "batch_size", (int,), where),
            scenario=_required(data, "scenario", (str,), where),
            clients=_required(data, "clients", (int,), where),
            qps=_typed(data, "qps", _NUMBER, where),
            queries=_typed(data, "queries", (int,), where, 0),
            samples=_typed(data, "samples", (int,), where, 0),
            latency_ms=_latency(data, where),
            latency_notes=list(_typed(data, "latency_notes", (list,), where) or []),
            pooled_queries=_typed(data, "pooled_queries", (int,), where),
            target_qps=_typed(data, "target_qps", _NUMBER, where),
            latency_bound_met=_typed(data, "latency_bound_met", (bool,), where),
            mfu=_typed(data, "MFU", _NUMBER, where),
            mfu_note=_typed(data, "MFU_note", (str,), where),
            verdict=_verdict(data, where) or Verdict(),
        )


# AggregateRow's keys in summary.json's order (``as_json``: a pair is key, attribute).
_AGGREGATE_KEYS: Final = (
    "batch_size",
    "scenario",
    "clients",
    "qps",
    "queries",
    "samples",
    "latency_ms",
    "latency_notes",
    "pooled_queries",
    "target_qps",
    "latency_bound_met",
    ("MFU", "mfu"),
    ("MFU_note", "mfu_note"),
    "verdict",
)
Row = Union[SummaryRow, AggregateRow]


@dataclass(frozen=True)
class RepetitionFigure:
    """One figure of a case run N times: every repetition's value with its window's interval and
    validity, and their geometric mean with its t-interval (``utils/results/figures.py``)."""

    row: str
    figure: str
    unit: str
    higher_is_better: bool
    values: list[float]
    intervals: list[list[float] | None]
    valid: list[bool]
    geomean: float
    ci95: list[float] | None
    spread: float | None

    def to_json(self) -> Json:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Json, where: str = "figure") -> RepetitionFigure:
        if not isinstance(data, dict):
            raise RecordError(f"{where}: not a JSON object")
        return cls(
            row=_required(data, "row", (str,), where),
            figure=_required(data, "figure", (str,), where),
            unit=_typed(data, "unit", (str,), where, ""),
            higher_is_better=bool(_typed(data, "higher_is_better", (bool,), where)),
            values=_required(data, "values", (list,), where),
            intervals=_required(data, "intervals", (list,), where),
            valid=_required(data, "valid", (list,), where),
            geomean=_required(data, "geomean", _NUMBER, where),
            ci95=_typed(data, "ci95", (list,), where),
            spread=_typed(data, "spread", _NUMBER, where),
        )


@dataclass(frozen=True)
class Repetitions:
    """The ``repetitions`` block: how many times the case ran, each run's log dir and wall time, and
    every figure that all of them measured."""

    count: int
    log_dirs: list[str | None]
    wall_time_s: list[float | None]
    figures: tuple[RepetitionFigure, ...] = ()

    def to_json(self) -> Json:
        return {
            "count": self.count,
            "log_dirs": self.log_dirs,
            "wall_time_s": self.wall_time_s,
            "figures": [f.to_json() for f in self.figures],
        }

    @classmethod
    def from_json(cls, data: Json, where: str = "repetitions") -> Repetitions:
        return cls(
            count=_required(data, "count", (int,), where),
            log_dirs=list(_typed(data, "log_dirs", (list,), where) or []),
            wall_time_s=list(_typed(data, "wall_time_s", (list,), where) or []),
            figures=tuple(
                RepetitionFigure.from_json(f, f"{where}: figures[{i}]")
                for i, f in enumerate(_typed(data, "figures", (list,), where) or [])
            ),
        )


@dataclass(frozen=True)
class DecodeMBU:
    """An offline cell's decode memory-bandwidth utilisation (``utils/results/baselines.py::add_mbu``):
    the bytes one decoded token reads, and decode tokens/s x those bytes over the measured bandwidth
    (``mbu`` None and ``note`` why, above 100 % or unknown)."""

    bytes_per_token: float | None
    mbu: float | None
    note: str | None


# SummaryLLMRow's keys after the row's, and its MBU's (key, attribute).
_MFU_KEYS: Final = ("prefill_mfu", "prefill_mfu_note", "decode_mfu", "decode_mfu_note")
_MBU_KEYS: Final = (("decode_bytes_per_token", "bytes_per_token"), ("decode_mbu", "mbu"), ("decode_mbu_note", "note"))


@dataclass(frozen=True)
class SummaryLLMRow(LLMRow):
    """An LLM cell or server row in summary.json: result.json's row (``LLMRow``), then its prefill and
    decode MFU (and why null), then, for an offline cell on a host with a measured bandwidth, its MBU."""

    prefill_mfu: float | None = None
    prefill_mfu_note: str | None = None
    decode_mfu: float | None = None
    decode_mfu_note: str | None = None
    mbu: DecodeMBU | None = None

    def to_json(self) -> Json:
        out = {**super().to_json(), **as_json(self, _MFU_KEYS)}
        if self.mbu is not None:
            out.update(as_json(self.mbu, _MBU_KEYS))
        return out

    @classmethod
    def of(cls, row: LLMRow, **added: Any) -> SummaryLLMRow:
        """``row`` with the summary's figures ``added`` (the fields above)."""
        return cls(**{f.name: getattr(row, f.name) for f in fields(LLMRow)}, **added)

    @classmethod
    def extend(cls, row: LLMRow, data: Json, where: str) -> SummaryLLMRow:
        """``row`` (parsed from ``data``) with the summary's keys of ``data``."""
        mbu = (
            DecodeMBU(
                _typed(data, "decode_bytes_per_token", _NUMBER, where),
                _typed(data, "decode_mbu", _NUMBER, where),
                _typed(data, "decode_mbu_note", (str,), where),
            )
            if "decode_bytes_per_token" in data
            else None
        )
        return cls.of(
            row,
            prefill_mfu=_typed(data, "prefill_mfu", _NUMBER, where),
            prefill_mfu_note=_typed(data, "prefill_mfu_note", (str,), where),
            decode_mfu=_typed(data, "decode_mfu", _NUMBER, where),
            decode_mfu_note=_typed(data, "decode_mfu_note", (str,), where),
            mbu=mbu,
        )


@dataclass(frozen=True)
class SummaryLLM:
    """An LLM case's ``llm`` block in summary.json: result.json's (``LLMBlock``) with every row a
    ``SummaryLLMRow``, and, when decode MBU was computed, the bandwidth it is against (``mbu_bandwidth``)."""

    model: Json
    workload: Json
    table: tuple[SummaryLLMRow, ...] = ()
    server: tuple[SummaryLLMRow, ...] = ()
    greedy: Json | None = None
    mbu_bandwidth: str | None = None
    serving: tuple[ServingRow, ...] = ()  # a model served over HTTP: its load steps (result.json's, as they are)
    served_by: Json | None = None

    @property
    def rows(self) -> tuple[SummaryLLMRow, ...]:
        """The table's cells, then the server rows."""
        return (*self.table, *self.server)

    def to_json(self) -> Json:
        out: Json = {
            "model": self.model,
            "workload": self.workload,
            "table": [cell.to_json() for cell in self.table],
            "server": [row.to_json() for row in self.server],
            "greedy": self.greedy,
        }
        if self.serving or self.served_by is not None:  # optional keys, as in result.json's block
            out["serving"] = [row.to_json() for row in self.serving]
            out["served_by"] = self.served_by
        if self.mbu_bandwidth is not None:
            out["mbu_bandwidth"] = self.mbu_bandwidth
        return out

    @classmethod
    def from_json(cls, data: Json | None, where: str = "llm") -> SummaryLLM | None:
        block = LLMBlock.from_json(data, where)  # its keys and rows checked, one line naming where
        if block is None or data is None:
            return None
        return cls(
            model=block.model,
            workload=block.workload,
            table=tuple(
                SummaryLLMRow.extend(row, data["table"][i], f"{where}.table[{i}]") for i, row in enumerate(block.table)
            ),
            server=tuple(
                SummaryLLMRow.extend(row, data["server"][i], f"{where}.server[{i}]")
                for i, row in enumerate(block.server)
            ),
            greedy=block.greedy,
            mbu_bandwidth=_typed(data, "mbu_bandwidth", (str,), where),
            serving=block.serving,
            served_by=block.served_by,
        )


# summary.json's keys that are not identifiers, and the attribute each is read by
_RENAMED: Final = {
    **{key: name for key, name in FLAGPERF_FIELDS},
    "vendor_usage(GiB)": "vendor_usage_gib",
    "vendor_max_mem(GiB)": "vendor_max_mem_gib",
    "MFU": "mfu",
    "MFU_note": "mfu_note",
}
# Every record's keys in summary.json's order; then ``repetitions`` (a case run more than once) and
# ``aggregate``, ``hosts``, ``concurrent`` (an aggregate), present only where they apply.
_ORDER: Final = (
    "case",
    "framework",
    "host",
    "noderank",
    "status",
    "failed_step",
    "error",
    "exit_code",
    "wall_time_s",
    "log_dir",
    *(key for key, _ in FLAGPERF_FIELDS),
    "verdict",
    "accuracy_note",
    "latency_ms",
    "ci95",
    "latency_ci95",
    "precision_target",
    "latency_batches",
    "latency_notes",
    "sys_monitor",
    "vendor_usage(GiB)",
    "vendor_max_mem(GiB)",
    "peak_flops",
    "mfu_is_estimate",
    "peak_measured",
    "peak_flops_source",
    "baseline",
    "MFU",
    "MFU_note",
    "performance",
    "best",
    "numeric",
    "audits",
    "llm",
)
# The types a key may have (besides null); a key not named here is any JSON value.
_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "failed_step": (str,),
    "error": (str,),
    "exit_code": (int,),
    "wall_time_s": _NUMBER,
    "log_dir": (str,),
    "batchsize": (int, str),  # an aggregate over hosts of different batch sizes: "mixed"
    "flops": _NUMBER,
    **{key: _NUMBER for key, name in FLAGPERF_FIELDS if name.endswith(("_qps", "_acc", "_s"))},
    "ci95": (dict,),
    "latency_ci95": (dict,),
    "precision_target": _NUMBER,
    "latency_batches": (int,),
    "latency_notes": (list,),
    "sys_monitor": (dict,),
    "peak_flops": _NUMBER,
    "mfu_is_estimate": (bool,),
    "MFU": _NUMBER,
    "MFU_note": (str,),
    "performance": (list,),
    "audits": (list,),
    "llm": (dict,),
}


@dataclass(frozen=True)
class SummaryRecord:
    """One case x host in summary.json (or an aggregate over hosts): the outcome, FlagPerf's figures,
    the verdict, the latency, the monitors' memory, MFU against its peak, the performance rows, and an
    LLM case's ``llm`` block (``SummaryLLM``)."""

    case: str
    framework: str
    host: str
    noderank: int | None
    status: str
    failed_step: str | None = None
    error: str | None = None
    exit_code: int | None = None
    wall_time_s: float | None = None
    log_dir: str | None = None
    vendor: str | None = None
    compiler: str | None = None
    precision: str | None = None
    batchsize: int | str | None = None
    flops: float | None = None
    e2e_time_s: float | None = None
    val_whole_qps: float | None = None
    val_core_qps: float | None = None
    infer_whole_qps: float | None = None
    infer_core_qps: float | None = None
    val_average_acc: float | None = None
    infer_average_acc: float | None = None
    verdict: Verdict | None = None  # None: the case failed
    accuracy_note: str | None = None
    latency_ms: LatencyBlock | None = None
    ci95: dict[str, list[float] | None] | None = None  # by FlagPerf key
    latency_ci95: dict[str, list[float] | None] | None = None
    precision_target: float | None = None
    latency_batches: int | None = None
    latency_notes: list[str] = field(default_factory=list)
    sys_monitor: Json | None = None
    vendor_usage_gib: float | None = None
    vendor_max_mem_gib: float | None = None
    peak_flops: float | None = None
    mfu_is_estimate: bool | None = None
    peak_measured: str | None = None
    peak_flops_source: str | None = None
    baseline: Json | None = None
    mfu: float | None = None
    mfu_note: str | None = None
    performance: tuple[Row, ...] = ()
    best: Json | None = None
    numeric: Json | None = None
    audits: list[Json] = field(default_factory=list)
    llm: SummaryLLM | None = None
    repetitions: Repetitions | None = None
    repetitions_key: bool = False  # ``repetitions`` written null: an aggregate of repeated cases
    aggregate: bool = False
    hosts: list[str] | None = None
    concurrent: bool | None = None
    energy: Json | None = None  # common/energy.py::energy_block; written only where a monitor ran

    @property
    def succeeded(self) -> bool:
        return self.status == "success"

    @property
    def invalid(self) -> bool:
        return self.verdict is not None and not self.verdict.valid

    @property
    def identity(self) -> tuple[str, str, int | None]:
        """A record's identity in a run: case, framework, node rank."""
        return self.case, self.framework, self.noderank

    @property
    def name(self) -> str:
        return f"{self.case}:{self.framework}"

    def to_json(self) -> Json:
        out: Json = {key: json_value(getattr(self, _RENAMED.get(key, key))) for key in _ORDER}
        if self.repetitions is not None or self.repetitions_key:
            out["repetitions"] = json_value(self.repetitions)
        if self.aggregate:
            out.update(aggregate=True, hosts=self.hosts, concurrent=self.concurrent)
        if self.energy is not None:
            out["energy"] = self.energy
        return out

    @classmethod
    def from_json(cls, data: Json, where: str = "summary record") -> SummaryRecord:
        if not isinstance(data, dict):
            raise RecordError(f"{where}: not a JSON object")
        values: dict[str, Any] = {
            _RENAMED.get(key, key): _typed(data, key, _TYPES[key], where) if key in _TYPES else data.get(key)
            for key in _ORDER
        }
        for key in ("case", "framework", "host", "status"):
            values[key] = _required(data, key, (str,), where)
        _need(data, "noderank", where)
        values["noderank"] = _typed(data, "noderank", (int,), where)
        aggregate = bool(_typed(data, "aggregate", (bool,), where))
        row_type = AggregateRow if aggregate else SummaryRow
        values.update(
            verdict=_verdict(data, where),
            latency_ms=_latency(data, where),
            llm=SummaryLLM.from_json(values["llm"], f"{where}: llm"),
            latency_notes=list(values["latency_notes"] or []),
            audits=list(values["audits"] or []),
            performance=tuple(
                row_type.from_json(_object(row, f"{where}: performance[{i}]"), f"{where}: performance[{i}]")
                for i, row in enumerate(values["performance"] or [])
            ),
        )
        repetitions = _typed(data, "repetitions", (dict,), where)
        return cls(
            **values,
            repetitions=Repetitions.from_json(repetitions, f"{where}: repetitions") if repetitions else None,
            repetitions_key="repetitions" in data and repetitions is None,
            aggregate=aggregate,
            hosts=_typed(data, "hosts", (list,), where),
            concurrent=_typed(data, "concurrent", (bool,), where),
            energy=_typed(data, "energy", (dict,), where),
        )


def _object(value: Any, where: str) -> Json:
    if not isinstance(value, dict):
        raise RecordError(f"{where}: not a JSON object")
    return value


@dataclass(frozen=True)
class Summary:
    """summary.json: the run (its id, mode, vendor, hosts and times), its records (``results``) and
    the aggregates over hosts; the counts are the records'."""

    results: tuple[SummaryRecord, ...]
    aggregates: tuple[SummaryRecord, ...] = ()
    run_id: str | None = None
    mode: str | None = None
    vendor: str | None = None
    hosts: list[str] = field(default_factory=list)
    started_at: str | None = None  # ISO 8601, seconds
    finished_at: str | None = None
    schema_version: int = SUMMARY_SCHEMA_VERSION

    @property
    def succeeded(self) -> int:
        return sum(r.succeeded for r in self.results)

    @property
    def failed(self) -> int:
        return sum(not r.succeeded for r in self.results)

    @property
    def invalid(self) -> int:
        """Succeeded, but with an INVALID verdict."""
        return sum(r.invalid for r in self.results)

    def to_json(self) -> Json:
        return as_json(self, _SUMMARY_KEYS)

    @classmethod
    def from_json(cls, data: Any, where: str = SUMMARY_FILE) -> Summary:
        if not isinstance(data, dict):
            raise RecordError(f"{where}: not a JSON object")
        version = _typed(data, "schema_version", (int,), where, SUMMARY_SCHEMA_VERSION)
        if version != SUMMARY_SCHEMA_VERSION:
            raise RecordError(f"{where}: schema_version {version!r}, this InferPerf reads {SUMMARY_SCHEMA_VERSION}")
        results = _required(data, "results", (list,), where)
        aggregates = _typed(data, "aggregates", (list,), where) or []
        return cls(
            results=tuple(SummaryRecord.from_json(r, f"{where}: results[{i}]") for i, r in enumerate(results)),
            aggregates=tuple(SummaryRecord.from_json(r, f"{where}: aggregates[{i}]") for i, r in enumerate(aggregates)),
            run_id=_typed(data, "run_id", (str,), where),
            mode=_typed(data, "mode", (str,), where),
            vendor=_typed(data, "vendor", (str,), where),
            hosts=list(_typed(data, "hosts", (list,), where) or []),
            started_at=_typed(data, "started_at", (str,), where),
            finished_at=_typed(data, "finished_at", (str,), where),
            schema_version=version,
        )


# summary.json's keys in their order: the run, its counts (Summary's properties), its records.
_SUMMARY_KEYS: Final = (
    "schema_version",
    "run_id",
    "mode",
    "vendor",
    "hosts",
    "started_at",
    "finished_at",
    "succeeded",
    "failed",
    "invalid",
    "results",
    "aggregates",
)


def read_summary(path: str | Path) -> Summary:
    """``path`` (a summary.json) as a ``Summary``; an unreadable or misshapen file raises
    ``RecordError`` naming it."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: unreadable: {exc}") from None
    return Summary.from_json(data, str(path))
