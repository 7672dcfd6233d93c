"""Any ONNX model benchmarked without writing a case (benchmarks/onnx_model, docs/onnx_models.md).

Three real ONNX files are exported here: a CNN (torch.onnx.export, dynamic batch and
spatial axes), a BERT from Hugging Face transformers (input_ids, attention_mask,
token_type_ids: int64, dynamic batch and sequence) and an MLP whose weights live in
an external-data file (onnx.helper). Each runs end to end through run.py in MODE
local or run_inference.py, with the numeric check passing against ONNX Runtime on
CPU; bad input is one line, exit 2 and nothing written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from common.errors import ConfigError
from tests.conftest import copy_inference_tree, run_py

# Short measured phases: these tests check the path, not the figures.
FAST = ["min_duration_s=0.05", "min_query_count=8", "warmup=1", "synthetic_samples=16"]
VOCAB = 1000


def _require_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        reason = "transformers (a bert case requirement) is not installed: python -m utils.requirements install"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"[CI] {reason}", pytrace=False)
        pytest.skip(reason)


def export_cnn(path: Path) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    ).eval()
    axes = {"pixel_values": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        example = (torch.zeros(2, 3, 32, 32),)
        torch.onnx.export(
            model,
            example,
            str(path),
            input_names=["pixel_values"],
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def export_bert(path: Path) -> None:
    """A 2-layer BERT as Hugging Face's exporters give it: three int64 inputs of [batch, sequence]."""
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
    )

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel(config)

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(0)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {
        "last_hidden_state": {0: "batch", 1: "sequence"},
        "pooler_output": {0: "batch"},
    }
    ids = torch.ones(2, 16, dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Encoder().eval(),
            (ids, ids, torch.zeros_like(ids)),
            str(path),
            input_names=names,
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def onnx_model(nodes, inputs, outputs, initializers=()):
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def save_external_mlp(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 256)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((256, 8)).astype(np.float32), "w2")
    model = onnx_model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [w1, w2],
    )
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{path.stem}.weights",
        size_threshold=0,
    )


def save_string_model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    text = helper.make_tensor_value_info("text", TensorProto.STRING, ["batch"])
    out = helper.make_tensor_value_info("out", TensorProto.STRING, ["batch"])
    onnx.save(onnx_model([helper.make_node("Identity", ["text"], ["out"])], [text], [out]), str(path))


def save_static_batch_model(path: Path) -> None:
    """A fixed batch of 2 and, NHWC, dynamic spatial axes: [2, h, w, 3] -> ReduceMean over them."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, "h", "w", 3])
    y = helper.make_tensor_value_info("mean", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("ReduceMean", ["image"], ["mean"], axes=[1, 2], keepdims=0)
    onnx.save(onnx_model([node], [x], [y]), str(path))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    _require_transformers()
    folder = tmp_path_factory.mktemp("onnx_models")
    export_cnn(folder / "cnn.onnx")
    export_bert(folder / "bert.onnx")
    save_external_mlp(folder / "mlp.onnx")
    save_string_model(folder / "strings.onnx")
    save_static_batch_model(folder / "static.onnx")
    (folder / "notes.onnx").write_text("these are notes, not a model\n")
    zoo = {
        "model": "bert-onnx-fp32",
        # ByteMLPerf's path; found by its name beside the JSON
        "model_path": "general_perf/model_zoo/regular/open_bert/bert.onnx",
        "framework": "Onnx",
        "model_precision": "FP32",
        "inputs": "input_ids,attention_mask,token_type_ids",
        "outputs": "last_hidden_state,pooler_output",
        "input_shape": {"input_ids": [1, 24], "attention_mask": [1, 24], "token_type_ids": [1, 24]},
        "input_type": "LONG,LONG,LONG",
        "dataset_name": None,
        "max_batch_size": 4,
    }
    (folder / "bert-onnx-fp32.json").write_text(json.dumps(zoo, indent=4))
    return folder


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return copy_inference_tree(tmp_path_factory.mktemp("onnx_model_tree") / "inference")


def host_yaml(tmp_path: Path, perf: Path, cases: dict | None = None) -> Path:
    config = {
        "MODE": "local",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
        "HOSTS": ["127.0.0.1"],
        "CASES": cases or {"digits:pytorch": str(tmp_path)},
    }
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def sets(*items: str) -> list[str]:
    return [arg for item in (*FAST, *items) for arg in ("--set", item)]


def summary(tmp_path: Path) -> dict:
    files = sorted((tmp_path / "result").glob("run*/summary.json"))
    assert files, "no summary.json"
    return json.loads(files[-1].read_text())


def result_of(record: dict) -> dict:
    return json.loads((Path(record["log_dir"]) / "result.json").read_text())


def case_config(models: Path, **keys):
    """The onnx_model case's merged config, as the pipeline loads it."""
    from contract.config import load_case_config

    perf = Path(__file__).resolve().parents[1] / "inference"
    return load_case_config(str(perf), "onnx_model", "pytorch", "cpu", str(models), "-", keys)


# ---- units: the signature, the shapes, the values ---------------------------------------------
@pytest.mark.parametrize(
    "text, parsed",
    [
        ("input_ids:Nx128", {"input_ids": [None, 128]}),
        ("a:1x128,b:Nx3x224x224", {"a": [1, 128], "b": [None, 3, 224, 224]}),
        ("input:0:?x7", {"input:0": [None, 7]}),  # TensorFlow names hold ':'
    ],
)
def test_input_shapes_syntax(text, parsed):
    from benchmarks.onnx_model.inputs import parse_input_shapes

    assert parse_input_shapes(text, "here") == parsed


@pytest.mark.parametrize(
    "text", ["input_ids", "input_ids:", ":Nx3", "a:Nx0", "a:NxN", "a:Nx3x", "a:Nx2,a:Nx3", "a:Nx99999999", 12]
)
def test_malformed_input_shapes_are_one_line(text):
    from benchmarks.onnx_model.inputs import parse_input_shapes

    with pytest.raises(ConfigError, match=r"^here: key 'input_shapes' .*expected NAME:DxD"):
        parse_input_shapes(text, "here")


def test_bert_inputs_are_valid_tokens_ones_and_zeros(models):
    from benchmarks.onnx_model.describe import configure
    from benchmarks.onnx_model.pytorch.dataloader import build_dataloader
    from benchmarks.onnx_model.pytorch.model import OnnxRuntimeReference

    config = case_config(models, model_path="bert.onnx", batch_size=4)
    description = configure(config)
    ids, mask, segments = description.plans
    assert (ids.fill, ids.low, ids.high, ids.sample_shape) == (
        "integers",
        0,
        VOCAB,
        [128],
    )  # the vocabulary from the word-embedding Gather
    assert (mask.fill, segments.fill) == ("ones", "zeros")
    assert config.exist_onnx_path == str(models / "bert.onnx") and config.accuracy_note == "synthetic inputs"
    (batch_ids, batch_mask, batch_segments), index = next(iter(build_dataloader(config)))
    assert batch_ids.shape == (4, 128) and str(batch_ids.dtype) == "torch.int64"
    assert (
        0 <= int(batch_ids.min()) and int(batch_ids.max()) < VOCAB and len(set(batch_ids[:, :8].flatten().tolist())) > 8
    )
    assert bool((batch_mask == 1).all()) and bool((batch_segments == 0).all())
    assert not bool((batch_ids[0] == batch_ids[1]).all())  # distinct samples
    outputs, _ = OnnxRuntimeReference(config.exist_onnx_path)([batch_ids, batch_mask, batch_segments])
    assert [tuple(o.shape) for o in outputs] == [(4, 128, 32), (4, 32)]


def test_one_input_shape_sets_the_shared_symbol_for_the_others(models):
    from benchmarks.onnx_model.describe import describe

    plans = describe(case_config(models, model_path="bert.onnx", input_shapes="input_ids:Nx40")).plans
    assert [p.sample_shape for p in plans] == [[40], [40], [40]]
    with pytest.raises(
        ConfigError, match="dimension 'sequence' is 41 for input 'attention_mask' but 40 for input 'input_ids'"
    ):
        describe(case_config(models, model_path="bert.onnx", input_shapes="input_ids:Nx40,attention_mask:Nx41"))


def test_image_defaults_follow_the_layout(models, tmp_path):
    from benchmarks.onnx_model.describe import describe

    (cnn,) = describe(case_config(models, model_path="cnn.onnx")).plans
    assert cnn.sample_shape == [3, 224, 224] and cnn.fill == "uniform"
    static = describe(case_config(models, model_path="static.onnx", batch_size=2)).plans[0]
    assert (
        static.sample_shape == [224, 224, 3] and static.static_batch == 2
    )  # channel last: fixed at 3, spatial axes 224
    zoo = {"model_path": str(models / "static.onnx"), "input_shape": {"image": [1, 48, 64, 3]}, "layout": "NHWC"}
    (tmp_path / "static.json").write_text(json.dumps(zoo))
    assert describe(case_config(tmp_path, model_path="static.json", batch_size=2)).plans[0].sample_shape == [48, 64, 3]


def test_zoo_json_describes_the_model(models):
    from benchmarks.onnx_model.describe import describe

    description = describe(case_config(models, model_path="bert-onnx-fp32.json", batch_sizes=[1, 4]))
    assert description.signature.path == models / "bert.onnx"  # ByteMLPerf's path, found by its name beside the JSON
    assert [p.sample_shape for p in description.plans] == [[24], [24], [24]]
    with pytest.raises(
        ConfigError, match=r"key 'batch_sizes' asks for batch size 8, above bert-onnx-fp32.json's max_batch_size 4"
    ):
        describe(case_config(models, model_path="bert-onnx-fp32.json", batch_sizes=[1, 8]))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_path": "bert.pt"}, r"key 'model_path' names 'bert.pt', not an .onnx file"),
        ({"input_type": "LONG,LONG"}, r"key 'input_type' lists 2 types for 3 inputs"),
        ({"input_type": "LONG,LONG,QUATERNION"}, r"key 'input_type': 'QUATERNION' is not one of"),
        (
            {"input_shape": {"input_ids": [1, 24], "attention_mask": [1, 24], "segments": [1, 24]}},
            r"key 'inputs' and key 'input_shape' name different inputs",
        ),
        ({"layout": "CHWN"}, r"key 'layout' must be one of NCHW, NHWC"),
        ({"max_batch_size": 0}, r"key 'max_batch_size' must be a positive integer"),
    ],
)
def test_bad_zoo_json_names_its_key(models, tmp_path, change, message):
    from benchmarks.onnx_model.describe import describe

    zoo = {
        **json.loads((models / "bert-onnx-fp32.json").read_text()),
        "model_path": str(models / "bert.onnx"),
        **change,
    }
    (tmp_path / "zoo.json").write_text(json.dumps(zoo))
    with pytest.raises(ConfigError, match=message):
        describe(case_config(tmp_path, model_path="zoo.json"))


def test_static_batch_must_match_every_batch_size(models):
    from benchmarks.onnx_model.describe import describe

    with pytest.raises(
        ConfigError, match=r"key 'batch_size' asks for batch size 1, but input 'image' has its batch axis fixed at 2"
    ):
        describe(case_config(models, model_path="static.onnx"))
    with pytest.raises(ConfigError, match=r"key 'batch_sizes' asks for batch size 4"):
        describe(case_config(models, model_path="static.onnx", batch_size=2, batch_sizes=[2, 4]))


def test_positions_stay_below_their_table():
    from benchmarks.onnx_model.inputs import InputPlan
    from benchmarks.onnx_model.pytorch.dataloader import sample_values

    values = sample_values(InputPlan("position_ids", "int64", [2, 7], "positions", 0, 5), np.random.default_rng(0))
    assert values.tolist() == [[0, 1, 2, 3, 4, 0, 1]] * 2


# ---- end to end ---------------------------------------------------------------------------------
def test_run_py_model_cnn_and_external_data_with_a_batch_size_sweep(models, tree, tmp_path):
    proc = run_py(
        tree,
        host_yaml(tmp_path, tree),
        "--model",
        str(models / "cnn.onnx"),
        "--model",
        str(models / "mlp.onnx"),
        *sets("batch_sizes=[1,4]"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {r["case"]: r for r in summary(tmp_path)["results"]}
    assert set(records) == {"cnn.onnx", "mlp.onnx"}
    for name, record in records.items():
        assert record["status"] == "success" and record["framework"] == "pytorch"
        assert record["val_average_acc"] is None and record["accuracy_note"] == "synthetic inputs"
        assert [row["batch_size"] for row in record["performance"]] == [1, 4]
        assert record["numeric"]["passed"] is True, record["numeric"]
        result = result_of(record)
        assert result["case"] == "onnx_model" and result["cache"]["onnx"] == {
            "status": "user",
            "path": str(models / name),
        }
        assert Path(record["log_dir"]).parent.name == f"{name}:pytorch"
    assert records["mlp.onnx"]["numeric"]["outputs"][0]["shape"] == [1, 8]
    assert "| cnn.onnx:pytorch | 127.0.0.1 | success |" in proc.stdout
    assert "n/a (synthetic inputs)" in proc.stdout


def test_host_yaml_cases_run_bert_and_its_zoo_json(models, tree, tmp_path):
    cases = {str(models / "bert.onnx"): "pytorch", str(models / "bert-onnx-fp32.json"): "pytorch"}
    proc = run_py(tree, host_yaml(tmp_path, tree, cases), *sets("batch_size=2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {r["case"]: r for r in summary(tmp_path)["results"]}
    for name, seq in (("bert.onnx", 128), ("bert-onnx-fp32.json", 24)):
        record = records[name]
        assert record["status"] == "success", record["error"]
        numeric = record["numeric"]
        assert numeric["passed"] is True and [o["shape"] for o in numeric["outputs"]] == [[2, seq, 32], [2, 32]]
        plans = result_of(record)["config"]["model_inputs"]
        expected = [
            ("input_ids", "integers", VOCAB),
            ("attention_mask", "ones", None),
            ("token_type_ids", "zeros", None),
        ]
        assert [(p["name"], p["fill"], p["high"]) for p in plans] == expected


def test_run_inference_external_data_and_the_engine_cache(models, tree, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    save_external_mlp(folder / "ext.onnx")

    def run(log: str) -> dict:
        argv = [
            sys.executable,
            "run_inference.py",
            "--perf_dir",
            str(tree),
            "--data_dir",
            str(folder),
            "--log_dir",
            str(tmp_path / log),
        ]
        argv += [
            "--vendor",
            "cpu",
            "--case",
            "onnx_model",
            "--framework",
            "pytorch",
            "--set",
            "model_path=ext.onnx",
            *sets(),
        ]
        proc = subprocess.run(argv, cwd=tree, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:]
        return json.loads((tmp_path / log / "result.json").read_text())

    first = run("first")
    assert first["numeric"]["passed"] is True and first["cache"]["engine"]["status"] == "miss"
    assert "weights in ext.weights" in (tmp_path / "first" / "container.out.log").read_text()
    assert run("second")["cache"]["engine"]["status"] == "hit"
    weights = folder / "ext.weights"
    data = bytearray(weights.read_bytes())
    data[:4] = np.float32(7.0).tobytes()  # other weights, same model file: the engine must be rebuilt
    weights.write_bytes(bytes(data))
    third = run("third")
    assert third["cache"]["engine"]["status"] == "miss" and third["numeric"]["passed"] is True


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "{models}/notes.onnx"], r"notes.onnx is not an ONNX model \(DecodeError"),
        (
            ["--model", "{models}/strings.onnx"],
            r"strings.onnx: input 'text' has type string, which cannot be synthesised",
        ),
        (
            ["--model", "{models}/bert.onnx", "--set", "input_shapes=input_ids:Nx12x"],
            r"key 'input_shapes' entry 'input_ids:Nx12x'",
        ),
        (
            ["--model", "{models}/cnn.onnx", "--set", "input_shapes=pixel_values:Nx4x32x32"],
            r"'pixel_values' axis 1 is given as 4, but the model fixes it at 3",
        ),
        (["--model", "{models}/missing.onnx"], r"--model .*missing.onnx: model file .*missing.onnx: no such file"),
        (["--model", "{models}/static.onnx"], r"input 'image' has its batch axis fixed at 2"),
        (["--model", "{models}/cnn.onnx", "--cases", "digits"], r"--model and --cases cannot be combined"),
    ],
)
def test_bad_model_is_one_line_exit_2_nothing_written(models, tree, tmp_path, args, message):
    import re

    proc = run_py(tree, host_yaml(tmp_path, tree), *[a.format(models=models) for a in args], timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "result").exists() or not any((tmp_path / "result").iterdir())


def test_host_yaml_model_entries_are_checked(models, tree, tmp_path):
    from utils.host_config import load_host_config

    bad = {str(models / "bert.onnx"): "py torch"}
    with pytest.raises(
        ConfigError, match=r"key CASES entry '.*bert.onnx': must map the model file to a framework name"
    ):
        load_host_config(host_yaml(tmp_path, tree, bad), tree)
    twice = {str(models / "bert.onnx"): "pytorch", str(tmp_path / "bert.onnx"): "pytorch"}
    (tmp_path / "bert.onnx").write_bytes((models / "bert.onnx").read_bytes())
    with pytest.raises(ConfigError, match=r"two entries run as 'bert.onnx:pytorch'"):
        load_host_config(host_yaml(tmp_path, tree, twice), tree)
    relative = load_host_config(
        host_yaml(tmp_path, tree, {os.path.relpath(models / "cnn.onnx", tree): "pytorch"}), tree
    ).cases[0]
    assert (relative.case, relative.data_dir, relative.model, relative.key) == (
        "onnx_model",
        str(models),
        "cnn.onnx",
        "cnn.onnx:pytorch",
    )
    assert relative.overrides == ('model_path="cnn.onnx"',)
    # A zoo entry naming its file by onnx_model_path alone is a model, not a ByteMLPerf workload.
    (tmp_path / "only.json").write_text(
        json.dumps({"model": "bert-onnx-fp32", "onnx_model_path": str(models / "bert.onnx")})
    )
    zoo = load_host_config(host_yaml(tmp_path, tree, {str(tmp_path / "only.json"): "pytorch"}), tree).cases[0]
    assert (zoo.case, zoo.model) == ("onnx_model", "only.json")


def test_run_inference_bad_model_leaves_failure_json(models, tree, tmp_path):
    argv = [
        sys.executable,
        "run_inference.py",
        "--perf_dir",
        str(tree),
        "--data_dir",
        str(models),
        "--log_dir",
        str(tmp_path / "log"),
    ]
    argv += ["--vendor", "cpu", "--case", "onnx_model", "--framework", "pytorch", "--set", "model_path=strings.onnx"]
    proc = subprocess.run(argv, cwd=tree, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    failure = json.loads((tmp_path / "log" / "failure.json").read_text())
    assert failure["step"] == "init" and "input 'text' has type string" in failure["error"]
    assert not (tmp_path / "log" / "result.json").exists()


def test_config_must_name_the_model(models, tmp_path):
    from benchmarks.onnx_model.describe import describe

    with pytest.raises(ConfigError, match=r"key 'model_path' is required"):
        describe(case_config(models))
    with pytest.raises(ConfigError, match=r"key 'exist_onnx_path' is set by the onnx_model case"):
        describe(case_config(models, model_path="cnn.onnx", exist_onnx_path=str(models / "cnn.onnx")))
    with pytest.raises(ConfigError, match=r"key 'model_path': .*model.txt: no such file"):
        describe(case_config(models, model_path="model.txt"))
    (tmp_path / "zoo.json.bak").write_bytes((models / "bert-onnx-fp32.json").read_bytes())
    with pytest.raises(ConfigError, match=r"zoo.json.bak is not an ONNX model"):  # any name but .json is read as ONNX
        describe(case_config(tmp_path, model_path="zoo.json.bak"))


def test_inductor_refuses_a_framework_model_that_is_not_pytorch(models):
    from benchmarks.onnx_model.describe import configure
    from benchmarks.onnx_model.pytorch.model import create_model
    from common.errors import EngineError
    from inference_engine.nvidia.inductor import InferModel

    config = case_config(models, model_path="cnn.onnx")
    configure(config)
    with pytest.raises(
        EngineError, match=r"Inductor compiles a PyTorch model; this case's framework model is a OnnxRuntimeReference"
    ):
        InferModel(config, config.exist_onnx_path, create_model(config))


def test_pipeline_command_names_the_model_in_its_folder(models, tree, tmp_path):
    import threading

    from utils.executors.local import LocalSession
    from utils.host_config import load_host_config

    config = load_host_config(host_yaml(tmp_path, tree, {str(models / "cnn.onnx"): "pytorch"}), tree)
    config.overrides = ["min_duration_s=1"]
    argv = LocalSession(config, 0, "run", threading.Event()).pipeline_argv("/logs", config.cases[0])
    assert argv[argv.index("--data_dir") + 1] == str(models) and argv[argv.index("--case") + 1] == "onnx_model"
    assert argv[-4:] == ["--set", "min_duration_s=1", "--set", 'model_path="cnn.onnx"']
