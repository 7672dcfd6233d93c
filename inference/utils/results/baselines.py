"""Measured peaks (host side): the base tier's figures cached per host fingerprint, and MFU's denominator.

A base case's result.json carries ``baseline.figures`` (benchmarks/base_common.py). When a run
ends, every VALID compute figure (GEMM FLOP/s per dtype) and bandwidth figure (STREAM copy,
triad) is stored in ``<FLAGPERF_LOG_PATH>/baselines/<fingerprint>.json``, keyed by the host
fingerprint of the result's ``env`` (the log path is the one holding the
run's ``run<id>/`` folder): vendor, device, CPU model, usable CPUs and the accelerator
(model, driver, clocks) when there is one. Every later case whose result has the same
fingerprint takes its MFU against the measured peak of its precision; without one, the vendor's
``analysis_log`` estimate stays (``est.``). An INVALID figure is not cached as a peak: one measured
under contention, drifting or too short would make every MFU after it wrong. The one exception is a
figure whose only reasons are imprecision (its ± wider than asked when ``max_duration_s`` ran out):
its value is a measurement with its own, honest, wider interval, better than an estimate. It is
cached marked ``"valid": false`` with its reasons, every MFU taken against it says so, and it never
replaces a valid peak; the next valid figure replaces it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loguru import logger

from common.cells import interval_text
from common.files import write_json_atomic
from common.record import NOT_PRECISE, CaseResult
from common.summary_record import DecodeMBU, SummaryLLM, SummaryRecord

CACHE_DIR = "baselines"
FINGERPRINT_KEYS = ("cpu_model", "cpus_usable", "accelerator")


def fingerprint(env: dict | None, vendor: str, device: str | None) -> tuple[str, dict] | None:
    """(short hash, the fields hashed) of the hardware a result ran on; None without an ``env``."""
    if not isinstance(env, dict) or not env.get("cpu_model"):
        return None
    fields = {
        "vendor": vendor,
        "device": (device or "cpu").split(":")[0],
        **{key: env.get(key) for key in FINGERPRINT_KEYS},
    }
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return digest, fields


def _of(result: CaseResult, vendor: str) -> tuple[str, dict] | None:
    return fingerprint(result.env, result.vendor or vendor, result.config.get("device"))


def format_rate(value: Any, unit: str) -> str:
    """``485 GFLOP/s``, ``1.23 TFLOP/s``, ``21.4 GB/s`` (decimal prefixes, as FLOP/s and GB/s are quoted)."""
    if not isinstance(value, (int, float)):
        return "-"
    base = "FLOP/s" if unit == "FLOP/s" else "B/s"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{base}"
    return f"{value:.3g} {base}"


def with_width(entry: dict, unit: str) -> str:
    return format_rate(entry.get("value"), unit) + interval_text(entry.get("value"), entry, "ci95")


@dataclass
class MeasuredPeaks:
    """The cache folder, read and written by fingerprint."""

    root: Path
    loaded: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def near(cls, case_dir: Path) -> "MeasuredPeaks | None":
        """The cache of the log path holding ``case_dir`` (``<log path>/run<id>/<case>/<host>/``)."""
        for folder in Path(case_dir).parents:
            if folder.name.startswith("run"):
                return cls(folder.parent / CACHE_DIR)
        return None

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def entry(self, key: str) -> dict:
        if key not in self.loaded:
            try:
                self.loaded[key] = json.loads(self.path(key).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self.loaded[key] = {}
        return self.loaded[key]

    def store(self, result: CaseResult, vendor: str, run_id: str, host: str) -> list[str]:
        """Cache a base case's VALID figures, and its imprecise ones where no valid one is held (module
        docstring), under its fingerprint; the names of those stored."""
        baseline = result.baseline or {}
        found = _of(result, vendor)
        if found is None or not baseline.get("figures"):
            return []
        key, fields = found
        entry = self.entry(key)
        entry.setdefault("fingerprint", fields)
        stored = []
        for figure in baseline["figures"]:
            slot, standing = _slot(figure), _standing(figure)
            if slot is None:
                continue
            held = entry.get(slot[0], {}).get(slot[1])
            if standing is None or (standing == "imprecise" and held is not None and held.get("valid", True)):
                kept = "; the valid peak cached before stays" if standing == "imprecise" else ""
                logger.warning(f"{result.case} on {host}: {figure.get('name')} is INVALID, not cached{kept}")
                continue
            entry.setdefault(slot[0], {})[slot[1]] = _cached(figure, standing, run_id, host, result.finished_at)
            if standing == "imprecise":
                logger.warning(
                    f"{result.case} on {host}: {figure.get('name')} is INVALID for its precision alone "
                    f"({'; '.join(figure['verdict']['reasons'])}): cached as an imprecise peak, marked so in every "
                    "MFU against it, until a valid one replaces it"
                )
            stored.append(figure["name"] + (" (imprecise)" if standing == "imprecise" else ""))
        if stored:
            self.root.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path(key), entry)
        return stored

    def compute_peak(self, result: CaseResult, vendor: str, precision: str | None) -> dict | None:
        """The cached measured GEMM peak for ``precision`` on the result's fingerprint, or None."""
        found = _of(result, vendor)
        if found is None or not precision:
            return None
        return (self.entry(found[0]).get("compute") or {}).get(precision.lower())

    def bandwidth(self, result: CaseResult, vendor: str) -> dict | None:
        found = _of(result, vendor)
        return (self.entry(found[0]).get("bandwidth") or {}) if found else None


def _slot(figure: dict) -> tuple[str, str] | None:
    """Where a base-tier figure is cached: ("compute", its dtype) or ("bandwidth", its kernel); None
    for a figure that is no peak (a transfer, an all-reduce)."""
    if figure.get("kind") == "compute":
        return "compute", figure["dtype"]
    if figure.get("kind") == "bandwidth":
        return "bandwidth", figure["kernel"]
    return None


def _cached(figure: dict, standing: str, run_id: str, host: str, finished_at: str | None) -> dict:
    """A figure's entry in the cache: its value, interval, where and when it was measured, and
    whether it was valid (an imprecise one keeps its reasons)."""
    return {
        "value": figure["value"],
        "ci95": figure.get("ci95"),
        "unit": figure.get("unit"),
        "name": figure.get("name"),
        "size": figure.get("size") or figure.get("array_bytes"),
        "run_id": run_id,
        "host": host,
        "finished_at": finished_at,
        "valid": standing == "valid",
        **({"reasons": list(figure["verdict"]["reasons"])} if standing == "imprecise" else {}),
    }


def _standing(figure: dict) -> str | None:
    """ "valid"; "imprecise" for an INVALID figure whose every reason is imprecision and which has
    a value and an interval (module docstring); None for any other."""
    verdict = figure.get("verdict") or {}
    if not isinstance(figure.get("value"), (int, float)):
        return None
    if verdict.get("valid"):
        return "valid"
    reasons = verdict.get("reasons") or []
    if reasons and figure.get("ci95") and all(str(reason).startswith(NOT_PRECISE) for reason in reasons):
        return "imprecise"
    return None


def is_imprecise(peak: dict) -> bool:
    """Whether a cached peak was INVALID for its precision alone (module docstring); an entry
    without ``valid`` was cached valid."""
    return not peak.get("valid", True)


def _width_and_standing(peak: dict, unit: str) -> str:
    """``485 GFLOP/s ±2.0%``, with ``, INVALID: not precise enough`` after an imprecise peak's."""
    return with_width(peak, unit) + (", INVALID: not precise enough" if is_imprecise(peak) else "")


def measured_source(peak: dict, dtype: str) -> str:
    """``measured fp32 GEMM peak (485 GFLOP/s ±2.0%)``; an imprecise one (module docstring) says so:
    ``measured fp32 GEMM peak (344 GFLOP/s ±3.1%, INVALID: not precise enough)``."""
    return f"measured {dtype} GEMM peak ({_width_and_standing(peak, 'FLOP/s')})"


def store_outcomes(outcomes: list, vendor: str, run_id: str) -> None:
    """Cache every base case's valid figures; run.py calls it before any record's MFU is computed."""
    for outcome in outcomes:
        result = outcome.result
        peaks = MeasuredPeaks.near(outcome.local_dir)
        if peaks is not None and outcome.status == "success" and result is not None and result.baseline:
            stored = peaks.store(result, vendor, run_id, outcome.host)
            if stored:
                logger.info(f"measured peaks cached for host {outcome.host}: {', '.join(stored)} ({peaks.root})")


# ---- MBU: memory-bandwidth utilisation of LLM decode -----------------------------------------------
BYTES_PER_PARAM = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int4": 0.5}


def decode_bytes_per_token(model: dict, batch: int, input_length: int, output_length: int) -> float | None:
    """Bytes one decoded token reads: the weights (all but the input embedding, a lookup) once
    per decode step, shared by the batch's ``batch`` sequences, plus its own sequence's KV cache
    at the mean decode context (input_length + output_length / 2 positions)."""
    per_param = BYTES_PER_PARAM.get(str(model.get("precision") or "fp32").lower())
    if not per_param or not batch or not model.get("params"):
        return None
    weights = (model["params"] - (model.get("embedding_params") or 0)) * per_param
    kv_per_position = (
        2 * model["layers"] * model["kv_heads"] * model["head_dim"] * (model.get("bytes_per_kv_value") or per_param)
    )
    return weights / batch + kv_per_position * (input_length + output_length / 2)


def add_mbu(llm: SummaryLLM | None, bandwidth: dict | None) -> SummaryLLM | None:
    """``llm`` with each offline cell's decode MBU: decode tokens/s x bytes per token over the measured
    STREAM bandwidth (triad, else copy); over 100 % is a note, never a figure. ``llm`` as it is
    without a measured bandwidth."""
    memory = (bandwidth or {}).get("triad") or (bandwidth or {}).get("copy")
    if llm is None or not memory:
        return llm
    kernel = "triad" if (bandwidth or {}).get("triad") else "copy"
    against = f"measured STREAM {kernel} ({_width_and_standing(memory, 'B/s')})"
    cells = []
    for cell in llm.table:
        per_token = decode_bytes_per_token(
            llm.model, cell.batch_size or 0, cell.input_length or 0, cell.output_length or 0
        )
        rate = cell.decode_tokens_per_s
        value = per_token * rate / memory["value"] if per_token and rate else None
        note = (
            None
            if value is None or value <= 1
            else f"{value:.0%} of the {against}: the bandwidth baseline is wrong or the engine reads less than the "
            "model's weights per step"
        )
        cells.append(replace(cell, mbu=DecodeMBU(per_token, value if note is None else None, note)))
    return replace(llm, table=tuple(cells), mbu_bandwidth=against)


# ---- summary.md ---------------------------------------------------------------------------------
HEADER = "| case | host | figure | measured | size | calls | verdict |"


def markdown_lines(records: list[SummaryRecord]) -> list[str]:
    rows = [(r, f) for r in records for f in ((r.baseline or {}).get("figures") or [])]
    not_applicable = [r for r in records if (r.baseline or {}).get("not_applicable")]
    if not rows and not not_applicable:
        return mbu_lines(records)
    lines = ["", "Base tier (the chip itself, measured until precise; docs/measurement.md):", ""]
    if rows:
        lines += [HEADER, "|---|---|---|---|---|---|---|"]
        for r, f in rows:
            size = f.get("size")
            nbytes = f.get("array_bytes") or f.get("bytes")
            shown = (
                "x".join(str(s) for s in size)
                if isinstance(size, list)
                else f"{nbytes / 2**20:.0f} MiB" + ("/array" if f.get("array_bytes") else "")
                if nbytes
                else "-"
            )
            verdict = "valid" if f["verdict"]["valid"] else f"INVALID ({len(f['verdict']['reasons'])})"
            lines.append(
                f"| {r.name} | {r.host} | {f['name']} | {with_width(f, f['unit'])} | {shown} | "
                f"{f['calls']} | {verdict} |"
            )
    for r in not_applicable:
        lines.append(f"- {r.case} on {r.host}: not applicable ({(r.baseline or {})['not_applicable']})")
    return lines + mbu_lines(records)


def mbu_lines(records: list[SummaryRecord]) -> list[str]:
    """One line per LLM offline cell with a decode MBU (or its note)."""
    lines = []
    for r in records:
        llm = r.llm
        if llm is None:
            continue
        for cell in llm.table:
            mbu = cell.mbu
            if mbu is None or (mbu.mbu is None and not mbu.note):
                continue
            shown = f"{mbu.mbu:.1%} of the {llm.mbu_bandwidth}" if mbu.mbu is not None else f"n/a ({mbu.note})"
            lines.append(
                f"- {r.case} on {r.host}, bs {cell.batch_size} in {cell.input_length} out "
                f"{cell.output_length}: decode MBU {shown} "
                f"({format_rate(mbu.bytes_per_token, 'B/s').replace('/s', '')} per token x "
                f"{cell.decode_tokens_per_s:.1f} tokens/s)"
            )
    return (
        [
            "",
            "Decode MBU (weights once per step over the batch + the sequence's KV cache, per token, x decode "
            "tokens/s):",
            *lines,
        ]
        if lines
        else []
    )
