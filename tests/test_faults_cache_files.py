"""The mechanisms behind the cache and storage fault handling, tested directly:
locked temporaries and the sweep (with a real writer process killed by SIGKILL),
checksum seals and eviction, the ONNX external-data digest, strict JSON, and
StorageError on a real full tmpfs."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import StorageError
from common.files import atomic_dir, atomic_path, json_text, sweep_stale_temps, writable_dir, write_json_atomic
from common.onnx_files import onnx_external_locations
from contract.cache import evict, onnx_digests, probe, reuse, seal, seal_path
from tests.infra.run_inference import tmpfs

INFERENCE = Path(__file__).resolve().parents[1] / "inference"


def strict(text: str):
    def refuse(name):
        raise ValueError(name)

    return json.loads(text, parse_constant=refuse)


# ---- locked temporaries and the sweep -------------------------------------------


def test_sweep_leaves_a_live_writers_temporary_and_removes_a_dead_ones_whatever_its_age(tmp_path):
    with atomic_path(tmp_path / "engine.plan") as tmp:
        tmp.write_bytes(b"half")
        assert sweep_stale_temps(tmp_path) == []  # locked by this writer (another open file description)
        assert tmp.exists()
    dead = tmp_path / ".engine.plan.abc123.tmp"
    dead.write_bytes(b"left by a killed writer a second ago")
    dead_dir = tmp_path / ".model.onnx.xyz.tmp"
    (dead_dir / "sub").mkdir(parents=True)
    (dead_dir / "model.onnx.data").write_bytes(b"x")
    (tmp_path / "keep.tmp").write_text("not ours: no leading dot")
    (tmp_path / ".hidden").write_text("not ours: no .tmp")
    os.symlink(tmp_path / "keep.tmp", tmp_path / ".link.tmp")
    assert sorted(p.name for p in sweep_stale_temps(tmp_path)) == [".engine.plan.abc123.tmp", ".model.onnx.xyz.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", ".link.tmp", "engine.plan", "keep.tmp"]


_WRITER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from common.files import atomic_dir, atomic_path
with atomic_path(sys.argv[2] + "/engine.plan") as tmp, atomic_dir(sys.argv[2], "model.onnx") as work:
    tmp.write_bytes(b"x" * 1000)
    (work / "model.onnx").write_bytes(b"y")
    print("writing", flush=True)
    time.sleep(120)
"""


def test_a_writer_in_another_process_is_safe_until_sigkill_then_swept(tmp_path):
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(INFERENCE), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        live = sorted(p.name for p in tmp_path.iterdir())
        assert len(live) == 2 and all(n.endswith(".tmp") for n in live)
        assert sweep_stale_temps(tmp_path) == []
        assert sorted(p.name for p in tmp_path.iterdir()) == live
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    assert sorted(p.name for p in sweep_stale_temps(tmp_path)) == live
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_removes_everything_the_writer_made(tmp_path):
    with atomic_dir(tmp_path, "m.onnx") as work:
        (work / "m.onnx").write_bytes(b"m")
        (work / "weights.bin").write_bytes(b"w")
        (work / "m.onnx").replace(tmp_path / "m.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    with pytest.raises(RuntimeError):
        with atomic_dir(tmp_path, "n.onnx") as work:
            (work / "n.onnx").write_bytes(b"n")
            raise RuntimeError("exporter failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# ---- storage ------------------------------------------------------------------


def test_a_full_file_system_is_one_storage_error_naming_the_target_and_leaves_nothing(tmp_path):
    with tmpfs(tmp_path / "full", "64k") as full:
        target = full / "result.json"
        with pytest.raises(StorageError, match=f"^no space left on device writing {target}$") as caught:
            write_json_atomic(target, {"x": "y" * 200_000})
        assert caught.value.exit_code == 6
        assert list(full.iterdir()) == []
        # A writer that reports the full disk in words of its own (a C++ exporter) is caught too.
        with pytest.raises(StorageError, match="^no space left on device writing"):
            with atomic_path(full / "engine.plan") as tmp:
                try:
                    tmp.write_bytes(b"z" * 200_000)
                except OSError:
                    raise RuntimeError("serialization failed") from None
        assert list(full.iterdir()) == []


def test_writable_dir_names_a_plain_file_and_a_read_only_mount(tmp_path):
    (tmp_path / "onnxs").write_text("x")
    with pytest.raises(StorageError, match=f"^cache directory {tmp_path / 'onnxs'}: exists and is not a directory$"):
        writable_dir(tmp_path / "onnxs", "cache directory")
    with pytest.raises(StorageError, match="a parent exists and is not a directory"):
        writable_dir(tmp_path / "onnxs" / "sub", "--log_dir")
    with tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        with pytest.raises(StorageError, match=f"^--log_dir {ro}: not writable: read-only file system$"):
            writable_dir(ro, "--log_dir")
    assert writable_dir(tmp_path / "new" / "dir", "x").is_dir()
    assert list((tmp_path / "new" / "dir").iterdir()) == []


# ---- seals --------------------------------------------------------------------


def test_seal_probe_and_evict(tmp_path, caplog_loguru):
    entry, data = tmp_path / "m.onnx", tmp_path / "m.onnx.data"
    entry.write_bytes(b"model")
    data.write_bytes(b"weights")
    assert probe(entry, "ONNX export") == (False, "has no checksum file")
    assert not entry.exists()
    entry.write_bytes(b"model")
    seal(entry, [data])
    assert sorted(strict(seal_path(entry).read_text())["sha256"]) == ["m.onnx", "m.onnx.data"]
    assert reuse(entry, "ONNX export") and entry.exists() and data.exists()
    data.write_bytes(b"weightz")
    assert probe(entry, "ONNX export") == (False, "failed its checksum (m.onnx.data)")
    assert list(tmp_path.iterdir()) == []
    assert {
        "level": "WARNING",
        "message": f"cached ONNX export {entry} failed its checksum (m.onnx.data): evicted and rebuilt",
    } in caplog_loguru
    entry.write_bytes(b"model")
    seal(entry)
    seal_path(entry).write_text("{ not json")
    assert probe(entry, "engine") == (False, "has an unreadable checksum file (JSONDecodeError)")
    entry.write_bytes(b"model")
    seal(entry)
    evict(entry)
    assert list(tmp_path.iterdir()) == []
    assert probe(entry, "engine") == (False, None)


def test_onnx_digest_covers_the_external_data_it_names(tmp_path):
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
        [weight],
    )
    model = helper.make_model(graph)
    inline = tmp_path / "inline.onnx"
    onnx.save_model(model, str(inline))
    assert onnx_external_locations(inline) == [] and list(onnx_digests(inline)) == [""]
    external = tmp_path / "ext.onnx"
    onnx.save_model(model, str(external), save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert onnx_external_locations(external) == ["weights.bin"]
    before = onnx_digests(external)
    raw = bytearray((tmp_path / "weights.bin").read_bytes())
    raw[0] ^= 1
    (tmp_path / "weights.bin").write_bytes(bytes(raw))
    after = onnx_digests(external)
    assert after[""] == before[""] and after["weights.bin"] != before["weights.bin"]
    (tmp_path / "weights.bin").unlink()
    assert onnx_digests(external)["weights.bin"] is None


# ---- strict JSON and interrupted imports ------------------------------------------


def test_json_is_strict_everywhere_non_finite_floats_become_null(tmp_path):
    data = {"flops": float("inf"), "mfu": [float("nan"), -math.inf, 1.5], "nested": {"x": (float("inf"),)}}
    assert strict(json_text(data)) == {"flops": None, "mfu": [None, None, 1.5], "nested": {"x": [None]}}
    assert strict(json_text(data, indent=None)) == strict(json_text(data)) and "\n" not in json_text(data, indent=None)
    from tools.results.result import write_failure

    write_failure(tmp_path, step="x", error="e", exit_code=6, case="c", vendor="v")
    strict((tmp_path / "failure.json").read_text())
    entry = tmp_path / "e.bin"
    entry.write_bytes(b"e")
    strict(seal(entry).read_text())


def test_an_import_cut_short_by_ctrl_c_is_an_interruption_not_a_missing_package():
    from common.errors import reraise_interrupt

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ImportError("initialization failed")  # what pybind11's module init turns Ctrl-C into
    except ImportError as exc:
        with pytest.raises(KeyboardInterrupt):
            reraise_interrupt(exc)
    reraise_interrupt(ImportError("No module named 'onnxruntime'"))  # a real absence passes through


def test_sweep_is_fast_on_a_busy_directory(tmp_path, monkeypatch):
    # "Fast" as work done, not a stopwatch: one directory listing, and no entry that is not a
    # temporary is stat'ed, opened or locked (the sweep runs on every cache directory at start).
    for i in range(500):
        (tmp_path / f"entry{i}.onnx").write_bytes(b"")
    (tmp_path / ".model.onnx.dead.tmp").write_bytes(b"")  # one temporary, its writer gone
    import common.files as files

    touched: list[str] = []
    for name in ("stat", "open", "lstat"):
        real = getattr(files.os, name)
        monkeypatch.setattr(
            files.os,
            name,
            lambda path, *a, _real=real, _name=name, **k: (
                touched.append(f"{_name} {os.fspath(path)}") or _real(path, *a, **k)
            ),
        )
    assert [p.name for p in sweep_stale_temps(tmp_path)] == [".model.onnx.dead.tmp"]
    monkeypatch.undo()
    assert touched and all(".model.onnx.dead.tmp" in entry for entry in touched), touched[:5]
