"""The run's exports beside result.json: every request as one JSON line (``requests.jsonl``) and every
step as one CSV row (``steps.csv``), for a spreadsheet, pandas or another tool.

  requests.jsonl  one line per request, in each step's completion order: ``phase`` (``step`` or
                  ``capacity``), ``step`` (its label), ``sent_ms`` (from the step's first sending),
                  ``ok``, ``error_kind`` and ``error_detail`` (null when it completed), and the request's
                  record as result.json's ``records`` hold it (``ttft_ms``, ``ttfa_ms``, ``tpot_ms``,
                  ``e2e_ms``, ``itl_ms``, ``input_tokens``, ``output_tokens``, ``reasoning_tokens``,
                  ``answer_tokens``, ``token_source``, ``finish_reason``, ``max_tokens``, ``retries``, …).
  steps.csv       one row per step (sweep steps, then capacity probes): ``STEP_COLUMNS``. An empty cell is a
                  figure the step has none of; the server's figures read ``not exposed`` where its /metrics
                  does not give them.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Final, Iterable

from tools.serving.client import RequestRecord
from tools.serving.metrics import NOT_EXPOSED


def request_lines(phase: str, label: str, records: list[RequestRecord]) -> Iterable[str]:
    """requests.jsonl's lines for one step's records."""
    t0 = min((r.sent_ns for r in records), default=0)
    for record in records:
        data = record.to_dict()
        error = record.error or {}
        line = {
            "phase": phase,
            "step": label,
            "sent_ms": (record.sent_ns - t0) / 1e6,
            "ok": record.ok,
            "error_kind": error.get("kind"),
            "error_detail": error.get("detail"),
            **{k: v for k, v in data.items() if k not in ("ok", "error")},
        }
        yield json.dumps(line, separators=(",", ":"), default=str)


STEP_COLUMNS = (
    "phase",
    "step",
    "concurrency",
    "request_rate",
    "requests",
    "completed",
    "failed",
    "errors",
    "duration_s",
    "requests_per_s",
    "requests_per_s_ci95_low",
    "requests_per_s_ci95_high",
    "output_tokens_per_s",
    "output_tokens_per_s_ci95_low",
    "output_tokens_per_s_ci95_high",
    "total_tokens_per_s",
    "goodput_requests_per_s",
    "ttft_ms_mean",
    "ttft_ms_p50",
    "ttft_ms_p90",
    "ttft_ms_p99",
    "ttfa_ms_p50",
    "tpot_ms_p50",
    "tpot_ms_p90",
    "itl_ms_p50",
    "e2e_ms_p50",
    "e2e_ms_p90",
    "tokens_per_s_per_user",
    "output_tokens",
    "reasoning_tokens",
    "answer_tokens",
    "slo_attainment",
    "slo_verdict",
    "valid",
    "reasons",
    "not_judged",
    "server",
    "server_kv_cache_usage_mean",
    "server_kv_cache_usage_peak",
    "server_prefix_cache_hit_rate",
    "server_running_mean",
    "server_running_peak",
    "server_waiting_mean",
    "server_waiting_peak",
    "server_queue_time_ms_p50",
    "server_ttft_ms_mean",
    "server_ttft_ms_p50",
    "server_preemptions",
    "server_spec_acceptance_rate",
)


def _get(block: Any, *path: str) -> Any:
    for key in path:
        if block == NOT_EXPOSED:
            return NOT_EXPOSED
        if not isinstance(block, dict):
            return None
        block = block.get(key)
    return block


# steps.csv's columns read straight from the step's block: (column, path into the block)
_STEP_PATHS: Final = (
    ("ttft_ms_mean", ("ttft_ms", "mean")),
    ("ttft_ms_p50", ("ttft_ms", "p50")),
    ("ttft_ms_p90", ("ttft_ms", "p90")),
    ("ttft_ms_p99", ("ttft_ms", "p99")),
    ("ttfa_ms_p50", ("ttfa_ms", "p50")),
    ("tpot_ms_p50", ("tpot_ms", "p50")),
    ("tpot_ms_p90", ("tpot_ms", "p90")),
    ("itl_ms_p50", ("itl_ms", "p50")),
    ("e2e_ms_p50", ("e2e_ms", "p50")),
    ("e2e_ms_p90", ("e2e_ms", "p90")),
    ("tokens_per_s_per_user", ("tokens_per_s_per_user",)),
    ("output_tokens", ("output_tokens",)),
    ("reasoning_tokens", ("reasoning", "reasoning_tokens")),
    ("answer_tokens", ("reasoning", "answer_tokens")),
)
# the server's own figures (its /metrics): (column, path into the step's server_metrics block)
_SERVER_PATHS: Final = (
    ("server_kv_cache_usage_mean", ("kv_cache_usage", "mean")),
    ("server_kv_cache_usage_peak", ("kv_cache_usage", "peak")),
    ("server_prefix_cache_hit_rate", ("prefix_cache_hit_rate",)),
    ("server_running_mean", ("running", "mean")),
    ("server_running_peak", ("running", "peak")),
    ("server_waiting_mean", ("waiting", "mean")),
    ("server_waiting_peak", ("waiting", "peak")),
    ("server_queue_time_ms_p50", ("queue_time_ms", "p50")),
    ("server_ttft_ms_mean", ("ttft_ms", "mean")),
    ("server_ttft_ms_p50", ("ttft_ms", "p50")),
    ("server_preemptions", ("preemptions",)),
    ("server_spec_acceptance_rate", ("spec_decode", "acceptance_rate")),
)


def step_row(phase: str, step: dict) -> dict:
    t, verdict = step.get("throughput") or {}, step.get("verdict") or {}
    load, slo = step.get("load") or {}, step.get("slo") or {}

    def ci(name: str, end: int) -> Any:
        interval = _get(t, name, "ci95")
        return interval[end] if isinstance(interval, list) and len(interval) == 2 else None

    return {
        "phase": phase,
        "step": step.get("label"),
        "concurrency": load.get("concurrency"),
        "request_rate": load.get("request_rate"),
        "requests": step.get("requests"),
        "completed": step.get("completed"),
        "failed": step.get("failed"),
        "errors": " ".join(f"{k}:{n}" for k, n in sorted((step.get("errors") or {}).items())),
        "duration_s": step.get("duration_s"),
        "requests_per_s": _get(t, "requests_per_s", "value"),
        "requests_per_s_ci95_low": ci("requests_per_s", 0),
        "requests_per_s_ci95_high": ci("requests_per_s", 1),
        "output_tokens_per_s": _get(t, "output_tokens_per_s", "value"),
        "output_tokens_per_s_ci95_low": ci("output_tokens_per_s", 0),
        "output_tokens_per_s_ci95_high": ci("output_tokens_per_s", 1),
        "total_tokens_per_s": _get(t, "total_tokens_per_s", "value"),
        "goodput_requests_per_s": _get(t, "goodput_requests_per_s", "value"),
        **{column: _get(step, *path) for column, path in _STEP_PATHS},
        "slo_attainment": slo.get("attainment"),
        "slo_verdict": slo.get("verdict"),
        "valid": verdict.get("valid"),
        "reasons": "; ".join(verdict.get("reasons") or []),
        "not_judged": "; ".join(verdict.get("not_judged") or []),
        **server_columns(step.get("server_metrics") or {}),
    }


def server_columns(server: dict) -> dict:
    """The step's server figures as steps.csv's columns; each "not exposed" where /metrics was not."""
    exposed = bool(server.get("exposed"))
    out = {"server": server.get("server") if exposed else NOT_EXPOSED}
    out.update({column: _get(server, *path) if exposed else NOT_EXPOSED for column, path in _SERVER_PATHS})
    return out


def steps_csv(steps: list[tuple[str, dict]]) -> str:
    """steps.csv's text: a header and one row per (phase, step block)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=STEP_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for phase, step in steps:
        writer.writerow({k: ("" if v is None else v) for k, v in step_row(phase, step).items()})
    return out.getvalue()
