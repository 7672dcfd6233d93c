"""Measured peaks (host side): the base tier's figures cached per host fingerprint, and MFU's denominator.

A base case's result.json carries ``baseline.figures`` (benchmarks/base_common.py). When a run
ends, every VALID compute figure (GEMM FLOP/s per dtype) and bandwidth figure (STREAM copy,
triad) is stored in ``<FLAGPERF_LOG_PATH>/baselines/<fingerprint>.json``, keyed by the host
fingerprint of the result's ``env`` (the log path is the one holding the
run's ``run<id>/`` folder): vendor, device, CPU model, usable CPUs and the accelerator
(model, driver, clocks) when there is one. Every later case whose result has the same
fingerprint takes its MFU against the measured peak of its precision; without one, the vendor's
``analysis_log`` estimate stays (``est.``). An INVALID figure is never cached: a peak measured
under contention or without precision would make every MFU after it wrong.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from common.files import write_json_atomic
from common.stats import relative_half_width

CACHE_DIR = "baselines"
FINGERPRINT_KEYS = ("cpu_model", "cpus_usable", "accelerator")


def fingerprint(env: dict | None, vendor: str, device: str | None) -> tuple[str, dict] | None:
    """(short hash, the fields hashed) of the hardware a result ran on; None without an ``env``."""
    if not isinstance(env, dict) or not env.get("cpu_model"):
        return None
    fields = {"vendor": vendor, "device": (device or "cpu").split(":")[0], **{key: env.get(key) for key in FINGERPRINT_KEYS}}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return digest, fields


def _of(result: dict, vendor: str) -> tuple[str, dict] | None:
    return fingerprint(result.get("env"), result.get("vendor") or vendor, (result.get("config") or {}).get("device"))


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
    width = relative_half_width(entry.get("value"), entry.get("ci95"))
    return format_rate(entry.get("value"), unit) + (f" ±{width:.1%}" if width is not None else "")


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

    def store(self, result: dict, vendor: str, run_id: str, host: str) -> list[str]:
        """Cache a base case's VALID figures under its fingerprint; the names of those stored."""
        baseline = result.get("baseline") or {}
        found = _of(result, vendor)
        if found is None or not baseline.get("figures"):
            return []
        key, fields = found
        entry = self.entry(key)
        entry.setdefault("fingerprint", fields)
        stored = []
        for figure in baseline["figures"]:
            if not figure.get("verdict", {}).get("valid") or not isinstance(figure.get("value"), (int, float)):
                logger.warning(f"{result.get('case')} on {host}: {figure.get('name')} is INVALID, not cached as a measured peak")
                continue
            if figure.get("kind") == "compute":
                group, name = "compute", figure["dtype"]
            elif figure.get("kind") == "bandwidth":
                group, name = "bandwidth", figure["kernel"]
            else:
                continue
            entry.setdefault(group, {})[name] = {
                "value": figure["value"],
                "ci95": figure.get("ci95"),
                "unit": figure.get("unit"),
                "name": figure.get("name"),
                "size": figure.get("size") or figure.get("array_bytes"),
                "run_id": run_id,
                "host": host,
                "finished_at": result.get("finished_at"),
            }
            stored.append(figure["name"])
        if stored:
            self.root.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path(key), entry)
        return stored

    def compute_peak(self, result: dict, vendor: str, precision: str | None) -> dict | None:
        """The cached measured GEMM peak for ``precision`` on the result's fingerprint, or None."""
        found = _of(result, vendor)
        if found is None or not precision:
            return None
        return (self.entry(found[0]).get("compute") or {}).get(precision.lower())

    def bandwidth(self, result: dict, vendor: str) -> dict | None:
        found = _of(result, vendor)
        return (self.entry(found[0]).get("bandwidth") or {}) if found else None


def measured_source(peak: dict, dtype: str) -> str:
    """``measured fp32 GEMM peak (485 GFLOP/s ±2.0%)``."""
    return f"measured {dtype} GEMM peak ({with_width(peak, 'FLOP/s')})"


def store_outcomes(outcomes: list, vendor: str, run_id: str) -> None:
    """Cache every base case's valid figures; run.py calls it before any record's MFU is computed."""
    for outcome in outcomes:
        result = outcome.result or {}
        peaks = MeasuredPeaks.near(outcome.local_dir)
        if peaks is not None and outcome.status == "success" and result.get("baseline"):
            stored = peaks.store(result, vendor, run_id, outcome.host)
            if stored:
                logger.info(f"measured peaks cached for host {outcome.host}: {', '.join(stored)} ({peaks.root})")


# ---- summary.md ---------------------------------------------------------------------------------
HEADER = "| case | host | figure | measured | size | calls | verdict |"


def markdown_lines(records: list[dict]) -> list[str]:
    rows = [(r, f) for r in records for f in ((r.get("baseline") or {}).get("figures") or [])]
    not_applicable = [r for r in records if (r.get("baseline") or {}).get("not_applicable")]
    if not rows and not not_applicable:
        return []
    lines = ["", "Base tier (the chip itself, measured until precise; docs/measurement.md):", ""]
    if rows:
        lines += [HEADER, "|---|---|---|---|---|---|---|"]
        for r, f in rows:
            size = f.get("size")
            shown = "x".join(str(s) for s in size) if isinstance(size, list) else f"{f['array_bytes'] / 2**20:.0f} MiB/array" if f.get("array_bytes") else "-"
            verdict = "valid" if f["verdict"]["valid"] else f"INVALID ({len(f['verdict']['reasons'])})"
            lines.append(f"| {r['case']}:{r['framework']} | {r['host']} | {f['name']} | {with_width(f, f['unit'])} | {shown} | {f['calls']} | {verdict} |")
    for r in not_applicable:
        lines.append(f"- {r['case']} on {r['host']}: not applicable ({r['baseline']['not_applicable']})")
    return lines
