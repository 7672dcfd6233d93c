"""Faults around run_inference.py, each reproduced for real in a subprocess on the
digits case: corrupt and unsealed cache entries, an ONNX model's external data,
SIGKILL during export, SIGINT during the onnxruntime import, SIGTERM, and storage
faults (read-only, plain-file and full directories on real tmpfs mounts).

Every fault must end in one line naming the path and what is wrong, the
documented exit status, failure.json where it can be written, no traceback,
no result.json and nothing left behind."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.infra.run_inference import (
    COMPILE_ONLY,
    FAST,
    SLOW_IMPORT,
    assert_clean_failure,
    command,
    deferring_import,
    ended,
    run,
    strict_json,
    temps,
    tmpfs,
)
from tests.infra.trees import copy_tree


@pytest.fixture(scope="session")
def digits_dir(digits_data_dir) -> Path:
    return digits_data_dir


@pytest.fixture(scope="session")
def warm(tmp_path_factory, digits_dir) -> dict:
    """One fast full run: its caches (weights, ONNX, engine) are where the other tests start."""
    perf = copy_tree(tmp_path_factory.mktemp("faults_warm") / "inference")
    log = perf.parent / "log"
    proc = run(perf, digits_dir, log, *FAST)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"perf": perf, "log": log, "result": strict_json(log / "result.json")}


@pytest.fixture
def tree(tmp_path, warm) -> Path:
    return copy_tree(tmp_path / "inference", with_cache=warm["perf"] / "onnxs")


def test_every_cache_entry_and_result_is_sealed_shared_and_strict_json(warm):
    onnxs = warm["perf"] / "onnxs"
    engine = Path(warm["result"]["cache"]["engine"]["path"])
    onnx = Path(warm["result"]["cache"]["onnx"]["path"])
    weights = next((onnxs / "weights").glob("*.pt"))
    for entry in (engine, onnx, weights):
        assert stat.S_IMODE(entry.stat().st_mode) == 0o644, entry
        seal = strict_json(entry.with_name(entry.name + ".sha256.json"))
        assert list(seal["sha256"]) == [entry.name]
    for name in ("result.json",):
        strict_json(warm["log"] / name)
    assert temps(onnxs) == [] and temps(onnxs / "weights") == [] and temps(warm["log"]) == []


def flip(path: Path, count: int = 64) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, middle + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_engine_and_unsealed_onnx_are_evicted_and_rebuilt(tree, digits_dir, tmp_path, warm):
    engine = tree / "onnxs" / Path(warm["result"]["cache"]["engine"]["path"]).name
    onnx = tree / "onnxs" / Path(warm["result"]["cache"]["onnx"]["path"]).name
    flip(engine)  # flipped bytes: once used as a hit, accuracy 0.10
    onnx.with_name(onnx.name + ".sha256.json").unlink()  # killed between the entry and its seal
    log = tmp_path / "log"
    proc = run(tree, digits_dir, log, *FAST)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    warnings = [l for l in proc.stdout.splitlines() if "| WARNING" in l and "evicted" in l]
    assert any(f"cached engine {engine} failed its checksum: evicted and rebuilt" in l for l in warnings), warnings
    assert any(f"cached ONNX export {onnx} has no checksum file: evicted and rebuilt" in l for l in warnings), warnings
    result = strict_json(log / "result.json")
    assert (
        result["cache"]["engine"]["status"] == "miss" and result["cache"]["engine"]["evicted"] == "failed its checksum"
    )
    assert result["cache"]["onnx"]["status"] == "miss" and result["cache"]["onnx"]["evicted"] == "has no checksum file"
    assert result["infer_average_acc"] >= 0.95
    assert stat.S_IMODE(engine.stat().st_mode) == 0o644
    # Rebuilt and resealed: the next run uses both, without a word of warning.
    again = run(tree, digits_dir, tmp_path / "log2", *FAST, *COMPILE_ONLY)
    assert again.returncode == 0 and "evicted" not in again.stdout, again.stdout[-3000:]
    cache = strict_json(tmp_path / "log2" / "result.json")["cache"]
    assert cache["engine"]["status"] == "hit" and cache["onnx"]["status"] == "hit"


def test_engine_cache_key_covers_the_onnx_external_data(tree, digits_dir, tmp_path, warm):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(warm["result"]["cache"]["onnx"]["path"])
    user = tmp_path / "user"
    user.mkdir()

    def save(scale: float) -> None:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        for tensor in copy.graph.initializer:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * np.float32(scale), tensor.name))
        (user / "model.onnx.data").unlink(missing_ok=True)
        onnx.save_model(
            copy,
            str(user / "model.onnx"),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="model.onnx.data",
            size_threshold=0,
        )

    save(1.0)
    proto = (user / "model.onnx").read_bytes()
    extra = ["--set", f"exist_onnx_path={user / 'model.onnx'}", *COMPILE_ONLY]
    first = run(tree, digits_dir, tmp_path / "a", *FAST, *extra)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    engine_a = strict_json(tmp_path / "a" / "result.json")["cache"]["engine"]
    assert engine_a["status"] == "miss"
    save(-1.0)  # new weights, the very same model file
    assert (user / "model.onnx").read_bytes() == proto
    second = run(tree, digits_dir, tmp_path / "b", *FAST, *extra)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    engine_b = strict_json(tmp_path / "b" / "result.json")["cache"]["engine"]
    assert engine_b["status"] == "miss" and engine_b["path"] != engine_a["path"]
    # The cached engine is self-contained: it names no data file that is not in the cache.
    from common.onnx_files import onnx_external_locations

    assert onnx_external_locations(engine_b["path"]) == []


def test_sigkill_during_export_leaves_a_temp_that_the_next_run_removes(tree, digits_dir, tmp_path):
    onnxs = tree / "onnxs"
    for attempt in range(5):
        for old in onnxs.glob("digits_*"):  # the weights stay cached: only export and compile run again
            old.unlink()
        proc = subprocess.Popen(
            command(tree, digits_dir, tmp_path / "log", *FAST, *COMPILE_ONLY),
            cwd=tree,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        left: list[str] = []
        while proc.poll() is None and not left:
            left = [n for n in temps(onnxs) if n.startswith(".digits_")]
            time.sleep(0.001)
        if left:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        if left and [n for n in temps(onnxs) if n.startswith(".digits_")]:
            break
    else:
        pytest.fail("never caught the export or the compile writing its temporary in 5 runs")
    assert proc.returncode == -signal.SIGKILL
    stale = temps(onnxs)
    assert stale
    again = run(tree, digits_dir, tmp_path / "log2", *FAST, *COMPILE_ONLY)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "temporary file(s) left by killed runs in" in again.stdout and stale[0] in again.stdout
    assert temps(onnxs) == []


def sigint_inside_a_hooked_import(tree, digits_dir, tmp_path, hook_source: str, module: str, **env: str):
    """run_inference.py on digits with ``hook_source`` as its sitecustomize (an import hook that writes
    IMPORT_MARKER once ``module``'s import is under way), SIGINT once it has; its completed process."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(hook_source)
    marker = tmp_path / "importing"
    environ = dict(
        os.environ,
        PYTHONPATH=f"{hook}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        IMPORT_MARKER=str(marker),
        PYTHONFAULTHANDLER="1",
        **env,
    )
    log = tmp_path / "log"
    proc = subprocess.Popen(
        command(tree, digits_dir, log, *FAST),
        cwd=tree,
        env=environ,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), f"run_inference.py never imported {module}"
    proc.send_signal(signal.SIGINT)
    out, err = ended(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_sigint_while_onnxruntime_imports_exits_130_and_never_blames_the_package(tree, digits_dir, tmp_path):
    """A hung import: the stop waits IMPORT_GRACE_S for it, then cuts it short."""
    done = sigint_inside_a_hooked_import(tree, digits_dir, tmp_path, SLOW_IMPORT, "onnxruntime")
    assert "needs the onnxruntime package" not in done.stdout + done.stderr
    failure = assert_clean_failure(done, tmp_path / "log", 130, "interrupted by SIGINT")
    assert failure["step"] == "init"


def test_sigint_inside_the_torch_import_waits_for_its_end_then_exits_130(tree, digits_dir, tmp_path):
    """A stop signal inside an import is raised once the import has ended (common/stop_signals.py)."""
    deferred = tmp_path / "deferred"
    done = sigint_inside_a_hooked_import(
        tree, digits_dir, tmp_path, deferring_import("torch"), "torch", DEFERRED_MARKER=str(deferred)
    )
    assert deferred.exists(), "the stop was not deferred to the import's end"
    assert "KeyboardInterrupt" not in done.stdout + done.stderr
    assert_clean_failure(done, tmp_path / "log", 130, "interrupted by SIGINT")


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_sigint_at_real_startup_times_exits_130(tree, digits_dir, tmp_path, delay):
    """The real import, no hook: wherever Ctrl-C lands in start-up, it is an interruption."""
    log = tmp_path / "log"
    proc = subprocess.Popen(
        command(tree, digits_dir, log, *FAST),
        cwd=tree,
        env=dict(os.environ, PYTHONFAULTHANDLER="1"),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "[1/7 init] start" in line:
            break
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = ended(proc)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "needs the onnxruntime package" not in out + err and "Traceback" not in out + err
    assert strict_json(log / "failure.json")["error"] == "interrupted by SIGINT"


def test_sigterm_exits_143_with_a_terminated_failure_record(tree, digits_dir, tmp_path):
    log = tmp_path / "log"
    proc = subprocess.Popen(
        command(tree, digits_dir, log, *FAST), cwd=tree, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "[3/7 framework_validation] start" in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(seen) + out, err)
    failure = assert_clean_failure(done, log, 143, "terminated by SIGTERM")
    assert failure["step"] in ("framework_validation", "onnx_export", "vendor_compile", "engine_inference")


# ---- storage ------------------------------------------------------------------


def test_read_only_log_dir_is_one_line_naming_log_dir(tree, digits_dir, tmp_path):
    with tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        proc = run(tree, digits_dir, ro / "log", *FAST)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip() == f"--log_dir {ro / 'log'}: not writable: read-only file system"
    assert "Traceback" not in proc.stdout


def test_cache_dir_that_is_a_plain_file(tmp_path, digits_dir):
    perf = copy_tree(tmp_path / "inference")
    (perf / "onnxs").write_text("not a folder")
    log = tmp_path / "log"
    assert_clean_failure(
        run(perf, digits_dir, log, *FAST), log, 6, f"cache directory {perf / 'onnxs'}: exists and is not a directory"
    )


def test_read_only_cache_dir(tmp_path, digits_dir):
    """An empty read-only cache: every entry is a miss, and the first write names the folder (issue 32)."""
    perf = copy_tree(tmp_path / "inference")
    log = tmp_path / "log"
    with tmpfs(perf / "onnxs", "1m", read_only=True):
        proc = run(perf, digits_dir, log, *FAST)
    assert_clean_failure(
        proc,
        log,
        6,
        f"cache directory {perf / 'onnxs'} is read-only and this run must write to it (a cache miss): read-only file "
        "system",
    )


def test_disk_full_in_the_cache_during_export(tmp_path, digits_dir, warm):
    perf = copy_tree(tmp_path / "inference")
    log = tmp_path / "log"
    with tmpfs(perf / "onnxs", "250k") as onnxs:
        shutil.copytree(warm["perf"] / "onnxs" / "weights", onnxs / "weights")  # ~160 kB: the export cannot fit
        proc = run(perf, digits_dir, log, *FAST)
        left = sorted(p.name for p in onnxs.iterdir())
    onnx_name = Path(warm["result"]["cache"]["onnx"]["path"]).name
    failure = assert_clean_failure(proc, log, 6, f"no space left on device writing {perf / 'onnxs' / onnx_name}")
    assert failure["step"] == "onnx_export"
    assert left == ["weights"]  # no temporary, no half entry


def test_disk_full_in_log_dir_leaves_failure_json_and_no_partial_result(tree, digits_dir, tmp_path):
    # The log must fit and the results must not, on any machine: on a quiet one the stop rule
    # may measure until max_duration_s, and a batch line every log_freq batches then filled
    # 16k before the summary (the run failed in an earlier step, with no room for failure.json).
    quiet_and_short = ["--set", "log_freq=0", "--set", "max_duration_s=2"]
    with tmpfs(tmp_path / "full", "16k") as log:
        proc = run(tree, digits_dir, log, *FAST, *quiet_and_short)
        failure = assert_clean_failure(proc, log, 6, f"no space left on device writing {log}")
        assert failure["step"] == "summary"
        assert temps(log) == []
        assert (log / "container.out.log").stat().st_size < 8192  # room left for failure.json, not for the results
