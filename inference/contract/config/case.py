"""``CaseConfig``: the merged case configuration as one typed, self-validating object."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Collection, NoReturn

from common.errors import ConfigError, shown
from common.scenario import SCENARIOS, Scenario, scenario
from common.values import cpu_count
from contract.config.values import _CHECKS, MAX_CLIENTS_PER_CORE, check_extra
from contract.settings import MEASUREMENT_DEFAULTS


@dataclass
class CaseConfig:
    """Everything a case and an engine may read, as attributes.

    Typed fields are validated; parameters.yaml keys and vendor-only keys
    live in ``extra`` and are reachable as attributes too.
    """

    vendor: str
    case: str
    framework: str  # the case-code name, FlagPerf's: "pytorch" for --framework pytorch_2.1
    perf_dir: str
    data_dir: str
    log_dir: str
    batch_size: int
    fp16: bool
    compiler: str | None
    num_workers: int
    log_freq: int
    repeat: int
    no_validation: bool
    exist_onnx_path: str | None
    exist_compiler_path: str | None
    input_size: int | None = None
    warmup: int = MEASUREMENT_DEFAULTS["warmup"]
    flops: float | None = None
    seed: int = 0
    onnx_opset: int = 17
    device: str = "cpu"
    # Measurement and workload keys (ByteMLPerf's names where it has them).
    min_query_count: int = MEASUREMENT_DEFAULTS["min_query_count"]
    min_duration_s: float = MEASUREMENT_DEFAULTS["min_duration_s"]
    max_duration_s: float = MEASUREMENT_DEFAULTS["max_duration_s"]
    contention_limit: float = MEASUREMENT_DEFAULTS["contention_limit"]
    precision: float | None = MEASUREMENT_DEFAULTS[
        "precision"
    ]  # 95 % half-width / figure to reach; null: none asked (docs/measurement.md)
    latency_precision: float | None = MEASUREMENT_DEFAULTS[
        "latency_precision"
    ]  # the headline percentile's; null: precision
    settle_max_s: float = MEASUREMENT_DEFAULTS["settle_max_s"]
    repetitions: int = 1  # run.py runs the case this many times, interleaved, each a fresh process (run.py --repeat)
    # null in a config: [batch_size] once validated, so readers get a list (or "best" until
    # tools/compat/bytemlperf/hooks.py resolves it).
    batch_sizes: list[int] = None  # type: ignore[assignment]
    scenario: Any = "offline"  # names of common.scenario.SCENARIOS, one or a list; a list after validation
    clients: Any = 1  # issuing threads, or a list to sweep; a list after validation
    target_qps: float | None = None  # server: Poisson arrival rate, samples per second
    latency_bound_ms: float | None = None  # server: the p99 bound
    server_search: bool = False  # server: find the highest target_qps meeting the bound
    load_generator: str = (
        "inferperf"  # the performance rows' issuer: InferPerf's own scenarios, or "mlperf" (MLPerf LoadGen)
    )
    compile_only: bool = False  # stop after the vendor compile
    numeric_check: bool = True  # compare engine outputs with the framework model's
    numeric_batches: int = 2
    numeric_tolerance: Any = None  # overrides of contract.tolerances.DEFAULT_TOLERANCES
    audits: bool = True  # anti-caching and accuracy-in-performance-mode audits
    allow_many_clients: bool = False  # permit clients > 4 x cores
    pool_max_mb: float = 256.0  # memory for the preloaded query pool of one batch size
    extra: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict, repr=False)
    # Set by the pipeline as it goes.
    cache_dir: str = ""
    export_onnx_path: str | None = None
    engine_path: str | None = None
    # Set by a case when its accuracy means nothing (e.g. "random weights"):
    # accuracy is then reported as null with this reason, never as a number.
    accuracy_note: str | None = None
    # --framework as given (e.g. "pytorch_2.1", which names the docker image); set by load_case_config.
    framework_full: str = ""

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            try:
                setattr(self, name, check(getattr(self, name)))
            except ValueError as exc:
                raise ConfigError(f"{origin_of(self, name)}: key '{name}' {exc}") from None
        for name, value in self.extra.items():
            try:
                self.extra[name] = check_extra(name, value)
            except ValueError as exc:
                raise ConfigError(f"{origin_of(self, name)}: key {shown(name)} {exc}") from None
        self._check_workload()
        if self.no_validation and self.exist_onnx_path is None:
            raise ConfigError(
                f"{origin_of(self, 'no_validation')}: key 'no_validation' is true, so key "
                "'exist_onnx_path' must name an ONNX file (validation and export are both skipped)"
            )

    def _fail(self, key: str, message: str) -> NoReturn:
        raise ConfigError(f"{origin_of(self, key)}: key '{key}' {message}")

    def _check_workload(self) -> None:
        if self.max_duration_s < self.min_duration_s:
            self._fail(
                "max_duration_s", f"is {self.max_duration_s:g}, less than min_duration_s {self.min_duration_s:g}"
            )
        if self.batch_sizes is None:
            self.batch_sizes = [self.batch_size]
        for chosen in map(scenario, self.scenario):
            # Named where scenario was set: that is what asks for the bound, the rate and the query size.
            if chosen.bound_key is not None and getattr(self, chosen.bound_key) is None:
                self._fail(
                    "scenario",
                    f"includes {chosen.name}, so key '{chosen.bound_key}' is required (the {chosen.headline} bound in "
                    "ms)",
                )
            if chosen.scheduled and self.target_qps is None and not self.server_search:
                self._fail(
                    "scenario", f"includes {chosen.name}, so key 'target_qps' is required (or server_search: true)"
                )
            if chosen.samples_per_query_key is not None and isinstance(self.batch_sizes, list):
                samples = chosen.samples_per_query(query_samples(self, chosen), 1)
                for size in self.batch_sizes:
                    if samples % size:
                        self._fail(
                            "scenario",
                            f"includes {chosen.name}, so key '{chosen.samples_per_query_key}' ({samples}) must be a "
                            "whole number of batches, "
                            f"but batch size {size} does not divide it",
                        )
        if self.load_generator == "mlperf" and self.server_search:
            self._fail(
                "server_search",
                "is true, but load_generator mlperf runs server rows at a fixed target_qps; set target_qps instead",
            )
        cores = cpu_count()
        if not self.allow_many_clients and max(self.clients) > MAX_CLIENTS_PER_CORE * cores:
            self._fail(
                "clients",
                f"is {max(self.clients)}, more than {MAX_CLIENTS_PER_CORE} x the {cores} cores here; set "
                "allow_many_clients: true if that is intended",
            )
        if self.numeric_tolerance is not None:
            from contract.tolerances import tolerances_for

            try:
                tolerances_for("fp32", self.numeric_tolerance)
            except ValueError as exc:
                self._fail("numeric_tolerance", str(exc))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: parameters and vendor keys.
        extra = self.__dict__.get("extra", {})
        if name in extra:
            return extra[name]
        raise AttributeError(f"config has no key '{name}'")

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            return default

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "origin")}
        data.update(self.extra)
        return data

    # FlagPerf passes its config as a namedtuple; engines written for it read these.
    @property
    def _fields(self) -> tuple[str, ...]:
        return tuple(self.as_dict())

    def _asdict(self) -> dict[str, Any]:
        return self.as_dict()


# FlagPerf's keys without a default in ``CaseConfig``: its required keys (configurations.yaml must
# set them; a FlagPerf-style config object that lacks one runs with this) and its vendor keys.
_FLAGPERF_DEFAULTS: dict[str, Any] = {
    "repeat": 1,
    "log_freq": 0,
    "fp16": False,
    "has_dynamic_axis": True,  # false: the engine is built for a static batch (tools/compat/flagperf.py)
}
# The framework default of every key a config may lack: ``CaseConfig``'s own defaults and FlagPerf's, one table.
CASE_DEFAULTS: dict[str, Any] = {
    **_FLAGPERF_DEFAULTS,
    **{f.name: f.default for f in fields(CaseConfig) if f.default is not MISSING},
    # A scenario's samples per query (multi_stream's): None is the default its record holds.
    **{s.samples_per_query_key: None for s in SCENARIOS.values() if s.samples_per_query_key is not None},
}


def setting(config: object, key: str) -> Any:
    """``config``'s ``key``, or its framework default (``CASE_DEFAULTS``): a ``CaseConfig`` has every
    key, a FlagPerf-style config (a namedtuple, a vendor's own object) may lack the newer ones."""
    return getattr(config, key, CASE_DEFAULTS[key])


def query_samples(config: object, chosen: Scenario) -> Any:
    """The config's value of ``chosen``'s samples-per-query key (multi_stream's), or None: a scenario
    without the key (``Scenario.samples_per_query`` and ``calls_per_query`` take it)."""
    key = chosen.samples_per_query_key
    return setting(config, key) if key is not None else None


def origin_of(config: object, key: str) -> str:
    """Where ``config``'s ``key`` came from (a file, or the command line), the first words of its
    error; ``config`` where it does not say (a FlagPerf namedtuple has no ``origin``)."""
    origins = getattr(config, "origin", None)
    return origins.get(key, "config") if isinstance(origins, dict) else "config"


def check_choice(config: object, key: str, value: object, choices: Collection[str]) -> None:
    """A ``ConfigError`` naming ``key``'s origin unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{origin_of(config, key)}: key '{key}' must be one of {', '.join(choices)}, got {value!r}")


def check_flag(config: object, key: str, value: object) -> None:
    """A ``ConfigError`` naming ``key``'s origin unless ``value`` is true or false."""
    if not isinstance(value, bool):
        raise ConfigError(f"{origin_of(config, key)}: key '{key}' must be true or false, got {value!r}")


def has_dynamic_axis(config: object) -> bool:
    """FlagPerf's vendor key: false means the engine is built for a static batch. Default true.
    Read from a CaseConfig (``get``, ``origin``) or from a FlagPerf namedtuple (an attribute)."""
    value = setting(config, "has_dynamic_axis")
    check_flag(config, "has_dynamic_axis", value)
    return bool(value)
