"""Config merge rules (spec §3.2.1), typed values and safe number parsing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from common.errors import ConfigError
from contract.config import load_case_config
from contract.config.expr import parse_number

BASE = """
batch_size: 8
input_size: 150528
fp16: false
compiler: onnxruntime
num_workers: 0
log_freq: 10
repeat: 1
no_validation: false
exist_onnx_path: null
exist_compiler_path: null
flops: 2*4.1e9
"""


def make_tree(tmp_path: Path, base: str = BASE, params: str = "weights: null\n", vendor: str | None = None) -> Path:
    root = tmp_path / "inference"
    case = root / "configs" / "toy"
    (case / "vendor_config").mkdir(parents=True)
    (case / "configurations.yaml").write_text(textwrap.dedent(base))
    (case / "parameters.yaml").write_text(textwrap.dedent(params))
    if vendor is not None:
        (case / "vendor_config" / "acme_configurations.yaml").write_text(textwrap.dedent(vendor))
    return root


def load(root: Path, vendor: str = "acme"):
    return load_case_config(str(root), "toy", "pytorch", vendor, "/data", "/logs")


def test_merge_typed_values_and_parameters_as_attributes(tmp_path):
    config = load(make_tree(tmp_path, params="weights: /w.pth\nresize: 256\n"))
    assert config.batch_size == 8
    assert config.flops == pytest.approx(8.2e9)
    assert config.weights == "/w.pth"
    assert config.resize == 256
    assert config.warmup == 2  # framework default when not configured
    with pytest.raises(AttributeError):
        config.no_such_key


def test_key_in_configurations_and_parameters_is_an_error(tmp_path):
    root = make_tree(tmp_path, params="batch_size: 4\n")
    with pytest.raises(
        ConfigError, match=r"parameters\.yaml: key 'batch_size' is also defined in .*configurations\.yaml"
    ):
        load(root)


def test_vendor_new_key_warns_and_changed_key_logs_info(tmp_path, caplog_loguru):
    root = make_tree(tmp_path, vendor="batch_size: 16\nintra_op_num_threads: 2\n")
    config = load(root)
    assert config.batch_size == 16
    assert config.intra_op_num_threads == 2
    records = caplog_loguru
    assert any(r["level"] == "WARNING" and "intra_op_num_threads" in r["message"] for r in records)
    assert any(r["level"] == "INFO" and "'batch_size': 8 -> 16" in r["message"] for r in records)


def test_vendor_key_repeating_base_value_is_an_error(tmp_path):
    root = make_tree(tmp_path, vendor="batch_size: 8\n")
    with pytest.raises(ConfigError, match=r"acme_configurations\.yaml: key 'batch_size' repeats the value 8"):
        load(root)


def test_vendor_may_not_override_parameters(tmp_path):
    root = make_tree(tmp_path, vendor="weights: /other.pth\n")
    with pytest.raises(ConfigError, match=r"acme_configurations\.yaml: key 'weights' overrides .*parameters\.yaml"):
        load(root)


@pytest.mark.parametrize("key", ["data_dir", "vendor", "log_dir"])
def test_collision_with_command_line_key_is_an_error(tmp_path, key):
    root = make_tree(tmp_path, vendor=f"{key}: x\n")
    with pytest.raises(ConfigError, match=rf"key '{key}' collides with the command-line option --{key}"):
        load(root)


def test_host_yaml_key_in_case_config_is_an_error(tmp_path):
    root = make_tree(tmp_path, params="HOSTS: [a]\n")
    with pytest.raises(ConfigError, match="host.yaml key"):
        load(root)


@pytest.mark.parametrize(
    "line, message",
    [
        ("batch_size: 0", "key 'batch_size' must be a positive integer"),
        ("batch_size: 2.5", "key 'batch_size' must be a positive integer"),
        ("batch_size: true", "key 'batch_size' must be a positive integer"),
        ("fp16: yes please", "key 'fp16' must be true or false"),
        ("flops: __import__('os')", "key 'flops' .* may only contain numbers"),
        ("flops: -5", "key 'flops' must be a positive number"),
        ("repeat: 0", "key 'repeat' must be a positive integer"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, line, message):
    key = line.split(":")[0]
    base = "\n".join(l for l in BASE.splitlines() if not l.startswith(key + ":")) + f"\n{line}\n"
    with pytest.raises(ConfigError, match=rf"configurations\.yaml: {message}"):
        load(make_tree(tmp_path, base=base))


def test_missing_required_key(tmp_path):
    base = "\n".join(l for l in BASE.splitlines() if not l.startswith("compiler:"))
    with pytest.raises(ConfigError, match="required key 'compiler' is missing"):
        load(make_tree(tmp_path, base=base))


def test_no_validation_requires_exist_onnx_path(tmp_path):
    base = BASE.replace("no_validation: false", "no_validation: true")
    with pytest.raises(ConfigError, match="'no_validation' is true, so key 'exist_onnx_path' must name an ONNX file"):
        load(make_tree(tmp_path, base=base))


def test_duplicate_yaml_key_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="duplicate key 'fp16'"):
        load(make_tree(tmp_path, base=BASE + "fp16: true\n"))
    with pytest.raises(ConfigError, match=r"configurations\.yaml \(line \d+\): invalid YAML"):
        load(make_tree(tmp_path / "b", base=BASE + "oops: [unclosed\n"))


def test_unknown_case(tmp_path):
    root = make_tree(tmp_path)
    with pytest.raises(ConfigError, match="unknown case 'nope'"):
        load_case_config(str(root), "nope", "pytorch", "acme", "/d", "/l")


@pytest.mark.parametrize(
    "text, value",
    [
        ("4.12e9", 4.12e9),
        ("2*512*0.33e9", 2 * 512 * 0.33e9),
        ("(1+2)*3", 9.0),
        (7, 7.0),
        ("2**10", 1024.0),
        ("1_000", 1000.0),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abs(3)", "x*2", "'a'*3", "2**1000", "1/0", "", "[1]", True])
def test_parse_number_rejects(text):
    with pytest.raises(ValueError):
        parse_number(text)
