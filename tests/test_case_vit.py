"""The vit case: torchvision-compatible names and sizes, a forward pass checked
against an independent ViT computation, checkpoints, the patch-size check, the
shared ImageNet loader, the ONNX export and the random-weights accuracy note."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch
import yaml

import benchmarks.vit.pytorch as case
from benchmarks.vit.pytorch import model as vit
from benchmarks.vit.pytorch.export import mha_fastpath_disabled
from common.errors import ConfigError
from contract.config.expr import parse_number

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "inference" / "configs" / "vit"
# A ViT small enough to build, run and export in well under a second.
TINY = vit.VitSize(patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)


def load_yaml(name: str) -> dict:
    return yaml.safe_load((CONFIG_DIR / name).read_text())


def make_config(tmp_path: Path, **overrides) -> types.SimpleNamespace:
    values = {**load_yaml("configurations.yaml"), **load_yaml("parameters.yaml")}
    values.update(
        batch_size=2,
        num_workers=0,
        data_dir=str(tmp_path / "data"),
        device="cpu",
        seed=0,
        onnx_opset=17,
        export_onnx_path=str(tmp_path / "vit.onnx"),
        warmup=0,
        log_freq=0,
        min_query_count=1,
        min_duration_s=0.0,
        precision=None,  # one pass over the data: these tests check the case, not the measurement (docs/measurement.md)
        settle_max_s=0.0,
        accuracy_note=None,
    )
    values.update(overrides)
    return types.SimpleNamespace(**values)


@pytest.fixture
def tiny(monkeypatch):
    """Register TINY as parameters.yaml model 't_8' for this test."""
    monkeypatch.setitem(vit.SIZES, "t_8", TINY)
    return "t_8"


def torchvision_vit_shapes(size: vit.VitSize, image: int = 224, classes: int = 1000) -> dict[str, tuple]:
    """The state_dict of torchvision.models.vit_*(), written out from its architecture."""
    d, m = size.hidden_dim, size.mlp_dim
    shapes = {
        "class_token": (1, 1, d),
        "conv_proj.weight": (d, 3, size.patch_size, size.patch_size),
        "conv_proj.bias": (d,),
        "encoder.pos_embedding": (1, (image // size.patch_size) ** 2 + 1, d),
    }
    for i in range(size.num_layers):
        p = f"encoder.layers.encoder_layer_{i}"
        shapes.update(
            {
                f"{p}.ln_1.weight": (d,),
                f"{p}.ln_1.bias": (d,),
                f"{p}.self_attention.in_proj_weight": (3 * d, d),
                f"{p}.self_attention.in_proj_bias": (3 * d,),
                f"{p}.self_attention.out_proj.weight": (d, d),
                f"{p}.self_attention.out_proj.bias": (d,),
                f"{p}.ln_2.weight": (d,),
                f"{p}.ln_2.bias": (d,),
                f"{p}.mlp.0.weight": (m, d),
                f"{p}.mlp.0.bias": (m,),
                f"{p}.mlp.3.weight": (d, m),
                f"{p}.mlp.3.bias": (d,),
            }
        )
    shapes.update(
        {
            "encoder.ln.weight": (d,),
            "encoder.ln.bias": (d,),
            "heads.head.weight": (classes, d),
            "heads.head.bias": (classes,),
        }
    )
    return shapes


# --- model ---------------------------------------------------------------------------


def test_vit_b_16_state_dict_matches_torchvision():
    torch.manual_seed(0)
    model = vit.VisionTransformer(vit.SIZES["b_16"])
    actual = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert actual == torchvision_vit_shapes(vit.SIZES["b_16"])
    assert len(actual) == 152
    # torchvision's documented parameter count for vit_b_16
    assert sum(p.numel() for p in model.parameters()) == 86_567_656


@pytest.mark.parametrize(
    "name, params",
    # torchvision's documented counts (vit_h_14's 633,470,440 is at its 518-pixel size;
    # at 224 the position embedding has 1113 fewer tokens of 1280: 632,045,800)
    [("b_32", 88_224_232), ("l_16", 304_326_632), ("l_32", 306_535_400), ("h_14", 632_045_800)],
)
def test_other_sizes_have_torchvision_parameter_counts(name, params):
    with torch.device("meta"):
        model = vit.VisionTransformer(vit.SIZES[name])
    assert sum(p.numel() for p in model.parameters()) == params


def reference_vit(state: dict, size: vit.VitSize, x: torch.Tensor) -> torch.Tensor:
    """ViT written from the paper with explicit matmuls, reading the torchvision-named tensors."""
    F = torch.nn.functional
    n, d, h = x.shape[0], size.hidden_dim, size.num_heads
    p = size.patch_size
    patches = F.unfold(x, kernel_size=p, stride=p).transpose(1, 2)  # [n, tokens, 3*p*p]
    tokens = patches @ state["conv_proj.weight"].reshape(d, -1).T + state["conv_proj.bias"]
    z = torch.cat([state["class_token"].expand(n, 1, d), tokens], dim=1) + state["encoder.pos_embedding"]
    for i in range(size.num_layers):
        s = {k.split(f"encoder_layer_{i}.", 1)[1]: v for k, v in state.items() if f"encoder_layer_{i}." in k}
        y = F.layer_norm(z, (d,), s["ln_1.weight"], s["ln_1.bias"], eps=1e-6)
        q, k, v = (y @ s["self_attention.in_proj_weight"].T + s["self_attention.in_proj_bias"]).chunk(3, dim=-1)
        heads = lambda t: t.reshape(n, -1, h, d // h).transpose(1, 2)  # noqa: E731
        attention = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) / (d // h) ** 0.5, dim=-1) @ heads(v)
        z = (
            z
            + attention.transpose(1, 2).reshape(n, -1, d) @ s["self_attention.out_proj.weight"].T
            + s["self_attention.out_proj.bias"]
        )
        y = F.layer_norm(z, (d,), s["ln_2.weight"], s["ln_2.bias"], eps=1e-6)
        y = F.gelu(y @ s["mlp.0.weight"].T + s["mlp.0.bias"]) @ s["mlp.3.weight"].T + s["mlp.3.bias"]
        z = z + y
    z = F.layer_norm(z, (d,), state["encoder.ln.weight"], state["encoder.ln.bias"], eps=1e-6)
    return z[:, 0] @ state["heads.head.weight"].T + state["heads.head.bias"]


def test_forward_matches_an_independent_vit_computation():
    torch.manual_seed(1)
    model = vit.VisionTransformer(TINY, image_size=32, num_classes=10).eval()
    state = {k: torch.randn_like(v) * 0.2 for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        ours = model(x)  # eval + no_grad: nn.MultiheadAttention's fused fast path
        expected = reference_vit(state, TINY, x)
        with mha_fastpath_disabled():
            composite = model(x)
    assert ours.shape == (3, 10)
    assert torch.allclose(ours, expected, atol=1e-4), (ours - expected).abs().max()
    assert torch.allclose(composite, expected, atol=1e-4)


def test_random_weights_are_announced_and_void_the_accuracy(tmp_path, tiny, caplog_loguru):
    config = make_config(tmp_path, model=tiny, crop=32, num_classes=10)
    a = case.create_model(config)
    b = case.create_model(make_config(tmp_path, model=tiny, crop=32, num_classes=10))
    assert config.accuracy_note == "random weights"
    assert not a.training
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert a.heads.head.weight.abs().sum() > 0  # not torchvision's all-zero head: logits carry numbers
    assert any(r["level"] == "WARNING" and "RANDOM" in r["message"] for r in caplog_loguru)


def test_resnet50_random_weights_set_the_accuracy_note_too(tmp_path):
    import benchmarks.resnet50.pytorch as resnet50

    config = types.SimpleNamespace(
        weights=None, num_classes=10, seed=0, device="cpu", fp16=False, data_dir=str(tmp_path), accuracy_note=None
    )
    resnet50.create_model(config)
    assert config.accuracy_note == "random weights"


def test_torchvision_style_checkpoint_loads_strictly(tmp_path, tiny, caplog_loguru):
    torch.manual_seed(5)
    source = vit.VisionTransformer(TINY, image_size=32, num_classes=10)
    (tmp_path / "data").mkdir()
    torch.save(source.state_dict(), tmp_path / "data" / "vit_t_8.pth")
    for weights in (str(tmp_path / "data" / "vit_t_8.pth"), "vit_t_8.pth"):  # relative: under data_dir
        config = make_config(tmp_path, model=tiny, crop=32, num_classes=10, weights=weights)
        loaded = case.create_model(config).state_dict()
        assert all(torch.equal(loaded[k], v) for k, v in source.state_dict().items())
        assert config.accuracy_note is None
    assert not any("RANDOM" in r["message"] for r in caplog_loguru)


def test_wrong_checkpoints_are_config_errors(tmp_path, tiny):
    state = vit.VisionTransformer(TINY, image_size=32, num_classes=10).state_dict()
    del state["heads.head.bias"]
    torch.save(state, tmp_path / "partial.pth")
    with pytest.raises(
        ConfigError, match=r"partial\.pth: not a torchvision vit_t_8 \(crop 32\) state_dict .*heads\.head\.bias"
    ):
        case.create_model(
            make_config(tmp_path, model=tiny, crop=32, num_classes=10, weights=str(tmp_path / "partial.pth"))
        )
    # a checkpoint for another image size: the position embedding does not fit
    torch.save(vit.VisionTransformer(TINY, image_size=48, num_classes=10).state_dict(), tmp_path / "at48.pth")
    with pytest.raises(ConfigError, match=r"shape mismatch in \['encoder\.pos_embedding'\]"):
        case.create_model(
            make_config(tmp_path, model=tiny, crop=32, num_classes=10, weights=str(tmp_path / "at48.pth"))
        )
    with pytest.raises(ConfigError, match=r"weights: .*nowhere\.pth: no such file"):
        case.create_model(make_config(tmp_path, model=tiny, crop=32, weights=str(tmp_path / "nowhere.pth")))


# --- configuration -------------------------------------------------------------------


def test_crop_not_divisible_by_the_patch_size_is_a_config_error(tmp_path):
    message = r"parameters\.yaml crop: 225 is not divisible by the patch size 16 of vit_b_16 \(e\.g\. 224 or 240\)"
    for step in (case.build_dataloader, case.create_model, lambda c: case.export_model(None, c)):
        with pytest.raises(ConfigError, match=message):
            step(make_config(tmp_path, crop=225))
    with pytest.raises(ConfigError, match=r"parameters\.yaml model: 'b_8' must be one of b_16, b_32, l_16, l_32, h_14"):
        case.create_model(make_config(tmp_path, model="b_8"))


def test_flops_match_the_vit_b_16_mac_count():
    tokens, d, mlp, layers = 197, 768, 3072, 12
    per_layer = tokens * (4 * d * d + 2 * d * mlp) + 2 * tokens**2 * d
    macs = 196 * d * (3 * 16 * 16) + layers * per_layer + d * 1000
    assert per_layer == 1_453_954_560
    assert parse_number(load_yaml("configurations.yaml")["flops"]) == pytest.approx(2 * macs, rel=1e-3)


def test_case_config_merges_for_the_cpu_vendor(tmp_path):
    from contract.config import load_case_config

    config = load_case_config(str(ROOT / "inference"), "vit", "pytorch", "cpu", str(tmp_path), str(tmp_path))
    assert (config.batch_size, config.num_workers, config.model, config.crop) == (1, 0, "b_16", 224)


# --- data, forward and export ---------------------------------------------------------


def test_loader_is_resnet50s_imagenet_folder_loader(tmp_path, tiny):
    from benchmarks.resnet50.pytorch.synthetic import make_synthetic_imagenet

    make_synthetic_imagenet(str(tmp_path / "data"), classes=2, per_class=3, size=(40, 36))
    config = make_config(tmp_path, model=tiny, resize=36, crop=32, num_classes=10, batch_size=4)
    loader = case.build_dataloader(config)
    x, y = next(iter(loader))
    assert x.shape == (4, 3, 32, 32) and y.tolist() == [0, 0, 0, 1]
    model = case.create_model(config)
    result = case.model_forward(model, loader, case.evaluator, config)
    assert result.samples == 6 and result.batches == 2


def test_export_traces_composite_attention_and_agrees_with_the_framework(tmp_path, tiny):
    import onnx
    import onnxruntime as ort

    config = make_config(tmp_path, model=tiny, crop=32, num_classes=10)
    model = case.create_model(config)
    before = torch.backends.mha.get_fastpath_enabled()
    path = case.export_model(model, config)
    assert torch.backends.mha.get_fastpath_enabled() == before  # restored for framework validation
    graph = onnx.load(path).graph
    assert [i.name for i in graph.input] == ["input"] and graph.input[0].type.tensor_type.shape.dim[
        0
    ].dim_param == "batch"
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = torch.randn(batch, 3, 32, 32)
        with torch.no_grad():
            expected = model(x)
        (out,) = session.run(None, {"input": x.numpy()})
        assert out.shape == (batch, 10)
        assert torch.allclose(torch.from_numpy(out), expected, atol=1e-4)
