"""The cpu vendor's second serving engine (``compiler: llamacpp``, inference/inference_engine/cpu/llamacpp.py)
through run.py, and the rule that says when vLLM's CPU build cannot run (``_vllm_cpu_support.py``).

The end-to-end tests start the real llama.cpp server from its own venv (``INFERPERF_LLAMACPP_PYTHON``,
default the repo's .venv-llamacpp, with the converter's llama.cpp source in its ``src/llama.cpp``, which
``scripts/vendor_venvs.sh llamacpp`` makes, and scripts/test.sh, so CI, too) and are skipped, with how to make one,
where it is absent (under CI=true that skip fails: tests/conftest.py CI_SKIPS does not declare it).
The failure lines that need no llama.cpp run everywhere. In MODE docker (configs/host_llamacpp_docker.yaml)
the case runs in the engine's own image, docker_images/cpu/llamacpp/, where llama.cpp is built from source: that
test runs where the image is cached, or builds it with INFERPERF_BUILD_LLAMACPP_IMAGE=1, and is skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.infra.docker_session import docker_client  # noqa: F401 - a session fixture
from tests.infra.served_llm import (
    case_record,
    group_gone,
    run_case,
    served_in_its_image,
    tree,  # noqa: F401 - a fixture
)

LLAMACPP_PYTHON = os.environ.get("INFERPERF_LLAMACPP_PYTHON", str(REPO / ".venv-llamacpp" / "bin" / "python"))
LLAMACPP_HOW = (
    f"no llama.cpp at {LLAMACPP_PYTHON} (set INFERPERF_LLAMACPP_PYTHON): bash scripts/vendor_venvs.sh llamacpp "
    "makes .venv-llamacpp (llama.cpp compiled from llama-cpp-python's sdist: about 4 min of 2 cores the first time)"
)
LLAMACPP = ["compiler=llamacpp", f"llamacpp_python={LLAMACPP_PYTHON}"]


def llamacpp_ready() -> bool:
    if not Path(LLAMACPP_PYTHON).is_file():
        return False
    source = Path(LLAMACPP_PYTHON).parent.parent / "src" / "llama.cpp"
    if not (source / "convert_hf_to_gguf.py").is_file():
        return False
    done = subprocess.run([LLAMACPP_PYTHON, "-c", "import llama_cpp, torch, transformers"], capture_output=True)
    return done.returncode == 0


@pytest.fixture(scope="module")
def has_llamacpp() -> None:
    if not llamacpp_ready():
        pytest.skip(LLAMACPP_HOW)


def server_pid(tmp_path: Path) -> int:
    (found,) = list((tmp_path / "result").rglob("llamacpp_server.pid"))
    return int(found.read_text())


# ---- the real server, end to end --------------------------------------------------------------
def test_the_case_served_by_llamacpp_end_to_end(has_llamacpp, tree, tmp_path):  # noqa: F811
    done = run_case(tree, tmp_path, *LLAMACPP)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(next((tmp_path / "result").rglob("result.json")).read_text())
    llm = result["llm"]
    assert llm["table"] == [] and llm["server"] == [] and llm["model"]["vocab"] < 32000  # the tokenizer's size
    assert [row["concurrency"] for row in llm["serving"]] == [1, 2]
    for row in llm["serving"]:
        assert row["completed"] == row["requests"] >= 8 and row["failed"] == 0 and row["errors"] == {}
        out, rate = (row["throughput"][key]["value"] for key in ("output_tokens_per_s", "requests_per_s"))
        assert out > 0 and 0 < row["ttft_ms"]["p50"] <= row["e2e_ms"]["p50"]
        # a stream carries no usage: one event a token. Both rates are of one window, so their ratio is the
        # tokens a completed request gave. llama-cpp-python 0.3.36 gives more than max_tokens when its limit
        # splits a multi-byte character (its own usage says 24 for 16), so "16" is a floor, not a count; a
        # request cut short by the next would bring the mean under it (a split character mid-stream is one
        # event for its tokens, hence 15).
        assert row["token_source"] == ["events"] and (row["input_length"], row["output_length"]) == (32, 16)
        assert row["input_tokens"] is None  # no usage, no tokenizer: the prompt's tokens are not known
        per_request = row["output_tokens"] / row["completed"]
        assert out / rate == pytest.approx(per_request, rel=1e-9)
        assert 15 <= per_request < 32
    greedy = llm["greedy"]
    assert greedy["positions"] == 2 * 8 and greedy["passed"] and greedy["share"] >= 0.99
    served = llm["served_by"]
    assert served["server"].startswith("llama-cpp-python 0.3.") and served["ready_s"] > 0
    assert "llama_cpp.server" in served["command"] and "llama_cpp.Llama" in served["greedy_tokens_from"]
    assert result["*p_inference_core(qps)"] > 0  # FlagPerf's prefill pass
    assert result["cache"]["onnx"]["format"] == "gguf" and result["cache"]["onnx"]["status"] in ("miss", "hit")
    convert_log = Path(result["cache"]["onnx"]["path"]) / "convert.log"
    assert "vocabulary checked" in convert_log.read_text()
    log = next((tmp_path / "result").rglob("llamacpp_server.log")).read_text(errors="replace")
    assert "POST /v1/completions" in log and " 422 " not in log  # every request taken
    # the prompts' text re-tokenises to at most the 32 ids it came from (their plain text: about 43)
    seen = [int(m) for m in re.findall(r"prompt eval time = .*/\s*(\d+) tokens", log)]
    assert seen and max(seen) <= 32 and statistics.median(seen) >= 30
    assert group_gone(server_pid(tmp_path))
    gguf = served["command"][served["command"].index("--model") + 1]  # the server's and the greedy process's file
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert not [line for line in ps.splitlines() if gguf in line], "a llama.cpp process outlived the case"


def test_a_server_killed_mid_run_fails_the_case_in_one_line(has_llamacpp, tree, tmp_path):  # noqa: F811
    """A real SIGKILL to the llama.cpp server once it serves: the case fails naming the server's exit, and no
    llama.cpp process is left (the server's group, and the greedy process beside it)."""
    proc = run_case(tree, tmp_path, *LLAMACPP, "serving_requests=400", popen=True)
    try:
        deadline = time.monotonic() + 400
        log = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((tmp_path / "result").rglob("llamacpp_server.log"))
            log = found[0] if found else None
            if log is not None and "POST /v1/completions" in log.read_text(errors="replace"):
                break
            time.sleep(0.2)
        assert log is not None and proc.poll() is None, "the server never answered a completion"
        pid = server_pid(tmp_path)
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-2000:] + err[-2000:]
    record = case_record(tmp_path)
    assert record["status"] == "failed" and record["failed_step"] == "engine_inference"
    assert "the llama.cpp server exited with status -9" in record["error"] and "\n" not in record["error"]
    assert "Traceback" not in err
    assert group_gone(pid)
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert not [line for line in ps.splitlines() if "_llamacpp_greedy.py" in line and str(tree) in line]


def test_a_tokenizer_the_converter_cannot_name_fails_the_export_in_one_line(has_llamacpp, tree, tmp_path):  # noqa: F811
    """A byte-level BPE with a prefix space is not GPT-2's pre-tokenizer: llama.cpp's converter does not know its
    hash and the GPT-2 exception does not apply, so the export fails in one line and caches nothing."""
    from tokenizers import pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    from benchmarks.llama.pytorch.weights import train_tokenizer

    folder = tmp_path / "prefix-space-llama"
    tokenizer = train_tokenizer(512)
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2)
    config = LlamaConfig(**shape, num_key_value_heads=2, vocab_size=len(tokenizer), bos_token_id=0, eos_token_id=1)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    cached = sorted((tree / "onnxs").glob("llama_gguf_*"))
    done = run_case(tree, tmp_path, *LLAMACPP, f"weight_dir={folder}")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    record = case_record(tmp_path)
    assert record["status"] == "failed" and record["failed_step"] == "onnx_export", record
    assert f"the GGUF conversion of {folder} failed" in record["error"] and "\n" not in record["error"]
    assert "does not know this tokenizer's BPE pre-tokenizer" in record["error"]
    assert "Traceback" not in done.stderr
    assert sorted((tree / "onnxs").glob("llama_gguf_*")) == cached  # nothing half-written kept


# ---- failure lines that need no llama.cpp ----------------------------------------------------------
def test_a_python_without_llama_cpp_is_one_line_naming_the_key(tree, tmp_path):  # noqa: F811
    done = run_case(tree, tmp_path, "compiler=llamacpp", f"llamacpp_python={sys.executable}")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "llamacpp_python" in line]
    assert len(lines) == 1 and "llama_cpp (llama-cpp-python) cannot be imported there" in lines[0]
    assert "Traceback" not in done.stderr and not list((tmp_path / "result").rglob("result.json"))


def test_a_missing_converter_source_is_one_line_naming_the_key(tree, tmp_path):  # noqa: F811
    python = tmp_path / "python-with-llama-cpp"
    python.write_text('#!/bin/sh\nif [ "$1" = "-c" ]; then echo 0.3.36; exit 0; fi\nexit 1\n')
    python.chmod(0o755)
    missing = tmp_path / "no-llama.cpp-here"
    done = run_case(tree, tmp_path, "compiler=llamacpp", f"llamacpp_python={python}", f"llamacpp_source={missing}")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "llamacpp_source" in line]
    assert len(lines) == 1 and str(missing) in lines[0] and "convert_hf_to_gguf.py" in lines[0]
    assert "Traceback" not in done.stderr and not list((tmp_path / "result").rglob("result.json"))


def test_a_bad_context_size_is_one_line_naming_the_key(tree, tmp_path):  # noqa: F811
    done = run_case(tree, tmp_path, "compiler=llamacpp", "llamacpp_n_ctx=0")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "llamacpp_n_ctx" in line]
    assert len(lines) == 1 and "must be a positive integer, got 0" in lines[0]
    assert "Traceback" not in done.stderr


# ---- when vLLM's CPU build cannot run ----------------------------------------------------------------
ZEN3 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma bmi2\n"
ZEN4 = ZEN3.replace("bmi2", "bmi2 avx512f avx512bw avx512_bf16")
SANDY_BRIDGE = "processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx aes\n"
GRAVITON = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"
OLD_ARM = "processor\t: 0\nFeatures\t: fp evtstrm crc32\n"
Z15 = "vendor_id       : IBM/S390\nfeatures\t: esan3 zarch stfle msa ldisp eimm dfp edat highgprs te vx vxd vxe gs\n"
Z14 = Z15.replace(" vxe gs", " gs")


@pytest.mark.parametrize(
    "machine, cpuinfo, needs",
    [
        ("x86_64", ZEN3, None),
        ("x86_64", ZEN4, None),
        ("x86_64", SANDY_BRIDGE, "needs AVX2 (x86-64); this CPU lacks it ('avx2' not in /proc/cpuinfo)"),
        ("aarch64", GRAVITON, None),
        ("aarch64", OLD_ARM, "needs NEON (AArch64); this CPU lacks it ('asimd' not in /proc/cpuinfo)"),
        ("s390x", Z15, None),
        ("s390x", Z14, "needs VXE (z15 or later) (s390x); this CPU lacks it"),
        ("ppc64le", "processor\t: 0\ncpu\t\t: POWER9\n", "has no variant for this CPU's architecture (ppc64le"),
        ("x86_64", "", "needs AVX2"),  # no flags line at all: nothing shows AVX2
    ],
)
def test_the_fallback_rule_names_what_the_cpu_lacks(machine, cpuinfo, needs):
    from inference_engine.cpu._vllm_cpu_support import vllm_cpu_blocker

    line = vllm_cpu_blocker(machine, cpuinfo)
    if needs is None:
        assert line is None
    else:
        assert (
            line is not None
            and needs in line
            and "\n" not in line
            and line.endswith("use compiler: llamacpp (llama.cpp's server, inference/inference_engine/cpu/llamacpp.py)")
        )


def test_the_rule_reads_this_machines_cpuinfo(tmp_path):
    from inference_engine.cpu._vllm_cpu_support import this_cpu_blocker

    assert this_cpu_blocker(tmp_path / "absent") is None  # unreadable: not judged
    fake = tmp_path / "cpuinfo"
    fake.write_text(SANDY_BRIDGE if os.uname().machine == "x86_64" else "")
    assert this_cpu_blocker(fake) is not None


def test_compiler_vllm_on_a_cpu_without_avx2_stops_in_one_line_naming_the_fallback(tree, monkeypatch, tmp_path):  # noqa: F811
    """vllm.py's preflight asks the rule before anything else is tried (here a CPU without AVX2, read from a
    fake /proc/cpuinfo): one ConfigError line naming the key and the fallback, before vLLM is imported."""
    from common.errors import ConfigError
    from contract.config.load import load_case_config
    from inference_engine.cpu import _vllm_cpu_support, vllm

    fake = tmp_path / "cpuinfo"
    fake.write_text(SANDY_BRIDGE)
    monkeypatch.setattr(_vllm_cpu_support.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(vllm, "this_cpu_blocker", lambda: _vllm_cpu_support.this_cpu_blocker(fake))
    config = load_case_config(
        str(tree), "llama", "pytorch", "cpu", str(tmp_path), str(tmp_path), {"compiler": "vllm"}, check_device=False
    )
    with pytest.raises(ConfigError) as raised:
        vllm.preflight(config)
    line = str(raised.value)
    assert "key 'compiler' is 'vllm': vLLM's CPU build needs AVX2 (x86-64); this CPU lacks it" in line
    assert "use compiler: llamacpp" in line and "\n" not in line and "vllm_version" not in config.extra


# ---- MODE docker: the case in the engine's own image ------------------------------------------------
BUILD_ENV = "INFERPERF_BUILD_LLAMACPP_IMAGE"


@pytest.mark.docker
@pytest.mark.slow
def test_mode_docker_runs_the_case_in_the_llamacpp_image_end_to_end(tree, tmp_path, docker_client):  # noqa: F811
    """host_llamacpp_docker.yaml through run.py: the engine's IMAGE (docker_images/cpu/llamacpp/) is the one built or
    reused; the checkpoint is converted to GGUF by the image's converter, llama.cpp's server starts inside the
    container, serves, passes the greedy check, and stops."""
    result = served_in_its_image(
        tree, tmp_path, docker_client, "host_llamacpp_docker.yaml", "llamacpp", BUILD_ENV, "about 12-15 min on 2 cores"
    )
    served = result["llm"]["served_by"]
    assert served["server"] == "llama-cpp-python 0.3.36" and "llama_cpp.server" in served["command"]
    assert result["cache"]["onnx"]["format"] == "gguf" and result["*p_inference_core(qps)"] > 0  # converted in there
    log = next((tmp_path / "result").rglob("llamacpp_server.log")).read_text(errors="replace")
    assert "POST /v1/completions" in log and " 422 " not in log
