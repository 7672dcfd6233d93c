"""The digits case: real data prepared from scikit-learn, a CNN trained and
cached on first use, real held-out accuracy, and the ONNX export."""

from __future__ import annotations

import hashlib
import os
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from loguru import logger

import benchmarks.digits.pytorch as case
from benchmarks.digits.pytorch.dataloader import load_split
from benchmarks.digits.pytorch.model import DigitsCNN, cache_key, train
from benchmarks.digits.pytorch.prepare import prepare_digits, write_npz
from benchmarks.digits.pytorch.synthetic import make_synthetic_digits
from common.errors import DataError
from contract.settings import VALIDATION_PASS

CONFIG_DIR = Path(__file__).resolve().parents[1] / "inference" / "configs" / "digits"


def load_yaml(name: str) -> dict:
    return yaml.safe_load((CONFIG_DIR / name).read_text())


def make_config(data_dir: Path, cache_dir: Path, **overrides) -> types.SimpleNamespace:
    values = {**load_yaml("configurations.yaml"), **load_yaml("parameters.yaml")}
    values.update(
        data_dir=str(data_dir),
        cache_dir=str(cache_dir),
        device="cpu",
        seed=0,
        onnx_opset=17,
        export_onnx_path=str(cache_dir / "digits.onnx"),
        log_freq=0,
    )
    values.update(overrides)
    return types.SimpleNamespace(**values)


@pytest.fixture(scope="module")
def real_data(tmp_path_factory) -> Path:
    pytest.importorskip("sklearn")
    out = tmp_path_factory.mktemp("digits")
    prepare_digits(str(out))
    return out


@pytest.fixture(scope="module")
def trained(real_data, tmp_path_factory):
    """(config, model, log lines) of the first, training create_model call."""
    cache = tmp_path_factory.mktemp("onnxs")
    config = make_config(real_data, cache)
    messages: list[str] = []
    handler = logger.add(lambda m: messages.append(str(m)), level="INFO")
    try:
        model = case.create_model(config)
    finally:
        logger.remove(handler)
    return config, model, messages


# --- data --------------------------------------------------------------------


def test_prepare_writes_a_stratified_deterministic_split(real_data, tmp_path):
    from sklearn.datasets import load_digits

    with np.load(real_data / "digits.npz") as archive:
        arrays = {k: archive[k] for k in archive.files}
    assert arrays["x_train"].shape == (1437, 1, 8, 8) and arrays["x_test"].shape == (360, 1, 8, 8)
    assert arrays["x_train"].dtype == np.float32 and arrays["y_test"].dtype == np.int64
    assert arrays["x_train"].min() >= 0.0 and arrays["x_train"].max() == 1.0
    totals = np.bincount(load_digits().target, minlength=10)
    test_counts = np.bincount(arrays["y_test"], minlength=10)
    assert np.all(np.abs(test_counts - totals * 0.2) <= 1)
    assert np.array_equal(test_counts + np.bincount(arrays["y_train"], minlength=10), totals)

    again = Path(prepare_digits(str(tmp_path)))
    assert again.read_bytes() == (real_data / "digits.npz").read_bytes()


def test_dataloader_serves_the_test_split_in_order(tmp_path):
    make_synthetic_digits(str(tmp_path), train=20, test=37)
    loader = case.build_dataloader(make_config(tmp_path, tmp_path))
    batches = list(loader)
    assert [len(y) for _, y in batches] == [16, 16, 5]
    assert batches[0][0].shape == (16, 1, 8, 8) and batches[0][0].dtype == torch.float32
    _, y_test = load_split(str(tmp_path), "test")
    assert torch.equal(torch.cat([y for _, y in batches]), y_test)


def test_missing_npz_names_the_file_and_the_prepare_command(tmp_path):
    with pytest.raises(DataError, match=r"nowhere/digits\.npz: no such file; .*benchmarks\.digits\.pytorch\.prepare"):
        case.build_dataloader(make_config(tmp_path / "nowhere", tmp_path))


def test_corrupt_npz_is_a_data_error(tmp_path):
    (tmp_path / "digits.npz").write_bytes(b"garbage" * 100)
    with pytest.raises(DataError, match=r"digits\.npz: cannot read"):
        case.build_dataloader(make_config(tmp_path, tmp_path))


def test_npz_without_the_expected_arrays_is_a_data_error(tmp_path):
    write_npz(str(tmp_path / "digits.npz"), {"x_train": np.zeros((2, 1, 8, 8), np.float32)})
    with pytest.raises(DataError, match=r"missing arrays \['y_train', 'x_test', 'y_test'\]"):
        case.build_dataloader(make_config(tmp_path, tmp_path))


def test_npz_with_wrong_shapes_is_a_data_error(tmp_path):
    arrays = {k: np.zeros((3, 1, 8, 8), np.float32) for k in ("x_train", "x_test")}
    arrays.update(y_train=np.zeros(3, np.int64), y_test=np.zeros(2, np.int64))
    write_npz(str(tmp_path / "digits.npz"), arrays)
    with pytest.raises(DataError, match=r"x_test \(3, 1, 8, 8\) / y_test \(2,\)"):
        case.build_dataloader(make_config(tmp_path, tmp_path))


# --- training and the weight cache -----------------------------------------------


def test_trained_model_reaches_real_held_out_accuracy(trained):
    config, model, messages = trained
    assert not model.training
    assert any("digits: trained on 1437 images" in m for m in messages)
    result = case.model_forward(model, case.build_dataloader(config), case.evaluator, config)
    assert result.phase == "validation" and result.samples == 360 * result.passes and result.passes >= config.repeat
    assert result.accuracy >= 0.95


def test_second_create_model_loads_the_cache(trained, caplog_loguru):
    config, model, _ = trained
    cached = list(Path(config.cache_dir, "weights").glob("digits_*.pt"))
    assert len(cached) == 1 and len(cached[0].stem) == len("digits_") + 16
    before = (cached[0].stat().st_mtime_ns, hashlib.sha256(cached[0].read_bytes()).hexdigest())

    again = case.create_model(config)
    assert any("loaded cached weights" in r["message"] for r in caplog_loguru)
    assert not any("trained on" in r["message"] for r in caplog_loguru)
    assert (cached[0].stat().st_mtime_ns, hashlib.sha256(cached[0].read_bytes()).hexdigest()) == before
    for key, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], value)


def test_cache_key_covers_data_and_hyper_parameters(tmp_path):
    make_synthetic_digits(str(tmp_path / "a"), seed=0)
    make_synthetic_digits(str(tmp_path / "b"), seed=1)
    hp = {"train_epochs": 15, "learning_rate": 0.01, "train_batch_size": 32, "weight_decay": 0.0, "seed": 0}
    base = cache_key(str(tmp_path / "a" / "digits.npz"), hp)
    assert base == cache_key(str(tmp_path / "a" / "digits.npz"), dict(hp))
    assert base != cache_key(str(tmp_path / "b" / "digits.npz"), hp)
    assert base != cache_key(str(tmp_path / "a" / "digits.npz"), {**hp, "learning_rate": 0.02})
    assert base != cache_key(str(tmp_path / "a" / "digits.npz"), {**hp, "seed": 1})


def test_training_is_deterministic(tmp_path):
    make_synthetic_digits(str(tmp_path), train=200, test=10)
    x, y = load_split(str(tmp_path), "train")
    hp = {"train_epochs": 2, "learning_rate": 0.01, "train_batch_size": 32, "weight_decay": 0.0, "seed": 0}
    first, second = train(x, y, hp).state_dict(), train(x, y, hp).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.are_deterministic_algorithms_enabled()


def test_unreadable_cache_entry_is_retrained(tmp_path, caplog_loguru):
    make_synthetic_digits(str(tmp_path), train=100, test=10)
    config = make_config(tmp_path, tmp_path, train_epochs=1)
    case.create_model(config)
    [cached] = (tmp_path / "weights").glob("digits_*.pt")
    cached.write_bytes(b"not a checkpoint")
    case.create_model(config)
    assert any("failed its checksum" in r["message"] and "evicted" in r["message"] for r in caplog_loguru)
    assert torch.load(cached, weights_only=True).keys() == DigitsCNN().state_dict().keys()


# --- export and engine path --------------------------------------------------------


def test_exported_onnx_matches_torch_and_the_engine_path_agrees(trained):
    import onnx
    import onnxruntime as ort

    config, model, _ = trained
    path = case.export_model(model, config)
    assert path == config.export_onnx_path and os.path.isfile(path)
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    assert [i.name for i in proto.graph.input] == ["input"] and [o.name for o in proto.graph.output] == ["output"]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    x_test, _ = load_split(config.data_dir, "test")
    for batch in (1, 3):
        with torch.no_grad():
            expected = model(x_test[:batch]).numpy()
        actual = session.run(None, {"input": x_test[:batch].numpy()})[0]
        assert actual.shape == (batch, 10)
        assert np.abs(actual - expected).max() < 1e-4

    def infer_model(inputs):
        return [torch.from_numpy(session.run(None, {"input": inputs[0].numpy()})[0])], 0.0

    loader = case.build_dataloader(config)
    # One pass each (the paths agreeing is the point; how long to measure is tests/test_precision.py's).
    once = types.SimpleNamespace(**{**vars(config), **VALIDATION_PASS})
    framework = case.model_forward(model, loader, case.evaluator, once)
    engine = case.engine_forward(infer_model, loader, case.evaluator, once)
    assert engine.phase == "inference" and engine.samples == 360 and engine.passes == config.repeat == 1
    assert engine.accuracy == pytest.approx(framework.accuracy)


# --- configuration -------------------------------------------------------------------


def test_config_files_have_the_expected_keys_and_no_overlap():
    configurations, parameters = load_yaml("configurations.yaml"), load_yaml("parameters.yaml")
    resnet50 = yaml.safe_load((CONFIG_DIR.parent / "resnet50" / "configurations.yaml").read_text())
    # resnet50 writes out min_query_count (the framework's 64); digits leaves it to the default. Both ask
    # the ±10 % the 2-core machine reaches (docs/measurement.md, "The shipped cases").
    assert set(configurations) == set(resnet50) - {"min_query_count"} and "min_query_count" not in configurations
    assert configurations["precision"] == resnet50["precision"] == 0.10
    assert not set(configurations) & set(parameters)
    assert (configurations["batch_size"], configurations["input_size"], configurations["num_workers"]) == (16, 64, 0)


def test_configured_flops_are_twice_the_model_macs():
    model = DigitsCNN().eval()
    macs = 0

    def count(module, _inputs, output):
        nonlocal macs
        if isinstance(module, torch.nn.Conv2d):
            macs += output.numel() * module.in_channels * module.kernel_size[0] * module.kernel_size[1]
        elif isinstance(module, torch.nn.Linear):
            macs += output.numel() * module.in_features

    for m in model.modules():
        m.register_forward_hook(count)
    with torch.no_grad():
        model(torch.zeros(1, 1, 8, 8))
    factor, value = str(load_yaml("configurations.yaml")["flops"]).split("*")
    assert float(factor) * float(value) == pytest.approx(2 * macs)
