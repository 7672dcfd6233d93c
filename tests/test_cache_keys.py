"""contract.cache: the hashes used as cache keys and the atomic writes, checked exactly.

A cache key must be *stable* (the same inputs give the same key, in another
directory, in another process, in another dict order) and *sensitive* (any change
that matters gives another key). Every expected digest here is recomputed
independently with hashlib from the definition in contract/cache.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.files import atomic_path, fingerprint, hash_file, hash_tree, write_json_atomic
from contract.cache import hash_state_dict

FAST = settings(max_examples=50, deadline=None, derandomize=True)


# --- hash_file ----------------------------------------------------------------


@FAST
@given(st.binary(max_size=3000))
def test_hash_file_is_the_sha256_of_the_bytes(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("h") / "f.bin"
    path.write_bytes(content)
    assert hash_file(path).hexdigest() == hashlib.sha256(content).hexdigest()
    assert hash_file(str(path)).hexdigest() == hashlib.sha256(content).hexdigest()


def test_hash_file_reads_files_larger_than_one_chunk(tmp_path):
    content = os.urandom((5 << 19) + 7)  # 2.5 MiB + 7 bytes: three reads of 1 MiB
    path = tmp_path / "big.bin"
    path.write_bytes(content)
    assert hash_file(path).hexdigest() == hashlib.sha256(content).hexdigest()


def test_hash_file_continues_a_given_digest(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"world")
    digest = hashlib.sha256(b"hello ")
    assert hash_file(path, digest) is digest
    assert digest.hexdigest() == hashlib.sha256(b"hello world").hexdigest()
    assert hash_file(path, hashlib.md5()).hexdigest() == hashlib.md5(b"world").hexdigest()


# --- hash_tree ----------------------------------------------------------------


def _expected_tree_hash(entries: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, content in entries:
        digest.update(name.encode())
        digest.update(content)
    return digest.hexdigest()


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def test_hash_tree_covers_sorted_relative_names_and_contents(tmp_path):
    case = _write(
        tmp_path / "case",
        {
            "model.py": b"A",
            "sub/b.py": b"B",
            "a.py": b"C",
            "notes.txt": b"ignored",
            "__pycache__/model.py": b"ignored",
            "sub/__pycache__/x.py": b"ignored",
        },
    )
    common = _write(tmp_path / "lib", {"common.py": b"D"})
    expected = _expected_tree_hash(
        [("case/a.py", b"C"), ("case/model.py", b"A"), ("case/sub/b.py", b"B"), ("common.py", b"D")]
    )
    assert hash_tree([case, common / "common.py"]) == expected
    assert hash_tree([str(case), str(common / "common.py")]) == expected
    with_txt = _expected_tree_hash(
        [("case/a.py", b"C"), ("case/model.py", b"A"), ("case/notes.txt", b"ignored"), ("case/sub/b.py", b"B")]
    )
    assert hash_tree([case], suffixes=(".py", ".txt")) == with_txt
    assert hash_tree([]) == hashlib.sha256().hexdigest()


def test_hash_tree_is_stable_across_locations_and_sensitive_to_names_and_contents(tmp_path):
    files = {"m.py": b"x = 1\n", "pkg/u.py": b"y = 2\n"}
    key = hash_tree([_write(tmp_path / "one" / "case", files)])
    assert hash_tree([_write(tmp_path / "two" / "case", files)]) == key  # another checkout
    assert hash_tree([_write(tmp_path / "three" / "other", files)]) != key  # the case's name counts
    assert hash_tree([_write(tmp_path / "4" / "case", {"m.py": b"x = 2\n", "pkg/u.py": b"y = 2\n"})]) != key
    assert hash_tree([_write(tmp_path / "5" / "case", {"n.py": b"x = 1\n", "pkg/u.py": b"y = 2\n"})]) != key
    # Bytes moved from one file's end to the next file's start: the names still separate them.
    assert hash_tree([_write(tmp_path / "6" / "case", {"m.py": b"x = 1", "pkg/u.py": b"\ny = 2\n"})]) != key
    stray = _write(tmp_path / "7" / "case", {**files, "__pycache__/m.cpython-311.py": b"junk", "data.bin": b"junk"})
    assert hash_tree([stray]) == key


# --- hash_state_dict ------------------------------------------------------------


def test_hash_state_dict_covers_names_dtypes_shapes_and_bytes():
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)
            self.register_buffer("scale", torch.arange(4, dtype=torch.int64))

    torch.manual_seed(0)
    model = Model()
    expected = hashlib.sha256()
    for name in ("fc.bias", "fc.weight", "scale"):  # sorted by name
        tensor = model.state_dict()[name]
        expected.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        expected.update(tensor.numpy().tobytes())
    key = hash_state_dict(model)
    assert key == expected.hexdigest()

    original = model.fc.weight[1, 2].item()
    with torch.no_grad():
        model.fc.weight[1, 2] = original + 1.0
    assert hash_state_dict(model) != key
    with torch.no_grad():
        model.fc.weight[1, 2] = original
    assert hash_state_dict(model) == key


class _StateDict:
    def __init__(self, tensors):
        self.tensors = tensors

    def state_dict(self):
        return dict(self.tensors)


def test_hash_state_dict_tells_apart_what_the_bytes_alone_do_not():
    torch = pytest.importorskip("torch")
    w = torch.arange(6, dtype=torch.float32)
    key = hash_state_dict(_StateDict({"w": w}))
    assert hash_state_dict(_StateDict({"w": w.clone()})) == key
    assert hash_state_dict(_StateDict({"v": w})) != key  # name
    assert hash_state_dict(_StateDict({"w": w.reshape(2, 3)})) != key  # shape, same bytes
    assert hash_state_dict(_StateDict({"w": w.view(torch.int32)})) != key  # dtype, same bytes
    # Insertion order does not matter; non-contiguous tensors hash as their values.
    m = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    a = hash_state_dict(_StateDict({"a": m.t(), "b": w}))
    assert a == hash_state_dict(_StateDict({"b": w, "a": m.t().contiguous()}))
    bf16 = hash_state_dict(_StateDict({"w": w.to(torch.bfloat16)}))
    assert bf16 != key and bf16 == hash_state_dict(_StateDict({"w": w.to(torch.bfloat16)}))


class _OnDevice:
    """A tensor on an accelerator: usable only once copied to the host with ``.to("cpu")``."""

    def __init__(self, tensor):
        self._tensor = tensor

    def detach(self):
        return self

    def to(self, device):
        assert device == "cpu", f"copied to {device!r}, not to the host"
        return self._tensor


def test_hash_state_dict_copies_device_tensors_to_the_host():
    torch = pytest.importorskip("torch")
    w = torch.arange(6, dtype=torch.float32)
    assert hash_state_dict(_StateDict({"w": _OnDevice(w)})) == hash_state_dict(_StateDict({"w": w}))


# --- fingerprint ----------------------------------------------------------------

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=6,
)


@FAST
@given(st.dictionaries(st.text(max_size=4), JSON, max_size=5), st.integers(1, 64))
def test_fingerprint_is_a_prefix_of_the_sha256_of_sorted_json(parts, length):
    blob = json.dumps(parts, sort_keys=True).encode()
    assert fingerprint(parts) == hashlib.sha256(blob).hexdigest()[:16]
    assert fingerprint(parts, length) == hashlib.sha256(blob).hexdigest()[:length]
    assert fingerprint(dict(reversed(list(parts.items())))) == fingerprint(parts)  # key order is irrelevant


@FAST
@given(st.dictionaries(st.text(max_size=4), JSON, min_size=1, max_size=5), st.data())
def test_fingerprint_changes_when_any_value_changes(parts, data):
    key = data.draw(st.sampled_from(sorted(parts)))
    changed = {**parts, key: [parts[key], "changed"]}
    assert fingerprint(changed) != fingerprint(parts)
    assert fingerprint({**parts, key + "'": parts[key]}) != fingerprint(parts)


def test_fingerprint_known_values_and_non_json_values():
    # Pinned: a change here silently invalidates (or worse, aliases) every cached artefact.
    assert fingerprint({}) == "44136fa355b3678a"
    assert (
        fingerprint({"torch": "2.13.0", "opset": 17})
        == hashlib.sha256(b'{"opset": 17, "torch": "2.13.0"}').hexdigest()[:16]
    )
    assert len(fingerprint({"a": 1}, length=64)) == 64
    assert fingerprint({"p": Path("/a/b")}) == fingerprint({"p": "/a/b"})  # default=str


# --- atomic writes -------------------------------------------------------------


def test_atomic_path_moves_the_file_into_place_only_on_success(tmp_path):
    target = tmp_path / "new" / "dir" / "result.json"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.parent.is_dir()
        assert tmp.name.startswith(".result.json.") and tmp.name.endswith(".tmp")
        assert tmp.exists() and not target.exists()
        tmp.write_text("done")
    assert target.read_text() == "done"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]


def test_atomic_path_keeps_the_old_file_and_cleans_up_on_failure(tmp_path):
    target = tmp_path / "engine.plan"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="^compile failed$"):
        with atomic_path(str(target)) as tmp:
            tmp.write_text("half")
            raise RuntimeError("compile failed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.plan"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.plan"]


def test_atomic_path_tolerates_a_body_that_removed_its_temporary(tmp_path):
    target = tmp_path / "x"
    with pytest.raises(FileNotFoundError):
        with atomic_path(target) as tmp:
            tmp.unlink()
    assert list(tmp_path.iterdir()) == []


def test_write_json_atomic_writes_indented_json_in_insertion_order(tmp_path):
    target = tmp_path / "r" / "result.json"
    write_json_atomic(target, {"b": 1, "a": [1.5, None], "p": Path("/x")})
    assert target.read_text(encoding="utf-8") == '{\n  "b": 1,\n  "a": [\n    1.5,\n    null\n  ],\n  "p": "/x"\n}\n'
    write_json_atomic(str(target), {"é": "ü"})
    assert target.read_bytes() == '{\n  "\\u00e9": "\\u00fc"\n}\n'.encode()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
