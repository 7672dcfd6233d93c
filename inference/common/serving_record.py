"""A served LLM's load step as a typed row (``ServingStep``): what ``run.py --endpoint`` writes into its
summary.json's ``rows``, what summary.md's table shows, and what ``run.py compare`` and the results
history read back (``utils/results/serving_compare.py``).

Made in one place from the step's block of result.json (``tools.serving.figures.step_figures``'s, with
the step's ``label`` and ``load``): ``ServingStep.of``. Its JSON is ``to_json``/``from_json`` below, one
key per field in the field order (``_KEYS``), so that a declaration-driven codec can take it over
unchanged. A row without its identity (``label``, ``phase``, ``verdict``) or with a key of the wrong type
is one ``RecordError`` line naming the file and key. The keys are described in docs/serving.md.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from common.record import Json, RecordError, Verdict, as_json
from common.stats import pareto_front

_NUMBER: Final = (int, float)
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
THROUGHPUTS: Final = ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "goodput_requests_per_s")


@dataclass(frozen=True)
class ServingStep:
    """One load step: ``phase`` ``step`` (a sweep's) or ``capacity`` (a capacity probe's), its load
    (``concurrency`` streams, or ``request_rate`` requests/s, ``inf`` all at once), the requests and how
    they ended, the distributions (count, mean, percentiles, ci95: JSON objects as result.json has them),
    each throughput as ``{value, ci95, plus_minus}`` (``not_judged`` where it is n/a), the SLO block
    (None without ``--slo``) and the verdict."""

    label: str
    phase: str
    concurrency: int | None
    request_rate: float | str | None
    requests: int
    completed: int
    failed: int
    errors: dict[str, int]
    duration_s: float | None
    token_source: tuple[str, ...]
    input_tokens: int | None
    output_tokens: int | None
    ttft_ms: Json
    ttfa_ms: Json
    tpot_ms: Json
    itl_ms: Json
    e2e_ms: Json
    throughput: Json
    tokens_per_s_per_user: float | None
    slo: Json | None
    stop_reason: str | None
    verdict: Verdict

    @classmethod
    def of(cls, block: Json, phase: str = "step") -> ServingStep:
        """The row of a step's block (result.json's ``steps`` or ``capacity_steps`` entry)."""
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
            **{name: dict(block.get(name) or {}) for name in DISTRIBUTIONS},
            throughput={name: dict(value) for name, value in (block.get("throughput") or {}).items()},
            tokens_per_s_per_user=block.get("tokens_per_s_per_user"),
            slo=block.get("slo"),
            stop_reason=block.get("stopped"),
            verdict=Verdict.from_json(block["verdict"]),
        )

    def rate(self, name: str) -> float | None:
        """A throughput's value (None: not measured, or n/a)."""
        return (self.throughput.get(name) or {}).get("value")

    def figures(self) -> dict[str, tuple[Any, Any]]:
        """The figures a comparison decides on: name -> (value, its 95 % interval or None)."""
        return step_figures(self.throughput, {key: getattr(self, key) for key in DISTRIBUTIONS})

    def to_json(self) -> Json:
        out = as_json(self, _KEYS)
        out["token_source"] = list(self.token_source)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "serving step") -> ServingStep:
        if not isinstance(data, dict):
            raise RecordError(f"{where}: not a JSON object")
        values = _values(data, _TYPES, ("label", "phase", "verdict"), where)
        values["verdict"] = Verdict.from_json(values["verdict"])
        values["token_source"] = tuple(values["token_source"] or ())
        for name in (*DISTRIBUTIONS, "throughput", "errors"):
            values[name] = values[name] or {}
        for name in ("requests", "completed", "failed"):
            values[name] = values[name] or 0
        return cls(**values)


def step_figures(throughput: Json, distributions: dict[str, Json]) -> dict[str, tuple[Any, Any]]:
    """A load step's figures that a comparison decides on, from its throughput block (name -> value and
    ci95) and its distributions (``ttft_ms``, ...: percentiles and ci95): ``THROUGHPUT_FIGURES`` and
    ``LATENCY_FIGURES``, each (value, its 95 % interval or None). A serving vendor's row
    (``common.record.ServingRow``) gives its figures here too (``utils/results/figures.py``)."""
    out = {}
    for figure, key in THROUGHPUT_FIGURES.items():
        block = throughput.get(key) or {}
        out[figure] = (block.get("value"), block.get("ci95"))
    for figure, (key, name) in LATENCY_FIGURES.items():
        block = distributions.get(key) or {}
        out[figure] = (block.get(name), (block.get("ci95") or {}).get(name))
    return out


# Each key's JSON types (None is always allowed; from_json fills what a missing key means).
_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "label": (str,),
    "phase": (str,),
    "concurrency": (int,),
    "request_rate": (*_NUMBER, str),
    "requests": (int,),
    "completed": (int,),
    "failed": (int,),
    "errors": (dict,),
    "duration_s": _NUMBER,
    "token_source": (list,),
    "input_tokens": (int,),
    "output_tokens": (int,),
    **{name: (dict,) for name in DISTRIBUTIONS},
    "throughput": (dict,),
    "tokens_per_s_per_user": _NUMBER,
    "slo": (dict,),
    "stop_reason": (str,),
    "verdict": (dict,),
}
_KEYS: Final = tuple(f.name for f in fields(ServingStep))
assert tuple(_TYPES) == _KEYS  # one key per field, in the field order


def _values(data: Json, types: dict[str, tuple[type, ...]], required: tuple[str, ...], where: str) -> dict[str, Any]:
    """Each key of ``types`` from ``data``, checked (``_typed``); RecordError when one of ``required`` is missing."""
    values = {name: _typed(data, name, kinds, where) for name, kinds in types.items()}
    for name in required:
        if values[name] is None:
            raise RecordError(f"{where}: no key {name!r}")
    return values


def _typed(data: Json, key: str, types: tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if value is None or (isinstance(value, types) and not (isinstance(value, bool) and bool not in types)):
        return value
    raise RecordError(f"{where}: key {key!r} is {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}")


def pareto(steps: list[ServingStep]) -> list[ServingStep]:
    """The steps no other step beats on both tokens/s per user and output tokens/s, in their order: the
    throughput-latency frontier (``common.stats.pareto_front``) with a step's latency its time per token."""
    usable = []
    for step in steps:
        user, total = step.tokens_per_s_per_user, step.rate("output_tokens_per_s")
        if user and total:
            usable.append((step, 1.0 / float(user), float(total)))
    front = set(pareto_front([(per_token, total) for _, per_token, total in usable]))
    return [step for i, (step, _, _) in enumerate(usable) if i in front]


SERVING: Final = "serving"  # summary.json's ``kind`` of a run.py --endpoint run


@dataclass(frozen=True)
class ServingSummary:
    """A serving run's summary.json: where it measured (``endpoint``, ``served_model``, ``api``), what it
    sent (``seed``, ``workload``), the SLO it judged by, a ``ServingStep`` per sweep step and capacity
    probe, and the capacity search's result."""

    run_id: str
    endpoint: str
    served_model: str
    api: str | None
    seed: int | None
    workload: Json
    slo: Json | None
    rows: tuple[ServingStep, ...]
    capacity: Json | None

    @property
    def steps(self) -> tuple[ServingStep, ...]:
        """The sweep's steps (the capacity probes ran at loads the bisection chose: not rows to compare)."""
        return tuple(row for row in self.rows if row.phase == "step")

    def to_json(self) -> Json:
        return {"kind": SERVING, **as_json(self, _SUMMARY_KEYS)}

    @classmethod
    def from_json(cls, data: Any, where: str = "summary.json") -> ServingSummary:
        if not isinstance(data, dict) or data.get("kind") != SERVING:
            raise RecordError(f'{where}: not a serving run\'s summary (no "kind": "serving")')
        rows = data.get("rows")
        if not isinstance(rows, list):
            raise RecordError(f"{where}: key 'rows' is not a list")
        values = _values(data, _SUMMARY_TYPES, ("run_id", "endpoint", "served_model"), where)
        values["workload"] = values["workload"] or {}
        values["rows"] = tuple(ServingStep.from_json(row, f"{where}: rows[{i}]") for i, row in enumerate(rows))
        return cls(**values)


_SUMMARY_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "run_id": (str,),
    "endpoint": (str,),
    "served_model": (str,),
    "api": (str,),
    "seed": (int,),
    "workload": (dict,),
    "slo": (dict,),
    "rows": (list,),
    "capacity": (dict,),
}
_SUMMARY_KEYS: Final = tuple(f.name for f in fields(ServingSummary))
assert tuple(_SUMMARY_TYPES) == _SUMMARY_KEYS  # one key per field, in the field order
