"""The base tier: cases that measure the chip itself, as FlagPerf's ``base/`` suite does.

A base case is a case folder named ``base_<what>`` (``benchmarks/base_gemm/pytorch/``,
``configs/base_gemm/...``) run like any other case by host.yaml and run.py, in the vendor's
container and with the monitors. Instead of the model steps it defines one pipeline hook,
``baseline_stage(config)``: the pipeline skips the data set, the model and the engine and
runs it in the engine_inference step (tools/pipeline.py). Its figures are measured until
precise by the framework (``measure_kernel``, ``measure_collective``: ``contract/measuring.py``,
implemented in ``tools/measure/baseline.py``) and written under result.json's ``baseline``.

Cases (each figure with its 95 % interval and verdict):
  base_gemm      GEMM FLOP/s per dtype (``dtypes``) over a size sweep (``sizes``, square
                 m = n = k): every size measured briefly, the best one until precise;
  base_stream    STREAM copy and triad bytes/s over arrays well beyond the last-level cache;
  base_transfer  host<->device bytes/s each way, pinned and pageable (not applicable on a
                 vendor without device memory, e.g. cpu);
  base_allreduce the interconnect: all-reduce bandwidth over the run's hosts with
                 torch.distributed (gloo on cpu, NCCL on nvidia), size against algorithm and bus
                 bandwidth as nccl-tests reports them; needs 2 or more hosts.

The kernels are the vendor's: ``inference_engine/<vendor>/base/kernels.py`` defines
``Kernels`` (usually a subclass of ``contract/kernels.py::TorchKernels``, overriding what its
library does better); without that file the vendor gets ``TorchKernels`` (docs/vendor_guide.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from loguru import logger

from common.errors import ConfigError, DataError
from common.record import as_json
from contract.config import CaseConfig, origin_of
from contract.kernels import (
    DTYPES,
    KernelSettings,
    TorchKernels,
    allreduce_bandwidth,
    gemm_flop,
    group_decision,
    stream_bytes,
)
from contract.measuring import measuring
from contract.registry import vendor_kernels
from contract.settings import MIN_QUERIES

MEMORY_SHARE = 0.8  # a working set must fit in this share of the free memory


# ---- the checks (run.py before any host; the container again before allocating) ---------------
def _positive_ints(config: CaseConfig, key: str) -> list[int]:
    value = config.get(key)
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise ConfigError(
            f"{origin_of(config, key)}: key '{key}' must be a positive integer or a list of them, got {value!r}"
        )
    return values


def gemm_dtypes(config: CaseConfig, kernels: TorchKernels) -> list[str]:
    value = config.get("dtypes")
    dtypes = value if isinstance(value, list) else [value]
    if not dtypes or not all(isinstance(d, str) for d in dtypes):
        raise ConfigError(f"{origin_of(config, 'dtypes')}: key 'dtypes' must be a list of dtype names, got {value!r}")
    for dtype in dtypes:
        if dtype not in kernels.gemm_dtypes:
            raise ConfigError(
                f"{origin_of(config, 'dtypes')}: key 'dtypes': {dtype!r} is not supported by vendor {config.vendor}'s "
                "kernels "
                f"({kernels.name}: {', '.join(kernels.gemm_dtypes)})"
            )
    return dtypes


def gemm_bytes(dtype: str, size: int) -> int:
    """Memory of A, B and C for a square GEMM of ``size``."""
    _, ab, c = DTYPES[dtype]
    return 2 * size * size * ab + size * size * c


def stream_elements(config: CaseConfig) -> int:
    """Elements of each STREAM array: ``array_mib`` MiB of float64, or (``auto``) 4 x the
    last-level caches' total (STREAM's rule), at least 64 MiB."""
    value = config.get("array_mib", "auto")
    if value == "auto":
        nbytes = max(4 * last_level_cache_bytes(), 64 * 2**20)
    else:
        nbytes = _positive_ints(config, "array_mib")[0] * 2**20
    return nbytes // 8


def last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu")) -> int:
    """Sum of the last-level caches (each shared cache counted once); 0 when unknown."""
    caches: dict[tuple[int, str], int] = {}
    for index in root.glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            level = int((index / "level").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        nbytes = int(size[:-1]) * units[size[-1]] if size and size[-1] in units else int(size or 0)
        caches[(level, shared)] = nbytes
    if not caches:
        return 0
    top = max(level for level, _ in caches)
    return sum(size for (level, _), size in caches.items() if level == top)


def check_memory(config: CaseConfig, kernels: TorchKernels, key: str, needed: int, what: str) -> None:
    free = kernels.free_memory(config.device)
    if free is not None and needed > MEMORY_SHARE * free:
        raise ConfigError(
            f"{origin_of(config, key)}: key '{key}': {what} needs {needed / 2**30:.3g} GiB, more than "
            f"{MEMORY_SHARE:.0%} "
            f"of the {free / 2**30:.3g} GiB free on {config.device}"
        )


def check_base_config(
    config: CaseConfig,
    kernels: TorchKernels | None = None,
    memory: bool = True,
    hosts: int | None = None,
    hosts_origin: str = "host.yaml",
) -> None:
    """Every bad input of a base case as one ConfigError naming the key (exit 2), before anything
    is allocated. ``memory``: also check the working set against this machine's free memory
    (where the case runs here). ``hosts``: how many hosts the run has (``hosts_origin`` names
    the file listing them)."""
    if config.case == "base_allreduce":
        _positive_ints(config, "sizes_mib")
        if hosts is not None and hosts < 2:
            raise ConfigError(
                f"{hosts_origin}: key 'HOSTS' lists {hosts} host: base_allreduce measures the interconnect between 2 "
                "or more hosts"
            )
        return
    kernels = kernels or vendor_kernels(config.vendor)
    if config.case == "base_gemm":
        dtypes = gemm_dtypes(config, kernels)
        sizes = _positive_ints(config, "sizes")
        if memory:
            largest = max(sizes)
            for dtype in dtypes:
                check_memory(
                    config, kernels, "sizes", gemm_bytes(dtype, largest), f"a {largest}^3 {dtype} GEMM (A, B and C)"
                )
    elif config.case == "base_stream":
        elements = stream_elements(config)
        if memory:
            check_memory(
                config,
                kernels,
                "array_mib",
                3 * elements * 8,
                f"STREAM's three arrays of {elements * 8 / 2**20:.0f} MiB",
            )
    elif config.case == "base_transfer":
        mib = _positive_ints(config, "transfer_mib")[0]
        if memory and kernels.transfer_not_applicable is None:
            check_memory(config, kernels, "transfer_mib", mib * 2**20, f"a {mib} MiB transfer buffer")


# ---- the report -------------------------------------------------------------------------------
@dataclass
class BaselineReport:
    """What a base case's stage gives the pipeline (the shape ``tools/results/result.py`` reads)."""

    case: str
    kernels: str
    figures: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_applicable: str | None = None
    rows: list = field(default_factory=list)  # no LoadGen-style rows
    engine_reasons: list[str] = field(default_factory=list)
    raw_latencies_ns: list = field(default_factory=list)

    def labelled_reasons(self) -> list[tuple[str, list[str]]]:
        return [(figure["name"], figure["verdict"]["reasons"]) for figure in self.figures]

    def to_dict(self) -> dict:
        baseline = as_json(self, ("case", "kernels", "figures", "not_applicable"))
        return {"baseline": baseline, "notes": self.notes, "rows": []}


def figure(name: str, kind: str, unit: str, rate: Any, **extra: Any) -> dict:
    return {"name": name, "kind": kind, "unit": unit, **rate.to_dict(), **extra}


def _settings(config: CaseConfig) -> KernelSettings:
    return KernelSettings.from_config(config)


def _kernel_stage(
    config: CaseConfig, kernels: TorchKernels | None, clock: Callable[[], int] | None
) -> tuple[TorchKernels, KernelSettings, dict]:
    """A kernel stage's start: the vendor's kernels (unless given), the config checked against them, the
    measurement settings, and ``measure_kernel``'s clock keyword (none: its own)."""
    kernels = kernels or vendor_kernels(config.vendor)
    check_base_config(config, kernels)
    return kernels, _settings(config), ({} if clock is None else {"clock": clock})


def gemm_stage(
    config: CaseConfig, kernels: TorchKernels | None = None, clock: Callable[[], int] | None = None
) -> BaselineReport:
    """Each dtype: every size measured for ``sweep_s`` (information), then the best size until precise,
    on the kernel the sweep built and warmed (no second build, no cold start before its window)."""
    kernels, settings, timing = _kernel_stage(config, kernels, clock)
    device = config.device
    report = BaselineReport(config.case, kernels.name, notes=[threads_note()])
    for dtype in gemm_dtypes(config, kernels):
        swept, best, call = _gemm_sweep(config, kernels, dtype, settings, timing, report.notes)
        rate = measuring().measure_kernel(
            call, gemm_flop(best, best, best), settings, lambda: kernels.sync(device), **timing
        )
        del call
        report.figures.append(
            figure(f"{dtype} GEMM", "compute", "FLOP/s", rate, dtype=dtype, size=[best, best, best], sweep=swept)
        )
        _judged(report)
    return report


def _gemm_sweep(
    config: CaseConfig, kernels: TorchKernels, dtype: str, settings: KernelSettings, timing: dict, notes: list[str]
) -> tuple[list[dict], int, Callable[[], Any]]:
    """Every size of ``sizes``, up from the smallest, measured for ``sweep_s`` (information, no precision
    asked): the rows, the best size and its kernel, kept (the others are dropped as soon as a faster one
    is found). A size whose row would take longer than ``max_duration_s`` at the rate of the size
    before it (its warm-up and ``MIN_QUERIES`` calls) is not swept, nor any larger one: ``notes`` says
    so (a dtype the chip only emulates, such as bf16 on a CPU without AVX-512 BF16 or AMX: its large
    sizes' calls are too slow to sweep; docs/decisions.md)."""
    from dataclasses import replace

    sweep = replace(
        settings,
        warmup=1,
        settle_max_s=0.0,
        precision=None,
        min_queries=MIN_QUERIES,
        min_duration_s=float(config.get("sweep_s", 0.3)),
    )
    device = config.device
    swept: list[dict] = []
    best, kept = 0, None
    for size in sorted(_positive_ints(config, "sizes")):
        if swept and (swept[-1]["value"] or 0.0) > 0:
            call_s = gemm_flop(size, size, size) / swept[-1]["value"]
            if (1 + MIN_QUERIES) * call_s > settings.max_duration_s:
                notes.append(_not_swept(dtype, size, swept[-1]["size"], call_s, settings.max_duration_s))
                break
        call = kernels.gemm(dtype, size, size, size, device)
        rate = measuring().measure_kernel(
            call, gemm_flop(size, size, size), sweep, lambda: kernels.sync(device), **timing
        )
        swept.append({"size": size, "value": rate.value, "ci95": rate.ci95, "calls": rate.calls})
        logger.info(f"{dtype} GEMM {size}^3: {(rate.value or 0) / 1e9:.1f} GFLOP/s over {rate.calls} calls (sweep)")
        if kept is None or (rate.value or 0.0) > max(row["value"] or 0.0 for row in swept[:-1]):
            best, kept = size, call
        del call
    assert kept is not None  # sizes holds at least one (checked), and the smallest is always swept
    return swept, best, kept


def _not_swept(dtype: str, size: int, before: int, call_s: float, max_duration_s: float) -> str:
    note = (
        f"{dtype} GEMM: sizes from {size}^3 up not swept: one call would take about {call_s:.2g} s at "
        f"{before}^3's rate, {1 + MIN_QUERIES} calls over max_duration_s ({max_duration_s:g} s)"
    )
    logger.info(note)
    return note


def stream_stage(
    config: CaseConfig, kernels: TorchKernels | None = None, clock: Callable[[], int] | None = None
) -> BaselineReport:
    kernels, settings, timing = _kernel_stage(config, kernels, clock)
    elements = stream_elements(config)
    llc = last_level_cache_bytes()
    report = BaselineReport(config.case, kernels.name)
    report.notes.append(
        f"STREAM arrays of {elements * 8 / 2**20:.0f} MiB float64 each"
        + (
            f", {elements * 8 / llc:.1f} x the {llc / 2**20:.0f} MiB last-level cache"
            if llc
            else " (last-level cache size unknown)"
        )
    )
    for kernel in config.get("kernels", ["copy", "triad"]):
        call = kernels.stream(kernel, elements, config.device)
        rate = measuring().measure_kernel(
            call, stream_bytes(kernel, elements, 8), settings, lambda: kernels.sync(config.device), **timing
        )
        del call
        report.figures.append(
            figure(f"STREAM {kernel}", "bandwidth", "B/s", rate, kernel=kernel, array_bytes=elements * 8)
        )
        _judged(report)
    return report


def transfer_stage(
    config: CaseConfig, kernels: TorchKernels | None = None, clock: Callable[[], int] | None = None
) -> BaselineReport:
    kernels = kernels or vendor_kernels(config.vendor)
    check_base_config(config, kernels)
    report = BaselineReport(config.case, kernels.name)
    if kernels.transfer_not_applicable is not None:
        report.not_applicable = kernels.transfer_not_applicable
        logger.info(f"host<->device transfer: not applicable ({kernels.transfer_not_applicable})")
        return report
    settings = _settings(config)
    timing = {} if clock is None else {"clock": clock}
    nbytes = _positive_ints(config, "transfer_mib")[0] * 2**20
    for pinned in (True, False):
        for direction in ("h2d", "d2h"):
            call = kernels.transfer(direction, nbytes, pinned, config.device)
            rate = measuring().measure_kernel(call, nbytes, settings, lambda: kernels.sync(config.device), **timing)
            del call
            memory = "pinned" if pinned else "pageable"
            report.figures.append(
                figure(
                    f"{direction} {memory}", "transfer", "B/s", rate, direction=direction, pinned=pinned, bytes=nbytes
                )
            )
            _judged(report)
    return report


def rendezvous(config: CaseConfig, environ: dict | None = None) -> tuple[list[str], int, str, int]:
    """(hosts, this host's rank, master address, port) of a collective over the run's hosts, from
    what the executor passed (common/layout.py) and the keys ``master_addr`` (null: the first
    host) and ``master_port`` (0: derived from the run id, so that concurrent runs differ)."""
    import hashlib

    from common.layout import HOSTS_ENV, NODERANK_ENV, RUN_ID_ENV

    environ = os.environ if environ is None else environ
    hosts = [h for h in environ.get(HOSTS_ENV, "").split(",") if h]
    if len(hosts) < 2:
        raise ConfigError(
            f"key 'HOSTS' lists {len(hosts) or 1} host: base_allreduce measures the interconnect between 2 or more "
            "hosts"
        )
    rank = int(environ.get(NODERANK_ENV, "0"))
    port = int(config.get("master_port", 0) or 0)
    if not port:
        port = 20000 + int(hashlib.sha256(environ.get(RUN_ID_ENV, "").encode()).hexdigest()[:8], 16) % 30000
    return hosts, rank, config.get("master_addr") or hosts[0], port


def allreduce_stage(
    config: CaseConfig, kernels: TorchKernels | None = None, clock: Callable[[], int] | None = None
) -> BaselineReport:
    """All-reduce of each size in ``sizes_mib`` over the run's hosts, measured until precise with
    the same number of calls on every rank (``measure_collective``)."""
    from datetime import timedelta
    from functools import partial

    import torch
    import torch.distributed as dist

    check_base_config(config)
    kernels = kernels or vendor_kernels(config.vendor)
    hosts, rank, address, port = rendezvous(config)
    if config.get("gloo_socket_ifname"):
        os.environ["GLOO_SOCKET_IFNAME"] = str(config.gloo_socket_ifname)
    backend = str(config.get("backend", "gloo"))
    logger.info(f"all-reduce: rank {rank} of {len(hosts)}, {backend} via tcp://{address}:{port}")
    dist.init_process_group(
        backend,
        init_method=f"tcp://{address}:{port}",
        rank=rank,
        world_size=len(hosts),
        timeout=timedelta(seconds=float(config.get("rendezvous_timeout_s", 600))),
    )
    report = BaselineReport(
        config.case,
        f"torch.distributed {backend}",
        notes=[f"{len(hosts)} ranks: {', '.join(hosts)}; this is rank {rank}"],
    )
    try:
        device = config.device
        flags = torch.zeros(2, dtype=torch.int32, device=device)

        def agree(more: bool, late: bool) -> bool:
            flags[0], flags[1] = int(more), int(late)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            return group_decision([bool(flags[0])], [bool(flags[1])])

        timing = {} if clock is None else {"clock": clock}
        for mib in sorted(_positive_ints(config, "sizes_mib")):
            nbytes = mib * 2**20
            tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
            sync = lambda: kernels.sync(device)
            rate = measuring().measure_collective(
                partial(dist.all_reduce, tensor), nbytes, _settings(config), agree, sync, **timing
            )
            found = _busbw_figure(mib, rate, len(hosts), backend)
            report.figures.append(found)
            _log(found)
    finally:
        dist.destroy_process_group()
    return report


def _busbw_figure(mib: int, rate: Any, ranks: int, backend: str) -> dict:
    """One all-reduce size's figure: its bus bandwidth (nccl-tests' definition), with the algorithm
    bandwidth it comes from beside it."""
    nbytes = mib * 2**20
    found = figure(
        f"all-reduce {mib} MiB busbw", "interconnect", "B/s", rate, bytes=nbytes, ranks=ranks, backend=backend
    )
    algbw, busbw = allreduce_bandwidth(nbytes, rate.seconds / rate.calls, ranks)
    factor = busbw / algbw
    found.update(
        algbw=rate.value,
        algbw_ci95=rate.ci95,
        value=rate.value * factor,
        ci95=[v * factor for v in rate.ci95] if rate.ci95 else None,
    )
    return found


def _judged(report: BaselineReport) -> None:
    """The report's last figure logged, and a note where its first window drifted and it was measured
    once more (``measure_kernel``): the figure is the second window's."""
    found = report.figures[-1]
    again = (found.get("precision") or {}).get("remeasured")
    if again:
        changes = ", ".join(f"{change:+.1%}" for change in again["drift"].values())
        report.notes.append(
            f"{found['name']}: its first window drifted ({changes} from the first to the last third) and was "
            "measured once more; the figure is the second window's"
        )
        logger.info(report.notes[-1])
    _log(found)


def _log(found: dict) -> None:
    value, width = found["value"], found["relative_half_width"]
    scaled = f"{value / 1e9:.2f} G{found['unit']}" if value else "n/a"
    state = "valid" if found["verdict"]["valid"] else "INVALID: " + "; ".join(found["verdict"]["reasons"])
    logger.info(f"{found['name']}: {scaled}" + (f" ±{width:.1%}" if width is not None else "") + f" ({state})")


# ---- the six case functions (spec §3.2.2), none of which a base case uses ----------------------
def _not_used(*_args: Any, **_kwargs: Any) -> Any:
    raise DataError("a base-tier case has no data set, model or engine: the pipeline runs its baseline_stage instead")


# The six, as names a base case's package imports with ``from benchmarks.base_common import *``
# (spec §3.2.2's six functions, none of them used): ``__all__`` is exactly them.
__all__ = ["build_dataloader", "create_model", "evaluator", "model_forward", "export_model", "engine_forward"]
CASE_FUNCTIONS = dict.fromkeys(__all__, _not_used)
build_dataloader = create_model = evaluator = model_forward = export_model = engine_forward = _not_used


def threads_note() -> str:
    try:
        import torch

        return f"{torch.get_num_threads()} torch threads of {os.cpu_count()} CPUs"
    except ImportError:  # pragma: no cover - torch is in every image
        return f"{os.cpu_count()} CPUs"
