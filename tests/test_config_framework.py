"""contract.config.load_case_config: the framework name and the keys a config may not set
(mutation testing, docs/testing.md; the case files are those of tests/test_config_keys.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from common.errors import ConfigError
from contract.config import load_case_config
from tests.infra.case_config import BASE


@pytest.fixture
def root(tmp_path) -> Path:
    case = tmp_path / "inference" / "configs" / "toy"
    (case / "vendor_config").mkdir(parents=True)
    (case / "configurations.yaml").write_text(textwrap.dedent(BASE))
    (case / "parameters.yaml").write_text("weights: /w.pth\n")
    return tmp_path / "inference"


def test_framework_is_the_name_before_the_first_underscore(root):
    config = load_case_config(str(root), "toy", "pytorch_2.1_cu121", "acme", "/d", "/l")
    assert (config.framework, config.framework_full) == ("pytorch", "pytorch_2.1_cu121")
    config = load_case_config(str(root), "toy", "pytorch", "acme", "/d", "/l")
    assert (config.framework, config.framework_full) == ("pytorch", "pytorch")


@pytest.mark.parametrize(
    "key, message",
    [
        ("framework_full", "key 'framework_full' is set by the framework and may not be configured"),
        ("_fields", "key '_fields' is a reserved name and cannot be read as config._fields; rename it"),
        ("_asdict", "key '_asdict' is a reserved name and cannot be read as config._asdict; rename it"),
    ],
)
def test_keys_a_config_may_not_set(root, key, message):
    with pytest.raises(ConfigError) as info:
        load_case_config(str(root), "toy", "pytorch", "acme", "/d", "/l", overrides={key: 1})
    assert str(info.value) == f"command line (--set): {message}"
