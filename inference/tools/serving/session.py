"""``run.py --endpoint``'s measuring loop: each load step (warm-up, then the measured requests with the
server's /metrics sampled beside them), the capacity search, and the run folder written at once
(``tools/serving/cli.py``'s docstring lists its files). The options come checked from
``tools/serving/options.py``; the console's line per step from ``tools/serving/tables.py``."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from common.errors import DataError, EngineError, StorageError, one_line
from common.files import atomic_dir, json_text
from common.serving_record import ServingStep, ServingSummary
from common.stop_signals import LoopGuard
from tools.serving import capacity as capacity_search
from tools.serving import exports
from tools.serving import metrics as server_metrics
from tools.serving.client import scrub
from tools.serving.figures import StepStop, step_figures
from tools.serving.load import Endpoint, Load, run_load
from tools.serving.options import Plan, api_key, check_endpoint, where
from tools.serving.tables import pareto, step_line

# How long a signalled run's in-flight requests get to unwind before the process leaves without them.
SHUTDOWN_S = 2.0


def run_async(main: Any) -> Any:
    """``asyncio.run(main)``, except for a stop signal. One that lands while the loop is made, run or
    closed is not raised there (``common/stop_signals.py``'s ``LoopGuard``): the main task is cancelled
    at the loop's next turn and given ``SHUTDOWN_S`` to unwind, the tasks still in flight are cancelled
    and given ``SHUTDOWN_S`` more, not waited for without end (asyncio.run waits for every task, however
    long it takes to unwind), and the stop's exception is raised here."""
    with LoopGuard(SHUTDOWN_S) as guard:
        loop = asyncio.new_event_loop()
        task = loop.create_task(main)
        try:
            guard.watch(loop, task)
            result = loop.run_until_complete(task)
        except (asyncio.CancelledError, RuntimeError):  # RuntimeError: stopped after the grace
            if guard.stop is None:
                raise
        finally:
            guard.disarm()
            _unwind(loop)
    if guard.stop is not None:
        raise guard.stop
    return result


def _unwind(loop: asyncio.AbstractEventLoop) -> None:
    """The tasks still pending cancelled and given ``SHUTDOWN_S``, then the loop closed."""
    import logging

    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        _, left = loop.run_until_complete(asyncio.wait(pending, timeout=SHUTDOWN_S))
        if left:  # the process is leaving: no "Task was destroyed but it is pending" line for each
            logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def run_step(endpoint: Endpoint, plan: Plan, load: Load, requests: int | None = None) -> tuple[dict, list]:
    """Warm-up (not counted), then one measured step at ``load`` (``requests``: at least this
    many instead of --num-requests); its figures and records."""
    a = plan.args
    if a.warmup:
        run_async(run_load(endpoint, plan.sessions(a.warmup, a.seed + 7919)[: a.warmup], load, seed=a.seed + 7919))
    least = requests or a.num_requests
    cap = least if a.precision is None else least * 50
    sessions = plan.sessions(cap, a.seed)
    stop = StepStop(least, a.precision, a.max_duration_s)
    sampler = None
    if plan.metrics_url is not None and plan.metrics_failure is None:
        sampler = server_metrics.Sampler(plan.metrics_url, a.metrics_interval_s, endpoint.headers)
    result = run_async(measured(run_load(endpoint, sessions, load, seed=a.seed, stop=stop), sampler))
    stopped = stop.reason or (f"all {cap} requests issued" if a.precision is not None else None)
    block = step_figures(result.records, plan.slo, a.precision, stopped, a.max_error_rate, a.timeslices)
    block["load"] = load.to_dict()
    block["label"] = load.label
    if sampler is not None:
        block["server_metrics"] = sampler.report([r.ttft_ns / 1e6 for r in result.records if r.ok and r.ttft_ns])
        if not block["server_metrics"]["exposed"]:
            plan.metrics_failure = block["server_metrics"]["note"]
            block["server_metrics"]["note"] = scrub(block["server_metrics"]["note"], endpoint.api_key)
    elif plan.metrics_url is None:
        block["server_metrics"] = {"exposed": False, "note": "not scraped (--metrics-url off)"}
    else:
        block["server_metrics"] = {
            "url": plan.metrics_url,
            "exposed": False,
            "note": f"{plan.metrics_failure} (at an earlier step; not asked again)",
        }
    return block, result.records


async def measured(load: Any, sampler: server_metrics.Sampler | None) -> Any:
    """``load`` (a run_load coroutine) with the server's /metrics scraped before and after it and sampled
    during it (``sampler``; None: not scraped). The sampler never raises and never outlives the load."""
    if sampler is None:
        return await load
    try:
        await sampler.start()
    except BaseException:  # interrupted before the load began: it never runs
        load.close()
        sampler.cancel()
        raise
    try:
        result = await load
    except BaseException:
        sampler.cancel()
        raise
    await sampler.stop()
    return result


def requests_to_decide(percentile: float) -> int:
    """The fewest requests whose Wilson interval can reach ``percentile`` % when every one meets the
    SLO (n / (n + z²) >= p): 35 for 90 %, 381 for 99 %, 1 for 100 % (judged without an interval)."""
    p = percentile / 100
    return 1 if p >= 1 else math.floor(1.959964**2 * p / (1 - p)) + 1


@dataclass
class Measurement:
    """One run's state while its steps are measured: the steps and capacity probes made so far, each
    step's request records (result.json's and requests.jsonl's), and the launched server's exit
    (``died``: the reason, once; no further step runs after it)."""

    args: argparse.Namespace
    plan: Plan
    endpoint: Endpoint
    served: list[str]
    server: Any = None  # the --launch server (common.launch.LaunchedServer), or None
    started: float = field(default_factory=time.time)
    steps: list[dict] = field(default_factory=list)
    capacity_steps: list[dict] = field(default_factory=list)
    records: dict[str, list[dict]] = field(default_factory=dict)
    exported: list[tuple[str, str, list]] = field(default_factory=list)  # (phase, label, records)
    died: list[str] = field(default_factory=list)
    found: capacity_search.Capacity | None = None

    @property
    def every_step(self) -> list[dict]:
        return self.steps + self.capacity_steps

    @property
    def rows(self) -> tuple[ServingStep, ...]:
        """The steps as typed rows, the sweep's then the capacity probes'."""
        return tuple(ServingStep.of(b, "step") for b in self.steps) + tuple(
            ServingStep.of(b, "capacity") for b in self.capacity_steps
        )

    def watch(self, block: dict) -> None:
        """Name a launched server's exit in the step's verdict (and stop the run after it)."""
        status = self.server.exited() if self.server is not None else None
        if status is None:
            return
        from common.launch import last_log_line

        said = last_log_line(self.server.log_path)
        reason = f"the launched server exited with status {status} during this step{said}"
        block["verdict"]["valid"] = False
        block["verdict"]["reasons"].append(reason)
        self.died.append(reason)

    def server_alive(self) -> bool:
        return self.server is None or self.server.exited() is None

    def run_loads(self) -> None:
        for load in self.plan.loads:
            block, recs = run_step(self.endpoint, self.plan, load)
            self.watch(block)
            self.steps.append(block)
            self.records[block["label"]] = [r.to_dict() for r in recs]
            self.exported.append(("step", block["label"], recs))
            print(scrub(step_line(ServingStep.of(block)), self.endpoint.api_key), flush=True)
            if self.died:
                print(f"--launch: {self.died[0]}: no further step is run", flush=True)
                return

    def run_capacity(self) -> None:
        """--capacity: bisect for the largest load meeting the SLO, each probe a step."""
        assert self.plan.capacity is not None and self.plan.slo is not None  # refused with the options otherwise
        kind, low, high = self.plan.capacity
        decidable = max(self.args.num_requests, requests_to_decide(self.plan.slo.percentile))
        self.found = capacity_search.search(kind, lambda value: self.probe(kind, value, decidable), low, high)

    def probe(self, kind: str, value: float, decidable: int) -> str:
        a = self.args
        if kind == "concurrency":
            load = Load(concurrency=int(value))
        else:
            load = Load(rate=value, arrival=a.arrival, burstiness=a.burstiness, max_concurrency=a.max_concurrency)
        if self.died:  # the launched server is gone: nothing more to probe
            return "misses"
        block, recs = run_step(self.endpoint, self.plan, load, decidable)
        if block["slo"]["verdict"] == "undecided" and self.server_alive():  # near the bound: once more, 4x as long
            block, recs = run_step(self.endpoint, self.plan, load, 4 * max(decidable, block["requests"]))
            block["slo"]["remeasured"] = True
        self.watch(block)
        self.capacity_steps.append(block)
        self.exported.append(("capacity", block["label"], recs))
        print(
            f"capacity probe {load.label}: SLO {block['slo']['verdict']} ({block['slo']['attainment']:.0%})",
            flush=True,
        )
        return block["slo"]["verdict"]

    def server_metrics(self) -> dict:
        """result.json's ``server_metrics``: where and how often, which server, whether any step saw it."""
        every = self.every_step
        return {
            "url": self.plan.metrics_url,
            "interval_s": self.args.metrics_interval_s,
            "server": next(
                (s["server_metrics"].get("server") for s in every if s["server_metrics"].get("exposed")), None
            ),
            "exposed": any(s["server_metrics"].get("exposed") for s in every),
        }

    def result(self) -> dict:
        """result.json (docs/serving.md)."""
        a, plan = self.args, self.plan
        return {
            "kind": "serving",
            "endpoint": a.endpoint,
            "served_model": a.served_model,
            "served_models": self.served,
            "api": "chat" if plan.chat else "completions",
            "token_source": self.token_sources(),
            "tokenizer": a.tokenizer,
            "client_location": a.where or where(a.endpoint),
            "api_key_sent": self.endpoint.api_key is not None,  # the key itself is never written
            "max_error_rate": a.max_error_rate,
            "launched_server_exited": self.died[0] if self.died else None,
            "server_metrics": self.server_metrics(),
            "timeslices": a.timeslices,
            "exports": {"requests": "serving/requests.jsonl", "steps": "serving/steps.csv"},
            "seed": a.seed,
            "workload": self.workload(),
            "slo": plan.slo.to_dict() if plan.slo else None,
            "steps": self.steps,
            "capacity": self.found.to_dict() if self.found is not None else None,
            "capacity_steps": self.capacity_steps,
            "pareto": pareto(self.steps),
            "started_at": self.started,
            "duration_s": time.time() - self.started,
            "records": self.records,
        }

    def workload(self) -> dict:
        """What the run sent: the prompts, lengths and request counts."""
        a = self.args
        return {
            "prompt_file": a.prompt_file,
            "trace": a.trace,
            "input_len": a.input_len,
            "output_len": a.output_len,
            "shared_prefix": a.shared_prefix,
            "multi_turn": a.multi_turn,
            "num_requests": a.num_requests,
            "warmup": a.warmup,
            "extra_body": self.plan.extra,
        }

    def summary(self, run_id: str) -> ServingSummary:
        """summary.json: the run's identity and a typed row per step (``common/serving_record.py``)."""
        a, plan = self.args, self.plan
        return ServingSummary(
            run_id=run_id,
            endpoint=a.endpoint,
            served_model=a.served_model,
            api="chat" if plan.chat else "completions",
            seed=a.seed,
            workload=self.workload(),
            slo=plan.slo.to_dict() if plan.slo else None,
            rows=self.rows,
            capacity=self.found.to_dict() if self.found is not None else None,
        )

    def token_sources(self) -> list[str]:
        return sorted({src for s in self.every_step for src in s["token_source"]})

    def exit_status(self) -> int:
        if self.died:
            return EngineError.exit_code
        failing = [s["label"] for s in self.every_step if not s["verdict"]["valid"] or s["verdict"].get("not_judged")]
        if self.args.strict and failing:
            print(f"--strict: {len(failing)} step(s) INVALID or not judged: {', '.join(failing)}", file=sys.stderr)
            return DataError.exit_code
        return 0


def measure(
    args: argparse.Namespace,
    plan: Plan,
    tokenizer: Any,
    results_root: Path,
    on_written: Callable[[Path], None] | None = None,
    server: Any = None,
    folder: str | None = None,
) -> int:
    """Every load step against the endpoint, then the run folder; ``on_written(folder)`` after it is
    complete (run.py adds it to the results history there). ``server``: the --launch server
    (``common.launch.LaunchedServer``); when it exits during a step, that step's verdict names
    it, no further step runs, the run is written and the exit status is 4."""
    key = api_key(args)
    served = check_endpoint(args.endpoint, args.served_model, key=key)
    endpoint = Endpoint(
        args.endpoint,
        args.served_model,
        plan.chat,
        plan.extra,
        args.stall_timeout_s,
        args.request_timeout_s,
        tokenizer,
        args.count_tokens == "usage",
        api_key=key,
    )
    run = Measurement(args, plan, endpoint, served, server)
    run.run_loads()
    if plan.capacity is not None and not run.died:
        run.run_capacity()
    final = write_run(run, Path(args.output_dir) if args.output_dir else results_root, folder)
    print(f"results: {final}")
    if on_written is not None:
        on_written(final)
    return run.exit_status()


def write_run(run: Measurement, results_root: Path, folder: str | None = None) -> Path:
    """The run folder (``folder``, default ``run<id>``), written whole under a temporary name and then
    renamed (nothing half-written)."""
    result = run.result()
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    files = {
        "serving/result.json": json_text(result),
        "summary.json": json_text(run.summary(run_id).to_json()),
        "serving/requests.jsonl": "".join(
            line + "\n" for phase, label, recs in run.exported for line in exports.request_lines(phase, label, recs)
        ),
        "serving/steps.csv": exports.steps_csv(
            [("step", s) for s in run.steps] + [("capacity", s) for s in run.capacity_steps]
        ),
    }
    try:
        results_root.mkdir(parents=True, exist_ok=True)
        name = folder or f"run{run_id}"
        with atomic_dir(results_root, name) as tmp:
            (tmp / "serving").mkdir()
            for path, text in files.items():
                (tmp / path).write_text(text, encoding="utf-8")
            final = results_root / name
            os.replace(tmp, final)
    except OSError as exc:
        raise StorageError(f"the results could not be written to {results_root}: {one_line(exc)}") from None
    return final
