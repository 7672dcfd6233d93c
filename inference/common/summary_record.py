"""summary.json as types: the run (``Summary``), one record per case x host (``SummaryRecord``), its
performance rows (``SummaryRow``: a result row with its MFU; ``AggregateRow``: a row summed over
hosts), an LLM case's block (``SummaryLLM``, ``SummaryLLMRow``, ``DecodeMBU``), and the
``repetitions`` block of a case run more than once (``Repetitions``, ``RepetitionFigure``).

Built typed where they are made (``utils/results/summary.py``'s ``merge_outcome``,
``utils/results/aggregate.py``, ``utils/results/figures.py``'s ``merge_repetitions``,
``utils/results/llm_summary.py``, ``utils/results/baselines.py``'s ``add_mbu``) and read by
attribute (summary.md, ``run.py``, ``run.py compare``, report.html). Each field is one key, in
summary.json's order; ``to_json()`` and ``from_json()`` are the codec's (common/codec.py), which
writes summary.json's bytes as they were before the record was typed (tests/test_golden_results.py)
and refuses a record without its identity (case, framework, host, noderank, status) or with a key of
the wrong type in one ``RecordError`` line naming the file and key. The keys are described in
docs/result_schema.md.
"""

from __future__ import annotations

from dataclasses import field, fields
from pathlib import Path
from typing import Any, Final, Union

from common.codec import Json, Record, decode_items, derived, json_field, read_list
from common.record import (
    Key,
    LatencyBlock,
    LLMRow,
    PerformanceRow,
    RecordError,
    RowKey,
    ServingStep,
    Verdict,
)

SUMMARY_SCHEMA_VERSION: Final = 1
SUMMARY_FILE: Final = "summary.json"


class SummaryRow(PerformanceRow):
    """A host's performance row in summary.json: result.json's row, then its MFU (and why it is null)."""

    # a row without intervals has none, not intervals that could not be computed (summary.md's "± n/a")
    latency_ci95: dict[str, list[float] | None] = json_field(missing=dict)
    mfu: float | None = json_field(key="MFU", default=None)
    mfu_note: str | None = json_field(key="MFU_note", default=None)

    @classmethod
    def of(cls, row: PerformanceRow, mfu: float | None, mfu_note: str | None) -> SummaryRow:
        return cls(**{f.name: getattr(row, f.name) for f in fields(PerformanceRow)}, mfu=mfu, mfu_note=mfu_note)


def _empty() -> Json:
    return {}


class AggregateRow(Record, where="aggregate row"):
    """A performance row summed over the hosts that ran it together (``utils/results/aggregate.py``):
    qps summed, percentiles of every host's queries pooled (``latency_ms`` None: not every host kept
    them, written as an empty block)."""

    batch_size: int = json_field(required=True)
    scenario: str = json_field(required=True)
    clients: int = json_field(required=True)
    qps: float | None
    queries: int
    samples: int
    latency_ms: LatencyBlock | None = json_field(empty_is_none=True, none_as=_empty)
    latency_notes: list[str]
    pooled_queries: int | None
    target_qps: float | None
    latency_bound_met: bool | None
    mfu: float | None = json_field(key="MFU")
    mfu_note: str | None = json_field(key="MFU_note")
    verdict: Verdict
    # what a host's row has and a sum has not (neither read nor written)
    qps_ci95: None = field(default=None, init=False, repr=False)
    duration_s: None = field(default=None, init=False, repr=False)
    load_generator: str = field(default="inferperf", init=False, repr=False)

    @property
    def key(self) -> RowKey:
        return self.batch_size, self.scenario, self.clients

    @property
    def latency_ci95(self) -> dict[str, list[float] | None]:
        return {}


Row = Union[SummaryRow, AggregateRow]


class RepetitionFigure(Record, where="figure"):
    """One figure of a case run N times: every repetition's value with its window's interval and
    validity, and their geometric mean with its t-interval (``utils/results/figures.py``)."""

    row: str = json_field(required=True)
    figure: str = json_field(required=True)
    unit: str
    higher_is_better: bool
    values: list[float] = json_field(required=True)
    intervals: list[list[float] | None] = json_field(required=True)
    valid: list[bool] = json_field(required=True)
    geomean: float = json_field(required=True)
    ci95: list[float] | None
    spread: float | None


class Repetitions(Record, where="repetitions"):
    """The ``repetitions`` block: how many times the case ran, each run's log dir and wall time, and
    every figure that all of them measured."""

    count: int = json_field(required=True)
    log_dirs: list[str | None]
    wall_time_s: list[float | None]
    figures: tuple[RepetitionFigure, ...] = ()


class DecodeMBU(Record, where="decode mbu"):
    """An offline cell's decode memory-bandwidth utilisation (``utils/results/baselines.py::add_mbu``):
    the bytes one decoded token reads, and decode tokens/s x those bytes over the measured bandwidth
    (``mbu`` None and ``note`` why, above 100 % or unknown). Its keys sit among its row's."""

    bytes_per_token: float | None = json_field(key="decode_bytes_per_token")
    mbu: float | None = json_field(key="decode_mbu")
    note: str | None = json_field(key="decode_mbu_note")


class SummaryLLMRow(LLMRow):
    """An LLM cell or server row in summary.json: result.json's row (``LLMRow``), then its prefill and
    decode MFU (and why null), then, for an offline cell on a host with a measured bandwidth, its MBU."""

    prefill_mfu: float | None = None
    prefill_mfu_note: str | None = None
    decode_mfu: float | None = None
    decode_mfu_note: str | None = None
    mbu: DecodeMBU | None = json_field(default=None, flatten=True)

    @classmethod
    def of(cls, row: LLMRow, **added: Any) -> SummaryLLMRow:
        """``row`` with the summary's figures ``added`` (the fields above)."""
        return cls(**{f.name: getattr(row, f.name) for f in fields(LLMRow)}, **added)


def _served(block: SummaryLLM) -> bool:
    """As in result.json's block (``LLMBlock``): the serving keys only for a model served over HTTP."""
    return bool(block.serving) or block.served_by is not None


class SummaryLLM(Record, where="llm"):
    """An LLM case's ``llm`` block in summary.json: result.json's (``LLMBlock``) with every row a
    ``SummaryLLMRow``, and, when decode MBU was computed, the bandwidth it is against (``mbu_bandwidth``)."""

    model: Json = json_field(required=True)
    workload: Json
    table: tuple[SummaryLLMRow, ...] = json_field(default=(), required=True)
    server: tuple[SummaryLLMRow, ...] = json_field(default=(), required=True)
    greedy: Json | None = None
    serving: tuple[ServingStep, ...] = json_field(default=(), write_if=_served)  # result.json's load steps
    served_by: Json | None = json_field(default=None, write_if=_served)
    mbu_bandwidth: str | None = json_field(default=None, skip_none=True)

    @property
    def rows(self) -> tuple[SummaryLLMRow, ...]:
        """The table's cells, then the server rows."""
        return (*self.table, *self.server)


def _performance(data: Json, where: str) -> tuple[Row, ...]:
    """A record's rows: an aggregate's are sums over hosts, a host's are its result rows with MFU."""
    row_type: type[Row] = AggregateRow if data.get("aggregate") is True else SummaryRow
    return decode_items(row_type, read_list(data, "performance", where), f"{where}: performance")


def _aggregate(record: SummaryRecord) -> bool:
    return record.aggregate


class SummaryRecord(Record, where="summary record"):
    """One case x host in summary.json (or an aggregate over hosts): the outcome, FlagPerf's figures,
    the verdict, the latency, the monitors' memory, MFU against its peak, the performance rows, and an
    LLM case's ``llm`` block (``SummaryLLM``); then ``repetitions`` (a case run more than once) and
    ``aggregate``, ``hosts``, ``concurrent`` (an aggregate), present only where they apply."""

    case: str = json_field(required=True)
    framework: str = json_field(required=True)
    host: str = json_field(required=True)
    noderank: int | None = json_field(required=True)
    status: str = json_field(required=True)
    failed_step: str | None = None
    error: str | None = None
    exit_code: int | None = None
    wall_time_s: float | None = None
    log_dir: str | None = None
    vendor: str | None = None
    compiler: str | None = None
    precision: str | None = None
    batchsize: int | str | None = None  # an aggregate over hosts of different batch sizes: "mixed"
    flops: float | None = None
    e2e_time_s: float | None = json_field(key=Key.E2E_TIME, default=None)
    val_whole_qps: float | None = json_field(key=Key.VAL_WHOLE_QPS, default=None)
    val_core_qps: float | None = json_field(key=Key.VAL_CORE_QPS, default=None)
    infer_whole_qps: float | None = json_field(key=Key.INFER_WHOLE_QPS, default=None)
    infer_core_qps: float | None = json_field(key=Key.INFER_CORE_QPS, default=None)
    val_average_acc: float | None = None
    infer_average_acc: float | None = None
    verdict: Verdict | None = None  # None: the case failed
    accuracy_note: str | None = None
    latency_ms: LatencyBlock | None = json_field(default=None, empty_is_none=True)  # {}: no latency
    ci95: dict[str, list[float] | None] | None = None  # by FlagPerf key
    latency_ci95: dict[str, list[float] | None] | None = None
    precision_target: float | None = None
    latency_batches: int | None = None
    latency_notes: list[str] = field(default_factory=list)
    sys_monitor: Json | None = None
    vendor_usage_gib: float | None = json_field(key="vendor_usage(GiB)", default=None)
    vendor_max_mem_gib: float | None = json_field(key="vendor_max_mem(GiB)", default=None)
    peak_flops: float | None = None
    mfu_is_estimate: bool | None = None
    peak_measured: str | None = None
    peak_flops_source: str | None = None
    baseline: Json | None = None
    mfu: float | None = json_field(key="MFU", default=None)
    mfu_note: str | None = json_field(key="MFU_note", default=None)
    performance: tuple[Row, ...] = json_field(default=(), read=_performance)
    best: Json | None = None
    numeric: Json | None = None
    audits: list[Json] = field(default_factory=list)
    llm: SummaryLLM | None = None
    repetitions: Repetitions | None = json_field(
        default=None, write_if=lambda record: record.repetitions is not None or record.repetitions_key
    )
    # ``repetitions`` written null: an aggregate of repeated cases
    repetitions_key: bool = json_field(
        default=False, write=False, read=lambda data, _: "repetitions" in data and data["repetitions"] is None
    )
    aggregate: bool = json_field(default=False, write_if=_aggregate)
    hosts: list[str] | None = json_field(default=None, write_if=_aggregate)
    concurrent: bool | None = json_field(default=None, write_if=_aggregate)
    energy: Json | None = json_field(
        default=None, skip_none=True
    )  # common/energy.py::energy_block, where a monitor ran

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


def _summary_version(version: Any) -> str | None:
    if version == SUMMARY_SCHEMA_VERSION:
        return None
    return f"schema_version {version!r}, this InferPerf reads {SUMMARY_SCHEMA_VERSION}"


class Summary(Record, where=SUMMARY_FILE):
    """summary.json: the run (its id, mode, vendor, hosts and times), its counts (of ``results``), its
    records (``results``) and the aggregates over hosts."""

    schema_version: int = json_field(kw_only=True, default=SUMMARY_SCHEMA_VERSION, check=_summary_version)
    run_id: str | None = json_field(kw_only=True, default=None)
    mode: str | None = json_field(kw_only=True, default=None)
    vendor: str | None = json_field(kw_only=True, default=None)
    hosts: list[str] = json_field(kw_only=True, default_factory=list)
    started_at: str | None = json_field(kw_only=True, default=None)  # ISO 8601, seconds
    finished_at: str | None = json_field(kw_only=True, default=None)
    succeeded: int = derived(lambda summary: sum(r.succeeded for r in summary.results))
    failed: int = derived(lambda summary: sum(not r.succeeded for r in summary.results))
    invalid: int = derived(lambda summary: sum(r.invalid for r in summary.results))  # succeeded, but INVALID
    results: tuple[SummaryRecord, ...] = json_field(required=True)
    aggregates: tuple[SummaryRecord, ...] = ()


def read_summary(path: str | Path) -> Summary:
    """``path`` (a summary.json) as a ``Summary``; an unreadable or misshapen file raises
    ``RecordError`` naming it."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: unreadable: {exc}") from None
    return Summary.from_json(data, str(path))
