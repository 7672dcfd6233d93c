"""What the served-LLM vendor tests share (tests/test_vllm_vendor.py, tests/test_llamacpp_vendor.py): a copy
of inference/ with short MMLU-style prompts (``tree``), run.py on the llama case with a short serving plan
(``FAST``, ``run_case``), the case's record, a server's process group gone, and the engine's own image in
MODE docker (``served_in_its_image``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_inference_tree, local_host_yaml, run_py
from tests.infra.docker_session import assert_nothing_left

# A short run: two load steps, short prompts, loose precision.
FAST = [
    "compiler=vllm",
    "serving_concurrency=[1,2]",
    "serving_requests=8",
    "serving_input_length=32",
    "serving_output_length=16",
    "serving_warmup=1",
    "input_lengths=[32]",
    "output_length=8",
    "greedy_prompts=2",
    "greedy_tokens=8",
    "precision=0.5",
    "max_duration_s=20",
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of inference/ with the MMLU-style sample (short prompts)."""
    root = tmp_path_factory.mktemp("vllm")
    perf = copy_inference_tree(root / "inference")
    params = perf / "configs" / "llama" / "parameters.yaml"
    values = yaml.safe_load(params.read_text())
    values.update(synthetic_prompts=4, few_shots=1, max_prompt_tokens=200)
    params.write_text(yaml.safe_dump(values))
    from benchmarks.llama.pytorch.prepare import prepare_llama

    prepare_llama(root / "data")
    return perf


def run_case(tree: Path, tmp_path: Path, *sets: str, **popen) -> subprocess.CompletedProcess | subprocess.Popen:
    config = local_host_yaml(tmp_path, tree, tree.parent / "data", CASES={"llama:pytorch": str(tree.parent / "data")})
    chosen = {item.split("=", 1)[0]: item for item in (*FAST, *sets)}
    args = [arg for item in chosen.values() for arg in ("--set", item)]
    if popen:
        command = [sys.executable, "run.py", "--config", str(config), *args]
        return subprocess.Popen(command, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return run_py(tree, config, *args)


def group_gone(pid: int, timeout: float = 20.0) -> bool:
    """Whether no process is left in the server's process group (its leader's pid), polled for ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def case_record(tmp_path: Path) -> dict:
    summary = json.loads(next((tmp_path / "result").glob("run*/summary.json")).read_text())
    (record,) = summary["results"]
    return record


def docker_yaml(tree: Path, tmp_path: Path, shipped: str = "host_vllm_docker.yaml") -> Path:
    """configs/<shipped> (host_vllm_docker.yaml by default), with this test's tree, data, results and remote
    workdir."""
    config = yaml.safe_load((tree / "configs" / shipped).read_text())
    config.update(
        FLAGPERF_PATH=str(tree),
        FLAGPERF_LOG_PATH=str(tmp_path / "result"),
        REMOTE_WORKDIR=str(tmp_path / "remote"),
        CASES={"llama:pytorch": str(tree.parent / "data")},
    )
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def image_tag(config_path: Path, sets: list[str]) -> str:
    """The tag run.py builds or reuses for this run (utils/executors/docker.py::image_spec), as run.py checks it."""
    from entry.run_config import load_run_config
    from utils.cli.args import parse_args
    from utils.executors.docker import image_spec

    config = load_run_config(parse_args(["--config", str(config_path), *sets]))
    return image_spec(config, "localhost").tag


def served_in_its_image(tree, tmp_path, client, shipped: str, compiler: str, build_env: str, fresh: str) -> dict:
    """run.py with configs/<shipped> and FAST (``compiler=<compiler>``) in MODE docker: the engine's own image
    (``inferperf/cpu-<compiler>``) is the one built or reused, not the framework's, and the case passes with the
    greedy check on 16 positions over two load steps, nothing left. Skipped, naming the tag, where that image is not
    built and ``build_env`` is unset (a fresh build takes ``fresh``). Returns result.json."""
    from utils.executors.images import _exists

    config = docker_yaml(tree, tmp_path, shipped)
    chosen = {item.split("=", 1)[0]: item for item in (*FAST, f"compiler={compiler}")}
    sets = [arg for item in chosen.values() for arg in ("--set", item)]
    tag = image_tag(config, sets)
    assert tag.startswith(f"inferperf/cpu-{compiler}:")
    if not _exists(client, tag) and not os.environ.get(build_env):
        pytest.skip(
            f"the {compiler} image {tag} is not built on this engine, and a fresh build takes {fresh}: set "
            f"{build_env}=1 to build it here (or run configs/{shipped} once)"
        )
    done = run_py(tree, config, *sets, timeout=3600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert f"image {tag}" in out and "inferperf/cpu-pytorch" not in out
    result = json.loads(next((tmp_path / "result").rglob("result.json")).read_text())
    llm = result["llm"]
    assert llm["served_by"]["command"][0].startswith("/opt/venv/bin/python")
    greedy = llm["greedy"]
    assert greedy["positions"] == 2 * 8 and greedy["passed"] and greedy["share"] >= 0.99
    assert [row["concurrency"] for row in llm["serving"]] == [1, 2]
    assert all(row["completed"] == row["requests"] and row["failed"] == 0 for row in llm["serving"])
    assert_nothing_left(client, tmp_path / "remote")
    return result
