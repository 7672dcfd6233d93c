"""The nvidia vendor's device monitor (spec §4.1.1): one JSON line per sample, via NVML.

Run from inference/:
    python3 -m docker_images.nvidia.nvidia_monitor --output FILE --interval 1 [--devices 0,1]

Each line: {"timestamp": unix seconds, "devices": [{"index", "uuid", "name",
"memory_used_bytes", "memory_total_bytes", "utilization_gpu_pct",
"utilization_memory_pct", "power_w", "temperature_c", "energy_mj"}, ...]}; energy_mj is NVML's
total energy since the driver loaded (common/energy.py reads a window's energy from it). A reading the
board does not support (power on some boards, utilisation under MIG) is null.
--devices takes the ACCE_VISIBLE_DEVICE_ENV_NAME value (CUDA_VISIBLE_DEVICES):
NVML indices or GPU-/MIG- UUIDs; absent or empty = every GPU.
Without pynvml (package nvidia-ml-py) or an NVIDIA driver it exits 1 with one
line on stderr; the loop and its SIGTERM/SIGINT handling are common/sampler.py's.
"""

from __future__ import annotations

from typing import Any, Callable

from common.energy import read_nvml_energy
from common.sampler import fail, monitor_args, run_sampler

MONITOR_PROTOCOL = "sampler"  # how run.py drives it (common/monitor_protocol.py)

SOURCE = "docker_images/nvidia/nvidia_monitor.py"


def _text(value: Any) -> str:
    # nvidia-ml-py returned bytes before 11.5 and str since.
    return value.decode() if isinstance(value, bytes) else str(value)


def select_handles(nvml: Any, devices: str | None) -> list[tuple[int, Any]]:
    """(NVML index, handle) of each selected GPU.

    CUDA_VISIBLE_DEVICES indices follow CUDA's order, which is NVML's (PCI bus)
    order when CUDA_DEVICE_ORDER=PCI_BUS_ID; UUIDs are unambiguous.
    """
    count = nvml.nvmlDeviceGetCount()
    tokens = [t.strip() for t in (devices or "").split(",") if t.strip()]
    if not tokens:
        return [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    selected = []
    for token in tokens:
        if token.isdigit():
            if int(token) >= count:
                raise ValueError(f"--devices {devices}: GPU {token} does not exist (NVML sees {count})")
            selected.append((int(token), nvml.nvmlDeviceGetHandleByIndex(int(token))))
        else:
            handle = nvml.nvmlDeviceGetHandleByUUID(token)
            selected.append((nvml.nvmlDeviceGetIndex(handle), handle))
    return selected


def make_sampler(nvml: Any, handles: list[tuple[int, Any]]) -> Callable[[], dict]:
    def reading(call: Callable, *args: Any) -> Any:
        try:
            return call(*args)
        except nvml.NVMLError:
            return None

    names = {index: _text(reading(nvml.nvmlDeviceGetName, handle) or "unknown") for index, handle in handles}
    uuids = {index: _text(reading(nvml.nvmlDeviceGetUUID, handle) or "") for index, handle in handles}

    def sample() -> dict:
        devices = []
        for index, handle in handles:
            memory = reading(nvml.nvmlDeviceGetMemoryInfo, handle)
            utilization = reading(nvml.nvmlDeviceGetUtilizationRates, handle)
            power_mw = reading(nvml.nvmlDeviceGetPowerUsage, handle)
            devices.append(
                {
                    "index": index,
                    "uuid": uuids[index],
                    "name": names[index],
                    "memory_used_bytes": memory.used if memory is not None else None,
                    "memory_total_bytes": memory.total if memory is not None else None,
                    "utilization_gpu_pct": utilization.gpu if utilization is not None else None,
                    "utilization_memory_pct": utilization.memory if utilization is not None else None,
                    "power_w": power_mw / 1000.0 if power_mw is not None else None,
                    "temperature_c": reading(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
                    "energy_mj": read_nvml_energy(nvml, handle),
                }
            )
        return {"devices": devices}

    return sample


def main(argv: list[str] | None = None) -> int:
    args = monitor_args(__doc__.splitlines()[0], argv)
    try:
        import pynvml
    except ImportError:
        fail(f"{SOURCE}: the pynvml module is missing (pip install nvidia-ml-py)")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        fail(f"{SOURCE}: cannot initialise NVML ({exc}): no NVIDIA driver here, or no GPU passed to the container")
    try:
        try:
            handles = select_handles(pynvml, args.devices)
        except (ValueError, pynvml.NVMLError) as exc:
            fail(f"{SOURCE}: {exc}")
        if not handles:
            fail(f"{SOURCE}: NVML reports no GPUs")
        return run_sampler(make_sampler(pynvml, handles), args.output, args.interval)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


if __name__ == "__main__":
    raise SystemExit(main())
