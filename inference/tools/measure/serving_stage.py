"""The serving stage: an LLM case's performance stage for a serving engine (``contract/llm_base.py``,
``ServingEngineBase``: vLLM's server, which the engine step started), measured over HTTP with the
serving client of ``run.py --endpoint`` (``tools/serving/``, docs/serving.md).

  check   ``greedy_prompts`` x ``greedy_tokens`` greedy tokens from the server (token ids in and out,
          temperature 0, no end-of-sequence token selected), scored against the framework model by
          teacher forcing (``tools/checks/generation.py::greedy_check``). The share that agree is the
          case's accuracy figure (``llm.greedy.share``), judged by ``greedy_agreement_target``: below
          it, every row is INVALID. A server gives no logits, so the prefill-logits check is not run.
  steps   per ``serving_concurrency`` N: ``serving_warmup`` requests first (not counted), then N
          closed-loop streams (``tools/serving/load.py``), each request a seeded prompt of
          ``serving_input_length`` token ids asking for ``serving_output_length`` tokens
          (``ignore_eos``), streamed (SSE); at least ``serving_requests`` requests, then until requests/s
          and output tokens/s are within ±``precision`` or ``max_duration_s`` passes
          (``tools/serving/figures.py::StepStop``). Tokens are the server's ``usage`` counts. Figures
          and verdict: ``tools/serving/figures.py::step_figures`` (drift of the thirds, precision,
          failed requests counted by kind; the output audits: error rate above 1 %, a reply cut
          short, the mean output length against the length asked, an impossible usage refused), one
          ``common.record.ServingStep`` per step (run.py --endpoint's row).
  server  the server's own Prometheus ``/metrics`` (``tools/serving/metrics.py``), scraped before and after
          each step and sampled every second during it: KV-cache use, prefix-cache hits, requests running
          and waiting, its TTFT and queue-time histograms, preemptions (vLLM's names; llama-cpp-python's
          server has no /metrics: "not exposed"), on the log line of each step and in the row
          (``server_metrics``), which report.html draws as an endpoint run's.
  exports each request as a JSON line and each step as a CSV row (``tools/serving/exports.py``) in the
          case's log folder: ``serving_requests.jsonl``, ``serving_steps.csv``.

A server that exits during the stage ends the case with one line (``EngineError``, exit 4) naming its
exit status and the last line of its log; the engine's ``close`` then stops what is left of it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from loguru import logger

from common.errors import ConfigError, EngineError
from common.record import ServingStep, Verdict
from contract.config import CaseConfig, origin_of, setting
from contract.llm_base import ModelShape
from contract.llm_workload import LLMWorkload, PromptSource
from tools.measure.llm_stage import LLMReport, check_skipped, stage_model


@dataclass
class ServingWorkload:
    """The serving stage's keys of a case config (parameters.yaml), checked once."""

    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4])
    requests: int = 32
    input_length: int = 128
    output_length: int = 64
    warmup: int = 2

    KEYS = {
        "concurrency": ("serving_concurrency", 1, 1024),
        "requests": ("serving_requests", 1, 1 << 20),
        "input_length": ("serving_input_length", 1, 1 << 20),
        "output_length": ("serving_output_length", 2, 1 << 20),
        "warmup": ("serving_warmup", 0, 1 << 16),
    }

    @classmethod
    def from_config(cls, config: CaseConfig) -> "ServingWorkload":
        values: dict[str, Any] = {}
        defaults = cls()
        for name, (key, low, high) in cls.KEYS.items():
            value = config.get(key, getattr(defaults, name))
            items = value if name == "concurrency" and isinstance(value, list) else [value]
            if (
                not 1 <= len(items) <= 16
                or any(isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high for v in items)
                or (name != "concurrency" and isinstance(value, list))
            ):
                what = "an integer or a list of 1 to 16 integers" if name == "concurrency" else "an integer"
                raise ConfigError(
                    f"{origin_of(config, key)}: key '{key}' must be {what} in {low}..{high}, got {value!r}"
                )
            values[name] = [int(v) for v in items] if name == "concurrency" else int(value)
        return cls(**values)


def _check_alive(engine: Any) -> None:
    why = engine.failure()
    if why is not None:
        raise EngineError(why)


def _row(block: dict, workload: ServingWorkload, engine_reasons: list[str]) -> ServingStep:
    """The step's row, as run.py --endpoint's, with the lengths asked and the engine's reasons in its verdict."""
    row = ServingStep.of(block, input_length=workload.input_length, output_length=workload.output_length)
    measured = row.verdict
    return replace(row, verdict=Verdict((*measured.reasons, *engine_reasons), measured.not_judged))


def measure_step(
    engine: Any, prompts: PromptSource, workload: ServingWorkload, concurrency: int, config: CaseConfig
) -> dict:
    """One load step: warm-up, then ``concurrency`` streams until the stop rule; its figures (a dict)."""
    from tools.serving.client import RequestSpec
    from tools.serving.figures import StepStop, step_figures
    from tools.serving.load import Endpoint, Load, run_load
    from tools.serving.metrics import Sampler, metrics_url
    from tools.serving.session import measured, run_async

    endpoint = Endpoint(engine.url, engine.served_model, extra=engine.request_extra(workload.output_length))
    load = Load(concurrency=concurrency)
    precision = float(setting(config, "precision"))

    def specs(count: int, stream: int) -> Iterator[list[RequestSpec]]:
        """Seeded prompts, none shared with another step (a server's prefix cache would serve them)."""
        for i in range(count):
            ids = prompts.batch(1, workload.input_length, (concurrency << 24) + i, stream)[0].tolist()
            yield [RequestSpec(i, engine.prompt(ids), workload.output_length)]

    if workload.warmup:
        run_async(run_load(endpoint, specs(workload.warmup, PromptSource.WARMUP), load))
    _check_alive(engine)
    stop = StepStop(workload.requests, precision, float(setting(config, "max_duration_s")))
    sampler = Sampler(metrics_url(engine.url))
    result = run_async(
        measured(run_load(endpoint, specs(workload.requests * 50, PromptSource.MEASURED), load, stop=stop), sampler)
    )
    _check_alive(engine)
    block = step_figures(result.records, None, precision, stop.reason)
    block["load"], block["label"] = load.to_dict(), load.label  # as run.py --endpoint's steps: the row's
    block["server_metrics"] = sampler.report([r.ttft_ns / 1e6 for r in result.records if r.ok and r.ttft_ns])
    block["_records"] = result.records  # for the exports; popped before anything is written
    return block


def server_line(block: dict) -> str:
    """The log line of the server's own figures for a step (its /metrics), or why there are none."""
    from common.serving_record import summary_row

    server = block.get("server_metrics") or {}
    if not server.get("exposed"):
        return f"server metrics: {server.get('note', 'not exposed')}"
    row = summary_row(block["label"], server, block.get("ttft_ms") or {})
    return "server metrics (" + ", ".join(f"{k} {v}" for k, v in row.items() if k != "step") + ")"


def write_exports(log_dir: str, blocks: list[dict]) -> None:
    """Each request as a JSON line, each step as a CSV row, into the case's log folder."""
    from common.files import atomic_path
    from tools.serving.exports import request_lines, steps_csv

    with atomic_path(Path(log_dir) / "serving_requests.jsonl") as tmp:
        tmp.write_text(
            "".join(line + "\n" for b in blocks for line in request_lines("step", b["label"], b.get("_records") or [])),
            encoding="utf-8",
        )
    with atomic_path(Path(log_dir) / "serving_steps.csv") as tmp:
        tmp.write_text(
            steps_csv([("step", {k: v for k, v in b.items() if k != "_records"}) for b in blocks]), encoding="utf-8"
        )


def run_serving_stage(
    engine: Any,
    reference: Any,
    config: CaseConfig,
    shape: ModelShape,
    prompts: PromptSource,
    precision: str,
    eos_ids: tuple[int, ...] = (),
) -> LLMReport:
    """The greedy check, then one row per concurrency (module docstring)."""
    llm = LLMWorkload.from_config(config)
    workload = ServingWorkload.from_config(config)
    report = LLMReport(
        model=stage_model(engine, shape, precision),
        workload={**asdict(llm), "serving": asdict(workload)},
        served_by=engine.served_by(),
    )
    _check_alive(engine)
    skipped = check_skipped(config, reference)
    if skipped is not None:
        report.notes.append(skipped)
    else:
        checked = prompts.batch(llm.greedy_prompts, llm.input_lengths[0], 0, PromptSource.CHECK)
        _greedy(report, engine, reference, checked, llm, eos_ids)
    if config.get("test_perf") is False:
        report.notes.append("serving rows skipped (test_perf: false)")
        return report
    blocks = []
    for concurrency in workload.concurrency:
        block = measure_step(engine, prompts, workload, concurrency, config)
        blocks.append(block)
        row = _row(block, workload, report.engine_reasons)
        report.serving.append(row)
        _log_step(row, block)
    write_exports(config.log_dir, blocks)
    for block in blocks:
        block.pop("_records", None)
    return report


def _greedy(
    report: LLMReport, engine: Any, reference: Any, checked: Any, llm: LLMWorkload, eos_ids: tuple[int, ...]
) -> None:
    """The greedy check on ``checked`` prompts into ``report`` (a failure is a reason on every row)."""
    from tools.checks.generation import greedy_check

    report.greedy, _ = greedy_check(engine, reference, checked, llm.greedy_tokens, llm.greedy_agreement_target, eos_ids)
    report.notes.append("prefill logits check not run: a server returns tokens, not logits")
    if not report.greedy["passed"]:
        report.engine_reasons.append(report.greedy["reason"])
    share = report.greedy["share"]
    logger.info(
        f"greedy check: the server's tokens agree with the framework model at "
        f"{'n/a' if share is None else f'{share:.2%}'} of {report.greedy['positions']} positions "
        f"(target {llm.greedy_agreement_target:.0%})" + ("" if report.greedy["passed"] else " - FAILED")
    )


def _log_step(row: ServingStep, block: dict) -> None:
    """A step's two log lines: the client's figures and verdict, then the server's own."""
    rate = row.rate("output_tokens_per_s")
    state = "valid" if row.verdict.valid else "INVALID: " + "; ".join(row.verdict.reasons)
    failed = ", ".join(f"{kind} {n}" for kind, n in sorted(row.errors.items()))
    state = (f"{row.failed} failed ({failed}), " if failed else "") + state
    logger.info(
        f"{row.label}: {row.completed}/{row.requests} completed, "
        f"{'n/a' if rate is None else f'{rate:.1f}'} output tokens/s, TTFT p50 {row.ttft_ms.get('p50')} ms, "
        f"TPOT p50 {row.tpot_ms.get('p50')} ms, {state}"
    )
    logger.info(f"{row.label}: {server_line(block)}")
