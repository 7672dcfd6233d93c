"""The resnet50 case: torchvision-compatible weights, the ImageNet-val loader,
the framework forward and the ONNX export."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

import benchmarks.resnet50.pytorch as case
from benchmarks.resnet50.pytorch.dataloader import MEAN, STD, ImageFolderDataset, preprocess
from benchmarks.resnet50.pytorch.model import ResNet50
from benchmarks.resnet50.pytorch.synthetic import make_synthetic_imagenet
from common.errors import ConfigError, DataError

CONFIG_DIR = Path(__file__).resolve().parents[1] / "inference" / "configs" / "resnet50"
TORCHVISION_PARAMS = 25_557_032


def load_yaml(name: str) -> dict:
    return yaml.safe_load((CONFIG_DIR / name).read_text())


def make_config(tmp_path: Path, **overrides) -> types.SimpleNamespace:
    values = {**load_yaml("configurations.yaml"), **load_yaml("parameters.yaml")}
    values.update(
        batch_size=2,
        num_workers=0,
        data_dir=str(tmp_path / "data"),
        device="cpu",
        cache_dir=str(tmp_path),
        seed=0,
        onnx_opset=17,
        export_onnx_path=str(tmp_path / "model.onnx"),
        warmup=0,
        log_freq=0,
    )
    values.update(overrides)
    return types.SimpleNamespace(**values)


def torchvision_resnet50_shapes() -> dict[str, tuple]:
    """The state_dict of torchvision.models.resnet50(), written out from its architecture."""
    shapes: dict[str, tuple] = {"conv1.weight": (64, 3, 7, 7)}

    def bn(prefix: str, n: int) -> None:
        for name in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{prefix}.{name}"] = (n,)
        shapes[f"{prefix}.num_batches_tracked"] = ()

    bn("bn1", 64)
    inplanes = 64
    for i, (blocks, planes) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=1):
        for b in range(blocks):
            p = f"layer{i}.{b}"
            shapes[f"{p}.conv1.weight"] = (planes, inplanes, 1, 1)
            bn(f"{p}.bn1", planes)
            shapes[f"{p}.conv2.weight"] = (planes, planes, 3, 3)
            bn(f"{p}.bn2", planes)
            shapes[f"{p}.conv3.weight"] = (planes * 4, planes, 1, 1)
            bn(f"{p}.bn3", planes * 4)
            if b == 0:
                shapes[f"{p}.downsample.0.weight"] = (planes * 4, inplanes, 1, 1)
                bn(f"{p}.downsample.1", planes * 4)
            inplanes = planes * 4
    shapes["fc.weight"] = (1000, 2048)
    shapes["fc.bias"] = (1000,)
    return shapes


@pytest.fixture(scope="module")
def model() -> ResNet50:
    torch.manual_seed(0)
    return ResNet50().eval()


# --- model -----------------------------------------------------------------


def test_state_dict_names_and_shapes_match_torchvision(model):
    expected = torchvision_resnet50_shapes()
    actual = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert actual == expected
    assert len(actual) == 320
    assert actual["layer4.2.bn3.running_var"] == (2048,)
    assert actual["layer1.0.downsample.0.weight"] == (256, 64, 1, 1)
    assert actual["fc.weight"] == (1000, 2048)
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_PARAMS


def test_stride_sits_on_the_3x3_conv_like_torchvision_v1_5(model):
    assert model.layer2[0].conv1.stride == (1, 1)
    assert model.layer2[0].conv2.stride == (2, 2)
    assert model.layer2[0].downsample[0].stride == (2, 2)
    with torch.no_grad():
        assert model(torch.zeros(1, 3, 224, 224)).shape == (1, 1000)


def test_random_weights_are_deterministic_and_announced(tmp_path, caplog_loguru):
    a = case.create_model(make_config(tmp_path, seed=3))
    b = case.create_model(make_config(tmp_path, seed=3))
    assert not a.training
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert any(r["level"] == "WARNING" and "RANDOM" in r["message"] for r in caplog_loguru)


def test_torchvision_style_checkpoint_loads_strictly(tmp_path, caplog_loguru):
    torch.manual_seed(123)
    source = ResNet50()
    with torch.no_grad():
        source.layer4[2].bn3.running_var.uniform_(0.5, 2.0)
    (tmp_path / "data").mkdir()
    checkpoint = tmp_path / "data" / "resnet50-0676ba61.pth"
    torch.save(source.state_dict(), checkpoint)

    # A relative path is looked up under data_dir (the only folder mounted into the container).
    for weights in (str(checkpoint), checkpoint.name):
        loaded = case.create_model(make_config(tmp_path, weights=weights)).state_dict()
        for key, value in source.state_dict().items():
            assert torch.equal(loaded[key], value), key
    assert not any("RANDOM" in r["message"] for r in caplog_loguru)


def test_missing_weights_file_names_key_and_path(tmp_path):
    with pytest.raises(ConfigError, match=r"weights: .*nowhere\.pth: no such file"):
        case.create_model(make_config(tmp_path, weights=str(tmp_path / "nowhere.pth")))


def test_wrong_checkpoint_is_a_config_error(tmp_path):
    state = ResNet50().state_dict()
    del state["fc.bias"]
    path = tmp_path / "partial.pth"
    torch.save(state, path)
    with pytest.raises(ConfigError, match=r"partial\.pth: not a torchvision resnet50 .*fc\.bias"):
        case.create_model(make_config(tmp_path, weights=str(path)))


# --- data ------------------------------------------------------------------


def save(path: Path, pixels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8), "RGB").save(path)


def test_preprocess_resizes_shorter_side_and_centre_crops():
    # 512x256 keeps its size at resize 256; the 224 crop starts at x=144, so
    # its first 112 columns come from the black half and the rest from the white one.
    pixels = np.zeros((256, 512, 3), dtype=np.uint8)
    pixels[:, 256:] = 255
    out = preprocess(Image.fromarray(pixels, "RGB"), resize=256, crop=224)
    assert out.shape == (3, 224, 224) and out.dtype == torch.float32
    black, white = (0 - MEAN) / STD, (1 - MEAN) / STD
    assert np.allclose(out[:, :, 111].numpy(), black.reshape(3, 1), atol=1e-5)
    assert np.allclose(out[:, :, 112].numpy(), white.reshape(3, 1), atol=1e-5)
    # Portrait: the same along the other axis.
    out = preprocess(Image.fromarray(pixels.transpose(1, 0, 2).copy(), "RGB"), resize=256, crop=224)
    assert np.allclose(out[:, 111, :].numpy(), black.reshape(3, 1), atol=1e-5)
    assert np.allclose(out[:, 112, :].numpy(), white.reshape(3, 1), atol=1e-5)


def test_preprocess_scales_longer_side_like_torchvision():
    # 300x260 -> shorter side 256, longer int(256*300/260) = 295; a solid colour survives exactly.
    image = Image.new("RGB", (300, 260), (255, 0, 128))
    out = preprocess(image, resize=256, crop=224)
    expected = (np.array([255, 0, 128], dtype=np.float32).reshape(3, 1, 1) / 255 - MEAN) / STD
    assert out.shape == (3, 224, 224)
    assert np.allclose(out.numpy(), np.broadcast_to(expected, (3, 224, 224)), atol=1e-5)


def test_labels_follow_sorted_class_folders(tmp_path):
    data = tmp_path / "data"
    rng = np.random.default_rng(0)
    save(data / "zebra" / "a.jpg", rng.integers(0, 256, (40, 50, 3)))
    save(data / "ant" / "deep" / "b.PNG", rng.integers(0, 256, (60, 30, 3)))
    save(data / "ant" / "a.JPEG", rng.integers(0, 256, (30, 30, 3)))
    (data / "ant" / "notes.txt").write_text("not an image")
    (data / "empty_class").mkdir()

    dataset = ImageFolderDataset(str(data), resize=32, crop=24)
    assert dataset.classes == ["ant", "empty_class", "zebra"]
    assert [(Path(p).relative_to(data).as_posix(), y) for p, y in dataset.samples] == [
        ("ant/a.JPEG", 0),
        ("ant/deep/b.PNG", 0),
        ("zebra/a.jpg", 2),
    ]
    x, y = dataset[2]
    assert x.shape == (3, 24, 24) and y == 2


def test_dataloader_batches_synthetic_set(tmp_path):
    make_synthetic_imagenet(str(tmp_path / "data"), classes=3, per_class=2)
    loader = case.build_dataloader(make_config(tmp_path, batch_size=4, max_samples=5))
    batches = list(loader)
    assert [tuple(x.shape) for x, _ in batches] == [(4, 3, 224, 224), (1, 3, 224, 224)]
    assert torch.cat([y for _, y in batches]).tolist() == [0, 0, 1, 1, 2]
    assert batches[0][0].dtype == torch.float32


@pytest.mark.parametrize("workers", [0, 2])
def test_unreadable_image_is_a_data_error_naming_the_file(tmp_path, workers):
    make_synthetic_imagenet(str(tmp_path / "data"), classes=1, per_class=1)
    bad = tmp_path / "data" / "n00000000" / "broken.jpg"
    bad.write_bytes(b"this is not a jpeg" * 10)
    loader = case.build_dataloader(make_config(tmp_path, num_workers=workers))
    with pytest.raises(DataError, match=r"broken\.jpg: cannot read image"):
        list(loader)


def test_missing_or_empty_data_dir_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match=r"data_dir .*data: no such directory"):
        case.build_dataloader(make_config(tmp_path))
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError, match="no class subfolders"):
        case.build_dataloader(make_config(tmp_path))
    (tmp_path / "data" / "n01").mkdir()
    with pytest.raises(DataError, match="no images found"):
        case.build_dataloader(make_config(tmp_path))


def test_more_class_folders_than_num_classes_is_a_data_error(tmp_path):
    make_synthetic_imagenet(str(tmp_path / "data"), classes=3, per_class=1)
    with pytest.raises(DataError, match="3 class folders but parameters.yaml num_classes is 2"):
        case.build_dataloader(make_config(tmp_path, num_classes=2))


def test_crop_larger_than_resize_is_a_config_error(tmp_path):
    make_synthetic_imagenet(str(tmp_path / "data"), classes=1, per_class=1)
    with pytest.raises(ConfigError, match="parameters.yaml crop"):
        case.build_dataloader(make_config(tmp_path, resize=200, crop=224))


# --- forward and export ----------------------------------------------------


def test_model_forward_runs_through_timed_forward(tmp_path, model):
    make_synthetic_imagenet(str(tmp_path / "data"), classes=2, per_class=2)
    # One pass, asked for honestly (docs/measurement.md, "One pass"): no precision, tiny minimums, no settle phase.
    config = make_config(tmp_path, warmup=1, min_query_count=1, min_duration_s=0.0, precision=None, settle_max_s=0.0)
    result = case.model_forward(model, case.build_dataloader(config), case.evaluator, config)
    assert result.phase == "validation"
    assert (result.samples, result.batches, result.warmup_batches, result.passes) == (4, 2, 1, 1)
    assert result.precision["stop_reason"] == "minimums met" and result.precision["target"] is None
    assert 0.0 <= result.accuracy <= 1.0


def test_evaluator_is_top1():
    logits = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert case.evaluator([logits], torch.tensor([1, 0, 0, 1])) == pytest.approx(0.5)


def test_exported_onnx_matches_torch_at_two_batch_sizes(tmp_path, model):
    import onnx
    import onnxruntime as ort

    # A smaller crop keeps the test quick and checks that export follows parameters.yaml.
    config = make_config(tmp_path, resize=128, crop=112)
    path = case.export_model(model, config)
    assert path == config.export_onnx_path
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    assert [i.name for i in proto.graph.input] == ["input"]
    assert [o.name for o in proto.graph.output] == ["output"]
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [3, 112, 112]
    assert {o.domain: o.version for o in proto.opset_import}[""] == 17

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    torch.manual_seed(1)
    for batch in (1, 3):
        x = torch.randn(batch, 3, 112, 112)
        with torch.no_grad():
            expected = model(x).numpy()
        actual = session.run(None, {"input": x.numpy()})[0]
        assert actual.shape == (batch, 1000)
        scale = max(1.0, float(np.abs(expected).max()))
        assert np.abs(actual - expected).max() <= 1e-4 * scale


# --- configuration -----------------------------------------------------------


def test_config_files_have_the_expected_keys_and_no_overlap():
    configurations, parameters = load_yaml("configurations.yaml"), load_yaml("parameters.yaml")
    assert set(configurations) == {
        "batch_size",
        "input_size",
        "fp16",
        "compiler",
        "num_workers",
        "log_freq",
        "repeat",
        "warmup",
        "no_validation",
        "exist_onnx_path",
        "exist_compiler_path",
        "flops",
        "min_query_count",
        "precision",
        "graph_optimization_level",
    }
    assert set(parameters) == {"weights", "resize", "crop", "num_classes", "max_samples"}
    assert configurations["input_size"] == 3 * parameters["crop"] ** 2


def test_configured_flops_are_twice_the_model_macs(model):
    macs = 0

    def count(module, _inputs, output):
        nonlocal macs
        if isinstance(module, torch.nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1]
            macs += output.numel() * module.in_channels // module.groups * k
        elif isinstance(module, torch.nn.Linear):
            macs += output.numel() * module.in_features

    hooks = [m.register_forward_hook(count) for m in model.modules()]
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, 224, 224))
    finally:
        for hook in hooks:
            hook.remove()
    factor, value = str(load_yaml("configurations.yaml")["flops"]).split("*")
    assert float(factor) * float(value) == pytest.approx(2 * macs, rel=1e-3)
