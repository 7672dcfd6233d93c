"""The llama case for real on CPU: a tiny random-weight Llama through run_inference.py and
run.py on ONNX Runtime GenAI (the GenAI build cached and reused), the greedy-agreement
check catching an engine that perturbs its logits, the nvidia engine's code on CPU, and
a weight_dir without its tokenizer or config (one line, exit 2).

Cost: one checkpoint and one GenAI build for the whole module (the ``first_run``
fixture; the later runs and the in-process engines reuse them), short cells and a
p50-bound server row (the figures are not the point here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml

from contract.llm_base import eos_token_ids
from tests.conftest import copy_inference_tree, local_host_yaml, run_py

pytest.importorskip("onnxruntime_genai", reason="pip install -r inference/benchmarks/llama/pytorch/requirements.txt")

TINY = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
    max_position_embeddings=256,
)
# A short run: 2 cells, one server rate judged at p50 (p90 would need 64 requests), loose precision.
FAST = [
    "input_lengths=[16]",
    "output_length=4",
    "batch_sizes=[1,2]",
    "min_query_count=4",
    "min_duration_s=0.1",
    "max_duration_s=5",
    "precision=0.5",
    "settle_max_s=0",
    "server_target_qps=[20]",
    "server_requests=8",
    "server_bound_percentile=p50",
    "server_input_length=[8,16]",
    "server_output_length=[2,4]",
    "latency_precision=0.99",
    "greedy_tokens=8",
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of inference/ whose random Llama is tiny, and a data dir with the MMLU-style sample."""
    root = tmp_path_factory.mktemp("llama")
    perf = copy_inference_tree(root / "inference")
    params = perf / "configs" / "llama" / "parameters.yaml"
    values = yaml.safe_load(params.read_text())
    values.update(random_model=TINY, tokenizer_vocab=400, synthetic_prompts=6, max_prompt_tokens=200)
    params.write_text(yaml.safe_dump(values))
    from benchmarks.llama.pytorch.prepare import prepare_llama

    prepare_llama(root / "data")
    return perf


def run_case(perf: Path, log: Path, *sets: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "run_inference.py",
        "--perf_dir",
        ".",
        "--data_dir",
        str(perf.parent / "data"),
        "--log_dir",
        str(log),
    ]
    command += ["--vendor", "cpu", "--case", "llama", "--framework", "pytorch"]
    chosen = {item.split("=", 1)[0]: item for item in (*FAST, *sets)}  # a later item replaces a FAST one
    for item in chosen.values():
        command += ["--set", item]
    return subprocess.run(command, cwd=perf, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def first_run(tree, tmp_path_factory) -> dict:
    """The module's one cold run: it builds the random checkpoint and the GenAI model that the later
    runs and engines reuse."""
    log = tmp_path_factory.mktemp("first")
    done = run_case(tree, log)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((log / "result.json").read_text())


def test_case_end_to_end_through_run_inference(first_run):
    result = first_run
    llm = result["llm"]
    assert [(c["batch_size"], c["input_length"], c["output_length"]) for c in llm["table"]] == [(1, 16, 4), (2, 16, 4)]
    for cell in llm["table"]:
        assert cell["ttft_ms"]["p50"] > 0 and cell["tpot_ms"]["p50"] > 0 and cell["output_tokens_per_s"] > 0
        assert cell["kv_cache_mib"] == pytest.approx(2 * 2 * 2 * 16 * 4 * cell["batch_size"] * 20 / 2**20)
        assert {"valid", "reasons"} <= set(cell["verdict"]) <= {"valid", "reasons", "not_judged"} and cell["precision"][
            "target"
        ] == 0.5
    server = llm["server"][0]
    assert server["target_qps"] == 20 and server["requests"] >= 8 and server["ttft_bound_met"] in (True, False, None)
    assert server["bound_percentile"] == "p50" and server["stop_reason"] in (  # any of the stop rule's
        "precision reached",
        "precision out of reach",  # given up early, as on a loaded machine (docs/measurement.md, "The stop rule")
        "max_duration_s reached",
    )
    assert llm["greedy"]["share"] == 1.0 and llm["greedy"]["positions"] == 4 * 8 and result["numeric"]["passed"]
    assert result["accuracy_note"] == "random weights" and result["infer_average_acc"] is None
    assert result["flops"] > 0 and result["*p_inference_core(qps)"] > 0  # prompt tokens/s, FlagPerf's prefill figure
    assert result["cache"]["onnx"]["status"] == "miss" and result["cache"]["onnx"]["format"] == "onnxruntime-genai"
    folder = Path(result["cache"]["onnx"]["path"])
    assert (folder / "genai_config.json").is_file() and (folder / "genai_config.json.sha256.json").is_file()


@pytest.mark.parametrize("drop", ["tokenizer.json", "config.json"])
def test_weight_dir_without_tokenizer_or_config_is_one_line_exit_2(tree, tmp_path, drop):
    broken = tmp_path / "ckpt"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "llama", **TINY}))
    (broken / "tokenizer.json").write_text("{}")
    (broken / drop).unlink()
    done = run_case(tree, tmp_path / "log", f"weight_dir={broken}")
    assert done.returncode == 2
    failure = json.loads((tmp_path / "log" / "failure.json").read_text())
    assert failure["exit_code"] == 2 and failure["step"] == "init" and "weight_dir" in failure["error"]
    assert ("no tokenizer" if drop == "tokenizer.json" else "config.json: no such file") in failure["error"]
    assert "Traceback" not in done.stderr and not (tmp_path / "log" / "result.json").exists()


def test_run_py_reuses_the_genai_build_and_the_summary_shows_its_table(tree, first_run, tmp_path):
    """run.py on the first run's checkpoint named by weight_dir: the GenAI build is reused, and the
    MMLU questions are scored for real (a number, no note) since the weights are "given"."""
    checkpoint, folder = first_run["config"]["resolved_model_dir"], first_run["cache"]["onnx"]["path"]
    config = local_host_yaml(tmp_path, tree, tree.parent / "data", CASES={"llama:pytorch": str(tree.parent / "data")})
    sets = {item.split("=", 1)[0]: item for item in (*FAST, "server_target_qps=[]", f"weight_dir={checkpoint}")}
    done = run_py(tree, config, *[arg for item in sets.values() for arg in ("--set", item)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = next((tmp_path / "result").glob("run*"))
    result_file = next(run_dir.glob("llama:pytorch/*/result.json"))
    again = json.loads(result_file.read_text())
    assert again["cache"]["onnx"]["status"] == "hit" and again["cache"]["onnx"]["path"] == folder
    logs = "".join(p.read_text(errors="replace") for p in result_file.parent.rglob("*.log"))
    assert "reusing cached onnxruntime-genai model" in logs
    assert again["accuracy_note"] is None and 0.0 <= again["infer_average_acc"] <= 1.0
    assert again["infer_average_acc"] == again["val_average_acc"]  # the same greedy letters from both
    assert again["llm"]["server"] == []
    summary = json.loads((run_dir / "summary.json").read_text())
    (record,) = summary["results"]
    assert record["status"] == "success" and [c["batch_size"] for c in record["llm"]["table"]] == [1, 2]
    table = (run_dir / "summary.md").read_text()
    assert "LLM generation" in table and "TTFT p50 ms" in table and "greedy tokens agree" in table
    page = (run_dir / "report.html").read_text()
    assert "LLM TTFT and TPOT vs batch size" in page and "LLM throughput-latency frontier" in page
    assert "LLM TTFT and TPOT vs batch size: no data" not in page


# ---- the greedy-agreement check, on a real GenAI engine --------------------------------------
@pytest.fixture(scope="module")
def genai(first_run):
    """The first run's tiny random checkpoint as the torch model, its GenAI folder's genai_config.json,
    and the engine class."""
    import torch
    from transformers import AutoModelForCausalLM

    from inference_engine.cpu import onnxruntime_genai as og_engine

    entry = str(Path(first_run["cache"]["onnx"]["path"]) / "genai_config.json")
    model = AutoModelForCausalLM.from_pretrained(
        first_run["config"]["resolved_model_dir"], local_files_only=True, dtype=torch.float32
    ).eval()
    config = types.SimpleNamespace(origin={}, get=lambda key, default=None: default)
    return entry, model, og_engine.InferModel, config


def _reference(model):
    from benchmarks.llama.pytorch.model import reference_logits

    return reference_logits(model, None)


def test_greedy_agreement_catches_an_engine_that_perturbs_its_logits(genai):
    from contract.tolerances import tolerances_for
    from tools.checks.generation import check_generation

    entry, model, engine_class, config = genai

    class Perturbed(engine_class):
        """Adds noise of a tenth of the logits' spread before GenAI picks the token."""

        def step(self, state):
            logits = np.asarray(state.generator.get_logits(), dtype=np.float32)
            noise = np.random.default_rng(state.generator.token_count()).normal(
                0.0, 0.1 * logits.std(), size=logits.shape
            )
            state.generator.set_logits((logits + noise).astype(np.float32))
            return super().step(state)

    prompts = np.random.default_rng(0).integers(3, 400, size=(4, 16))
    args = (prompts, 16, "fp32", tolerances_for("fp32"), 0.99, eos_token_ids(model.config.to_dict()))
    greedy, numeric, reasons = check_generation(engine_class(config, entry, None), _reference(model), *args)
    assert greedy["share"] == 1.0 and greedy["passed"] and numeric["passed"] and reasons == []
    greedy, _, reasons = check_generation(Perturbed(config, entry, None), _reference(model), *args)
    assert greedy["share"] < 0.9 and not greedy["passed"]
    assert any(r.startswith("greedy agreement") and "below the target 99%" in r for r in reasons)


def test_nvidia_llm_engine_code_runs_on_cpu_and_needs_a_gpu_for_cuda(genai):
    """The nvidia engine (static KV cache) on CPU, uncompiled: the same greedy tokens as the
    framework model; with device cuda on a machine without a GPU, one line at preflight."""
    from common.errors import ConfigError
    from contract.tolerances import tolerances_for
    from inference_engine.nvidia import inductor_llm
    from tools.checks.generation import check_generation

    _, model, _, _ = genai
    keys = {"llm_compile": False, "llm_cache_block": 32}
    config = types.SimpleNamespace(
        device="cpu", fp16=False, origin={}, get=lambda key, default=None: keys.get(key, default)
    )
    engine = inductor_llm.InferModel(config, None, model)
    prompts = np.random.default_rng(1).integers(3, 400, size=(3, 20))
    eos = eos_token_ids(model.config.to_dict())
    greedy, numeric, reasons = check_generation(
        engine, _reference(model), prompts, 12, "fp32", tolerances_for("fp32"), 0.99, eos
    )
    assert greedy["share"] == 1.0 and numeric["passed"] and reasons == []
    assert engine.kv_cache_positions(3, 20 + 12) == 3 * 32  # the static cache's bucket
    gpu = types.SimpleNamespace(device="cuda", origin={}, get=lambda key, default=None: default)
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the no-GPU message cannot be provoked")
    with pytest.raises(ConfigError, match=r"compiler 'inductor_llm' with device 'cuda' needs a CUDA GPU") as info:
        inductor_llm.preflight(gpu)
    assert "\n" not in str(info.value)


@pytest.mark.gpu
def test_nvidia_llm_engine_on_cuda_compiled(genai):
    """Never run here (no GPU): fp16, the decode step compiled with CUDA graphs, against the
    framework model in fp16 on the same GPU; later queries of the same shape compile nothing."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    from contract.tolerances import tolerances_for
    from inference_engine.nvidia import inductor_llm
    from tools.checks.generation import check_generation

    _, model, _, _ = genai
    keys = {"inductor_mode": "reduce-overhead", "llm_compile": True, "llm_cache_block": 64}
    config = types.SimpleNamespace(
        device="cuda", fp16=True, origin={}, get=lambda key, default=None: keys.get(key, default)
    )
    inductor_llm.preflight(config)
    engine = inductor_llm.InferModel(config, None, model)
    prompts = np.random.default_rng(2).integers(3, 400, size=(4, 24))
    eos = eos_token_ids(model.config.to_dict())
    greedy, numeric, reasons = check_generation(
        engine, _reference(engine.model), prompts, 16, "fp16", tolerances_for("fp16"), 0.98, eos
    )
    assert greedy["passed"] and numeric["passed"], reasons
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    for _ in range(2):
        engine.generate(prompts, 16)
    assert counters["stats"]["unique_graphs"] == graphs  # a query of a shape seen before compiles nothing


def test_prepare_writes_the_mmlu_layout(tmp_path):
    from benchmarks.llama.pytorch.prepare import prepare_llama

    target = prepare_llama(tmp_path)
    assert sorted(p.name for p in (target / "test").iterdir()) == ["arithmetic_test.csv", "geography_test.csv"]
    shutil.rmtree(target)
