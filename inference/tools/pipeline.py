"""FlagPerf's seven in-container steps (spec §2.2.3) with its four switches.

init -> dataset_and_model -> framework_validation -> onnx_export
     -> vendor_compile -> engine_inference -> summary

compiler: null           stop after validation, go to summary
no_validation: true      model is None; skip validation and export (needs exist_onnx_path)
exist_onnx_path: PATH    skip export
exist_compiler_path: P   skip compile; the engine loads P
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, TypeVar

from loguru import logger

import tools.measure  # noqa: F401  (installs the measuring functions a case calls: contract/measuring.py)
from common.errors import ConfigError, DataError, EngineError, StorageError
from common.files import storage_error, sweep_stale_temps, writable_dir
from common.layout import is_base_case
from common.pipeline_lines import STEPS, step_line  # the step lines run.py reads
from common.record import CaseResult
from contract.cases import Case, load_case
from contract.config import CaseConfig, has_dynamic_axis, load_case_config, parse_overrides
from contract.config.values import oversubscribed
from contract.phase import PhaseResult
from contract.settings import VALIDATION_PASS
from tools.artefacts.engine import EngineBuilder
from tools.artefacts.onnx_export import export_to_cache
from tools.compat import flagperf
from tools.compat.adapters import OutputAdapter
from tools.compat.bytemlperf import hooks as bytemlperf
from tools.env import environment
from tools.measure.loop import as_input_list
from tools.measure.precision import measured_once_more_on_drift
from tools.plugins import check_vendor, preflight_engine
from tools.results import compile_report, result

if TYPE_CHECKING:
    from contract.engine_base import EngineBase

T = TypeVar("T")


@dataclass
class PipelineArgs:
    perf_dir: str
    data_dir: str
    log_dir: str
    vendor: str
    case: str
    framework: str
    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE


@dataclass
class StepRecord:
    status: str = "pending"
    duration_s: float | None = None
    note: str | None = None


class _SetBy(Generic[T]):
    """A ``PipelineState`` field as the steps after the one that sets it read it: never None there
    (``step`` says which step sets it)."""

    def __init__(self, name: str, step: str) -> None:
        self.name = name
        self.step = step

    def __get__(self, state: object, owner: type | None = None) -> T:
        value = getattr(state, self.name)
        assert value is not None, self.step
        return value


@dataclass
class PipelineState:
    """What the steps hand to each other."""

    config: CaseConfig | None = None
    case: Case | None = None  # the case package and its hooks (contract/cases.py)
    engine_module: ModuleType | None = None
    dataloader: Any = None
    model: Any = None
    engine: EngineBase | None = None  # the vendor's engine, seen through EngineBase (tools/compat/adapters.py)
    onnx_path: str | None = None
    validation: PhaseResult | None = None
    inference: PhaseResult | None = None
    performance: Any = None  # tools.measure.stage.PerformanceReport
    cache: dict[str, dict] = field(default_factory=dict)
    engine_info: dict[str, Any] = field(default_factory=dict)

    # What the steps after init rely on: set by init (config, case) and vendor_compile (engine).
    the_config: ClassVar[_SetBy[CaseConfig]] = _SetBy("config", "the init step sets the config")
    the_case: ClassVar[_SetBy[Case]] = _SetBy("case", "the init step loads the case")
    the_engine: ClassVar[_SetBy[EngineBase]] = _SetBy("engine", "the vendor_compile step builds the engine")
    the_inference: ClassVar[_SetBy[PhaseResult]] = _SetBy("inference", "engine_inference measures it")


class Pipeline:
    def __init__(self, args: PipelineArgs) -> None:
        self.args = args
        self.perf_dir = Path(args.perf_dir).resolve()
        self.steps = {name: StepRecord() for name in STEPS}
        self.current_step: str | None = None
        self.state = PipelineState()
        self.started = time.perf_counter()
        self.started_at = datetime.now(timezone.utc)
        self.builder: EngineBuilder | None = None  # step 5's; also builds the engines of other batch sizes
        self.read_only_cache: Path | None = None  # onnxs/ on a read-only mount: hits are used, a miss fails

    # ---- driver -------------------------------------------------------------
    def run(self) -> CaseResult:
        """The seven steps; the engine is closed at the end whatever ended them (a serving engine's
        server stops: ``contract/engine_base.py::EngineBase.close``)."""
        try:
            return self._run_steps()
        finally:
            if self.state.engine is not None:
                self.state.engine.close()

    def _run_steps(self) -> CaseResult:
        self._step("init", self.init)
        if self.state.the_case.is_base_tier:
            return self._run_baseline()
        self._step("dataset_and_model", self.dataset_and_model)
        config = self.state.the_config
        self._step(
            "framework_validation",
            self.framework_validation,
            skip_if=config.no_validation or config.compile_only or config.get("test_accuracy") is False,
            why="no_validation: true"
            if config.no_validation
            else "compile_only: true"
            if config.compile_only
            else "test_accuracy: false",
        )
        no_compiler = config.compiler is None
        self._step(
            "onnx_export",
            self.onnx_export,
            skip_if=no_compiler or config.exist_onnx_path is not None,
            why="compiler: null" if no_compiler else "exist_onnx_path is set",
        )
        self._step(
            "vendor_compile",
            self.vendor_compile,
            skip_if=no_compiler,
            why="compiler: null",
        )
        self._step(
            "engine_inference",
            self.engine_inference,
            skip_if=no_compiler or config.compile_only,
            why="compiler: null" if no_compiler else "compile_only: true",
        )
        return self._step("summary", self.summary)

    def _run_baseline(self) -> CaseResult:
        """A base-tier case (benchmarks/base_common.py) measures the chip: no data set, model or
        engine; its ``baseline_stage(config)`` runs as the engine_inference step."""
        why = "a base-tier case: no data set, model or engine"
        for name in ("dataset_and_model", "framework_validation", "onnx_export", "vendor_compile"):
            self._step(name, None, skip_if=True, why=why)
        self._step("engine_inference", self.baseline)
        return self._step("summary", self.summary)

    def baseline(self) -> None:
        self.state.performance = self.state.the_case.baseline_stage(self.state.the_config)

    def _step(self, name: str, action: Callable[[], Any] | None, skip_if: bool = False, why: str | None = None) -> Any:
        record = self.steps[name]
        if skip_if or action is None:
            record.status, record.note = "skipped", why
            logger.info(step_line(name, "skipped", f"({why})"))
            return None
        self.current_step = name
        logger.info(step_line(name, "start"))
        start = time.perf_counter()
        try:
            output = action()
        except (StorageError, OSError) as exc:
            cache = self.read_only_cache
            if cache is not None and str(cache) in str(exc):
                problem = exc if isinstance(exc, StorageError) else storage_error(exc, exc.filename or cache) or exc
                raise StorageError(
                    f"cache directory {cache} is read-only and this run must write to it (a cache miss): {problem}"
                ) from None
            raise
        record.status, record.duration_s = "done", time.perf_counter() - start
        logger.info(step_line(name, "done", f"in {record.duration_s:.2f} s"))
        return output

    # ---- steps --------------------------------------------------------------
    def init(self) -> None:
        args = self.args
        if not (self.perf_dir / "configs").is_dir():
            raise ConfigError(f"--perf_dir {args.perf_dir}: not an InferPerf inference/ directory (no configs/)")
        if not is_base_case(args.case):  # a base-tier case reads no data
            _check_data_dir(args.data_dir)
        check_vendor(args.vendor)
        config = load_case_config(
            str(self.perf_dir),
            args.case,
            args.framework,
            args.vendor,
            str(Path(args.data_dir).resolve()),
            args.log_dir,
            parse_overrides(args.overrides),
        )
        config.cache_dir = str(self._cache_dir(self.perf_dir / "onnxs"))
        _sweep(Path(config.cache_dir), Path(config.cache_dir) / "weights", Path(args.log_dir))
        self.state.config = config
        self.state.case = load_case(self.perf_dir, args.case, args.framework)
        self.state.case.configure(config)  # benchmarks/onnx_model: model_path -> exist_onnx_path and the input plans

        if config.exist_compiler_path is not None:
            config.exist_compiler_path = self._existing(config.exist_compiler_path, "exist_compiler_path", "engine")
        elif config.exist_onnx_path is not None:
            config.exist_onnx_path = self._existing(config.exist_onnx_path, "exist_onnx_path", "ONNX")
        if config.compiler is not None:
            self.state.engine_module = preflight_engine(args.vendor, config.compiler, config)
        threads = config.get("intra_op_num_threads", 0)
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        logger.info(
            f"case={args.case} framework={args.framework} vendor={args.vendor} compiler={config.compiler} "
            f"batch_size={config.batch_size} fp16={config.fp16} repeat={config.repeat} warmup={config.warmup}"
        )

    def _cache_dir(self, path: Path) -> Path:
        """onnxs/, writable; or a readable folder on a read-only mount (a shared warm cache): its
        valid entries are used, and only a miss, which must write, fails (naming the folder)."""
        try:
            return writable_dir(path, "cache directory")
        except StorageError as refused:
            try:
                with os.scandir(path):  # a folder this process can list: its entries may be used
                    pass
            except OSError:
                raise refused from None
        self.read_only_cache = path
        logger.info(f"cache directory {path} is read-only: its valid entries are used, and a cache miss fails")
        return path

    def _existing(self, value: str, key: str, what: str) -> str:
        path = Path(value)
        if not path.is_absolute():
            path = self.perf_dir / path
        if not path.is_file():
            origin = self.state.the_config.origin.get(key, "config")
            raise DataError(f"{origin}: key '{key}': {what} file not found: {path}")
        return str(path)

    def dataset_and_model(self) -> None:
        config, case = self.state.the_config, self.state.the_case.module
        dataloader = case.build_dataloader(config)
        size = _dataset_size(dataloader)
        if size == 0:
            raise DataError(f"data_dir {config.data_dir}: the data set is empty")
        if size is not None and config.batch_size > size:
            raise DataError(
                f"{config.origin.get('batch_size', 'config')}: key 'batch_size' is {config.batch_size}, "
                f"larger than the data set ({size} samples in {config.data_dir})"
            )
        if self._static_batch(config):
            # FlagPerf's static-batch engines (has_dynamic_axis: false) take only full batches.
            dataloader = flagperf.DropPartialBatches(dataloader, config.batch_size)
            logger.info(
                f"static batch of {config.batch_size}: the partial last batch is dropped (FlagPerf's drop_last)"
            )
        self.state.dataloader = bytemlperf.apply_data_percent(dataloader, config)  # ByteMLPerf's data_percent
        if config.no_validation:
            logger.info("no_validation: true, so no framework model is created")
        else:
            self.state.model = case.create_model(config)

    @staticmethod
    def _static_batch(config: CaseConfig) -> bool:
        """has_dynamic_axis: false, or a given ONNX file whose batch axis is fixed at batch_size."""
        if not has_dynamic_axis(config):
            return True
        return (
            config.exist_onnx_path is not None
            and flagperf.onnx_static_batch(config.exist_onnx_path) == config.batch_size
        )

    def framework_validation(self) -> None:
        """Step 3, the framework model's accuracy pass. Its throughputs are information, not judged
        (docs/measurement.md, "What is judged"), so it runs FlagPerf's rule: ``repeat`` passes over the
        data after the warm-up, no settle phase, no minimums, no precision; its intervals are reported
        as measured."""
        state = self.state
        config = replace(state.the_config, **VALIDATION_PASS)
        case = state.the_case.module
        state.validation = _phase_result(
            case.model_forward(state.model, state.dataloader, case.evaluator, config), "model_forward"
        )
        _log_phase(state.validation)

    def onnx_export(self) -> None:
        config, state = self.state.the_config, self.state
        own = state.the_case.export_cached(state.model, config)  # an LLM runtime's own format (benchmarks/llama)
        if own is None:
            own = export_to_cache(self.perf_dir, state.model, config, state.the_case.module)
        state.onnx_path, state.cache["onnx"] = own

    def vendor_compile(self) -> None:
        config, state = self.state.the_config, self.state
        if state.onnx_path is None and config.exist_onnx_path is not None:
            state.onnx_path = config.exist_onnx_path
            state.cache["onnx"] = {"status": "user", "path": config.exist_onnx_path}
        assert state.engine_module is not None, "the init step loads the engine module when there is a compiler"
        self.builder = EngineBuilder(state.engine_module, state.onnx_path, state.model)
        state.engine, status, duration = self.builder.build(config)
        state.cache["engine"] = {"status": status, "path": config.engine_path}
        if self.builder.evicted:
            state.cache["engine"]["evicted"] = self.builder.evicted
        state.engine_info = compile_report.describe_engine(
            state.engine, state.onnx_path, duration
        )  # names the vendor's class
        if isinstance(state.engine, OutputAdapter):
            state.engine_info["output_adapter"] = "flagperf"
        bytemlperf.resolve_best(config, state.engine_info)  # batch_sizes: best
        logger.info(f"compiled with {config.vendor}/{config.compiler} in {duration:.2f} s (engine cache: {status})")

    def engine_inference(self) -> None:
        state = self.state
        case, engine = state.the_case.module, state.the_engine

        def measure() -> PhaseResult:
            return _phase_result(
                case.engine_forward(engine, state.dataloader, case.evaluator, state.the_config), "engine_forward"
            )

        def discard(first: PhaseResult) -> None:
            logger.info(f"inference drifted ({'; '.join(first.verdict.reasons)}): measuring it once more")

        state.inference = measured_once_more_on_drift(
            measure, lambda phase: phase.precision, lambda phase: phase.verdict.reasons, discard
        )
        _log_phase(state.inference)
        self._performance()
        if engine.implements("get_performance_data"):
            first_x, _ = next(iter(state.dataloader))
            try:
                state.engine_info["performance_data"] = engine.get_performance_data(as_input_list(first_x))
            except Exception as exc:  # optional API: a broken profiler must not lose the run
                logger.warning(f"engine get_performance_data failed, omitted: {exc}")

    def _performance(self) -> None:
        """Numeric check, audits and the batch-size x scenario x clients rows (tools/measure/stage.py)."""
        from tools.measure.stage import PerformanceStage
        from tools.torch_sync import sync_for_config

        config, state, engine = self.state.the_config, self.state, self.state.the_engine
        own = state.the_case.performance_stage(
            engine, state.model, config
        )  # an LLM case's table and scenarios (tools/measure/llm_stage.py)
        if own is not None:
            state.performance = own
            state.the_inference.verdict.extend(own.engine_reasons)
            return
        stage = PerformanceStage(
            config, state.dataloader, sync_for_config(config), result.engine_precision(engine, config)
        )
        state.performance = stage.report
        if not stage.usable:
            stage.report.notes.append("performance rows skipped: the data loader does not yield tensors")
            logger.warning(stage.report.notes[-1])
            return
        base_pool = stage.pool(config.batch_size)
        if config.numeric_check:
            stage.numeric_check(engine, state.the_case.framework_step(state.model, config), base_pool)
        if config.audits:
            stage.anti_caching(engine, base_pool)
        state.the_inference.verdict.extend(stage.report.engine_reasons)
        if config.get("test_perf") is False:  # ByteMLPerf's workload key
            stage.report.notes.append("performance rows skipped (test_perf: false)")
            return
        assert self.builder is not None and config.batch_sizes is not None, (
            "vendor_compile built the engine; the config set batch_sizes"
        )
        for batch_size in config.batch_sizes:
            sized = engine
            if engine.rebuild_per_batch_size and batch_size != config.batch_size:
                sized, status, duration = self.builder.build(replace(config, batch_size=batch_size))
                logger.info(f"engine for batch size {batch_size}: cache {status}, {duration:.2f} s")
            sized.prepare_batch_size(batch_size)  # e.g. a ByteMLPerf backend's load(batch_size), untimed
            stage.rows_for(sized, batch_size, base_pool if batch_size == config.batch_size else None)
        bytemlperf.own_benchmark(
            engine, config, state.dataloader, state.engine_info
        )  # a backend's own benchmark(), beside the rows

    def summary(self) -> CaseResult:
        config, state = self.state.the_config, self.state
        threads = {"torch": _torch_threads()}
        for key in ("intra_op_num_threads", "inter_op_num_threads"):
            if key in config.extra:
                threads[key] = config.extra[key]
        self.steps["summary"].status = "done"  # recorded as done in the result it writes
        record = result.build_result(
            result.ResultInputs(
                config=config,
                validation=state.validation,
                inference=state.inference,
                performance=state.performance,
                engine=state.engine,
                engine_info=state.engine_info,
                e2e_time_s=time.perf_counter() - self.started,
                steps={name: vars(step) for name, step in self.steps.items()},
                cache=state.cache,
                env=environment(threads, oversubscribed(config.as_dict())),
                started_at=self.started_at,
            )
        )
        raw = result.raw_latency_series(state.validation, state.inference, state.performance)
        result.write_result(Path(config.log_dir), record, raw)
        return record


def _sweep(*directories: Path) -> None:
    """Remove what writers killed in earlier runs left (their locks are free)."""
    for directory in directories:
        removed = sweep_stale_temps(directory)
        if removed:
            names = ", ".join(p.name for p in removed[:3]) + (
                f" and {len(removed) - 3} more" if len(removed) > 3 else ""
            )
            logger.info(f"removed {len(removed)} temporary file(s) left by killed runs in {directory}: {names}")


def _check_data_dir(data_dir: str) -> None:
    path = Path(data_dir)
    if not path.exists():
        raise DataError(f"data_dir {data_dir}: does not exist")
    if not path.is_dir():
        raise DataError(f"data_dir {data_dir}: is not a directory")
    try:
        with os.scandir(path) as entries:
            empty = next(entries, None) is None
    except OSError as exc:  # exists, but this process may not list it (mode bits, no CAP_DAC_OVERRIDE)
        raise DataError(f"data_dir {data_dir}: cannot read: {exc.strerror or type(exc).__name__}") from None
    if empty:
        raise DataError(f"data_dir {data_dir}: is empty")


def _dataset_size(dataloader: Any) -> int | None:
    try:
        return len(dataloader.dataset)
    except (AttributeError, TypeError):
        return None


def _phase_result(value: Any, function: str) -> PhaseResult:
    if isinstance(value, PhaseResult):
        return value
    if flagperf.is_flagperf_triple(value):
        return flagperf.case_timed_phase(value, "validation" if function == "model_forward" else "inference")
    raise EngineError(
        f"case function {function} must return contract.measuring.measuring().timed_forward(...)'s result or "
        "FlagPerf's "
        "(whole_qps, core_qps, acc), "
        f"got {type(value).__name__}"
    )


def _log_phase(phase: PhaseResult) -> None:
    acc = f"{phase.accuracy:.4f}" if phase.accuracy is not None else "n/a"
    lat = phase.latency
    if lat is None:  # timed by the case (FlagPerf style)
        logger.info(
            f"{phase.phase}: whole {phase.whole_qps:.2f} qps, core {phase.core_qps:.2f} qps (as the case timed them), "
            f"acc {acc}"
        )
    else:
        p99 = f"{lat.p99:.2f} ms" if lat.p99 is not None else "n/a"
        logger.info(
            f"{phase.phase}: {phase.samples} samples in {phase.batches} batches, whole {phase.whole_qps:.2f} qps, "
            f"core {phase.core_qps:.2f} qps, p50 {lat.p50 or float('nan'):.2f} ms, p99 {p99}, acc {acc}"
        )
    state = "valid" if phase.verdict.valid else "INVALID: " + "; ".join(phase.verdict.reasons)
    logger.info(f"{phase.phase} verdict: {state}")


def _torch_threads() -> int | None:
    try:
        import torch

        return torch.get_num_threads()
    except ImportError:
        return None
