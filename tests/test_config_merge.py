"""contract.config: merge-rule properties and the typed-key checks, to the exact message.

tests/test_config.py covers the rules end to end through YAML files, one example
each; here ``merge_case_config`` and ``CaseConfig`` are driven directly, with
random mappings (hypothesis) for the merge rules, so that a changed rule, origin
or message fails a test (mutation-tested, see docs/testing.md).
"""

from __future__ import annotations

import copy
import pickle
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loguru import logger

from common.errors import ConfigError
from common.host_keys import HOST_KEYS
from contract.config import CLI_KEYS, REQUIRED_KEYS, CaseConfig, load_case_config, merge_case_config
from tests.conftest import TYPED_CASE_CONFIG as TYPED

FAST = settings(max_examples=40, deadline=None, derandomize=True)

BASE_PATH = Path("/perf/configs/toy/configurations.yaml")
PARAMS_PATH = Path("/perf/configs/toy/parameters.yaml")
VENDOR_PATH = Path("/perf/configs/toy/vendor_config/acme_configurations.yaml")

REQUIRED = {
    "batch_size": 8,
    "input_size": None,
    "fp16": False,
    "compiler": "onnxruntime",
    "num_workers": 0,
    "log_freq": 10,
    "repeat": 1,
    "no_validation": False,
    "exist_onnx_path": None,
    "exist_compiler_path": None,
}


def merge(base: dict, params: dict | None = None, vendor: dict | None = None):
    return merge_case_config(base, BASE_PATH, params or {}, PARAMS_PATH, vendor or {}, VENDOR_PATH)


class Logs:
    """Loguru records (level, message) for the duration of a ``with`` block."""

    def __enter__(self):
        self.records: list[tuple[str, str]] = []
        self._id = logger.add(
            lambda m: self.records.append((m.record["level"].name, m.record["message"])), level="DEBUG"
        )
        return self.records

    def __exit__(self, *exc):
        logger.remove(self._id)


# --- merge rules, as properties ----------------------------------------------

KEYS = st.sampled_from([f"k{i}" for i in range(12)] + ["weights", "threads", "warmup", "flops", "seed", "device"])
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2), st.text("ab", max_size=2))


@st.composite
def three_files(draw):
    """A valid (base, params, vendor) and the vendor keys that are new or changed."""
    base = dict(REQUIRED)
    base.update(draw(st.dictionaries(KEYS, VALUES, max_size=4)))
    params = draw(st.dictionaries(KEYS.filter(lambda k: k not in base), VALUES, max_size=4))
    changed = {}
    for key in draw(st.lists(st.sampled_from(sorted(base)), unique=True, max_size=4)):
        value = draw(VALUES.filter(lambda v, old=base[key]: not (v == old and type(v) is type(old))))
        changed[key] = value
    new = draw(st.dictionaries(KEYS.filter(lambda k: k not in base and k not in params), VALUES, max_size=3))
    vendor = dict(draw(st.permutations(list(changed.items()) + list(new.items()))))
    return base, params, vendor, changed, new


@FAST
@given(three_files())
def test_merge_is_base_then_parameters_then_vendor_and_origin_names_the_file(files):
    base, params, vendor, changed, new = files
    with Logs() as records:
        merged, origin = merge(base, params, vendor)
    assert merged == {**base, **params, **vendor}
    assert list(merged) == list({**base, **params, **vendor})
    assert origin == {
        **{key: str(BASE_PATH) for key in base},
        **{key: str(PARAMS_PATH) for key in params},
        **{key: str(VENDOR_PATH) for key in vendor},
    }
    # A new vendor key warns, a changed one is logged at info, nothing else is said.
    assert sorted(records) == sorted(
        [
            ("WARNING", f"{VENDOR_PATH}: adds key '{k}' = {v!r}, which configurations.yaml does not define")
            for k, v in new.items()
        ]
        + [("INFO", f"{VENDOR_PATH}: overrides '{k}': {base[k]!r} -> {v!r}") for k, v in changed.items()]
    )


@FAST
@given(three_files(), st.data())
def test_a_key_in_both_configurations_and_parameters_is_refused(files, data):
    base, params, _, _, _ = files
    shared = data.draw(st.lists(st.sampled_from(sorted(base)), unique=True, min_size=1, max_size=3))
    params = {**params, **{key: 1 for key in shared}}
    first = next(key for key in base if key in params)
    with pytest.raises(ConfigError) as info:
        merge(base, params)
    assert str(info.value) == f"{PARAMS_PATH}: key '{first}' is also defined in {BASE_PATH}"


@FAST
@given(three_files(), st.data())
def test_a_vendor_key_repeating_the_base_value_is_refused(files, data):
    base, params, vendor, _, _ = files
    key = data.draw(st.sampled_from(sorted(base)))
    vendor = {key: copy.deepcopy(base[key]), **{k: v for k, v in vendor.items() if k != key}}
    with pytest.raises(ConfigError) as info:
        merge(base, params, vendor)
    assert str(info.value) == (
        f"{VENDOR_PATH}: key '{key}' repeats the value {base[key]!r} of configurations.yaml; remove the no-op override"
    )


@FAST
@given(three_files(), st.data())
def test_a_vendor_key_overriding_a_parameter_is_refused(files, data):
    base, params, vendor, _, _ = files
    params = {**params, "weights_path": "/w.pth"}  # never a base key
    key = data.draw(st.sampled_from(sorted(params)))
    vendor = {key: "/other", **{k: v for k, v in vendor.items() if k != key}}
    with pytest.raises(ConfigError) as info:
        merge(base, params, vendor)
    assert str(info.value) == f"{VENDOR_PATH}: key '{key}' overrides {PARAMS_PATH}, which vendors may not change"


@FAST
@given(st.lists(st.sampled_from(REQUIRED_KEYS), unique=True, min_size=1))
def test_the_first_missing_required_key_is_named(missing):
    base = {key: value for key, value in REQUIRED.items() if key not in missing}
    first = next(key for key in REQUIRED_KEYS if key in missing)
    with pytest.raises(ConfigError) as info:
        merge(base)
    assert str(info.value) == f"{BASE_PATH}: required key '{first}' is missing"


@pytest.mark.parametrize(
    "old, new",
    [(1, True), (0, False), (1, 1.0), (8, "8"), (None, "null"), ([1], (1,))],
)
def test_equal_values_of_another_type_are_an_override_not_a_repeat(old, new):
    with Logs() as records:
        merged, origin = merge({**REQUIRED, "x": old}, vendor={"x": new})
    assert merged["x"] is new and origin["x"] == str(VENDOR_PATH)
    assert records == [("INFO", f"{VENDOR_PATH}: overrides 'x': {old!r} -> {new!r}")]


@pytest.mark.parametrize("where", ["base", "params", "vendor"])
@pytest.mark.parametrize("key", CLI_KEYS)
def test_command_line_keys_are_refused_in_each_file(where, key):
    files = {"base": dict(REQUIRED), "params": {}, "vendor": {}}
    files[where][key] = "x"
    path = {"base": BASE_PATH, "params": PARAMS_PATH, "vendor": VENDOR_PATH}[where]
    with pytest.raises(ConfigError) as info:
        merge(files["base"], files["params"], files["vendor"])
    assert str(info.value) == f"{path}: key '{key}' collides with the command-line option --{key}"


@pytest.mark.parametrize("where", ["base", "params", "vendor"])
@pytest.mark.parametrize("key", ["HOSTS", "CASES", "MODE", "REMOTE_WORKDIR"])
def test_host_yaml_keys_are_refused_in_each_file(where, key):
    files = {"base": dict(REQUIRED), "params": {}, "vendor": {}}
    files[where][key] = "x"
    path = {"base": BASE_PATH, "params": PARAMS_PATH, "vendor": VENDOR_PATH}[where]
    with pytest.raises(ConfigError) as info:
        merge(files["base"], files["params"], files["vendor"])
    assert str(info.value) == f"{path}: key '{key}' is a host.yaml key and may not appear in case configs"
    assert key in HOST_KEYS


# --- typed keys ---------------------------------------------------------------


def make(**overrides) -> CaseConfig:
    return CaseConfig(**{**TYPED, **overrides})


@pytest.mark.parametrize(
    "key, value, reason",
    [
        ("batch_size", 0, "must be a positive integer, got 0"),
        ("batch_size", -1, "must be a positive integer, got -1"),
        ("batch_size", 2.0, "must be a positive integer, got 2.0"),
        ("batch_size", True, "must be a positive integer, got True"),
        ("batch_size", "8", "must be a positive integer, got '8'"),
        ("input_size", 0, "must be a positive integer, got 0"),
        ("input_size", "1", "must be a positive integer, got '1'"),
        ("repeat", 0, "must be a positive integer, got 0"),
        ("onnx_opset", 0, "must be a positive integer, got 0"),
        ("num_workers", -1, "must be a non-negative integer, got -1"),
        ("num_workers", 1.5, "must be a non-negative integer, got 1.5"),
        ("num_workers", 1.0, "must be a non-negative integer, got 1.0"),
        ("num_workers", False, "must be a non-negative integer, got False"),
        ("num_workers", None, "must be a non-negative integer, got None"),
        ("log_freq", -5, "must be a non-negative integer, got -5"),
        ("warmup", -1, "must be a non-negative integer, got -1"),
        ("seed", "0", "must be a non-negative integer, got '0'"),
        ("fp16", 0, "must be true or false, got 0"),
        ("fp16", "true", "must be true or false, got 'true'"),
        ("no_validation", None, "must be true or false, got None"),
        ("compiler", "", "must be a name of letters, digits, '_' or '-', or null, got ''"),
        ("compiler", "  ", "must be a name of letters, digits, '_' or '-', or null, got '  '"),
        ("compiler", "a b", "must be a name of letters, digits, '_' or '-', or null, got 'a b'"),
        ("compiler", "trt/8", "must be a name of letters, digits, '_' or '-', or null, got 'trt/8'"),
        ("compiler", "_", "must be a name of letters, digits, '_' or '-', or null, got '_'"),
        ("compiler", "-", "must be a name of letters, digits, '_' or '-', or null, got '-'"),
        ("compiler", "_-", "must be a name of letters, digits, '_' or '-', or null, got '_-'"),
        ("compiler", 5, "must be a name of letters, digits, '_' or '-', or null, got 5"),
        ("exist_onnx_path", "", "must be a path or null, got ''"),
        ("exist_onnx_path", " ", "must be a path or null, got ' '"),
        ("exist_compiler_path", 5, "must be a path or null, got 5"),
        ("exist_compiler_path", False, "must be a path or null, got False"),
        ("flops", 0, "must be a positive number of FLOPs per sample, got 0"),
        ("flops", "0*1", "must be a positive number of FLOPs per sample, got '0*1'"),
        ("flops", -1.5, "must be a positive number of FLOPs per sample, got -1.5"),
        ("flops", float("nan"), "must be a positive number of FLOPs per sample, got nan"),
        ("flops", "x", "'x' may only contain numbers, + - * / ** and parentheses"),
        ("flops", True, "a boolean is not a number"),
        ("device", "gpu", "must be 'cpu' or 'cuda[:N]', got 'gpu'"),
        ("device", "CUDA", "must be 'cpu' or 'cuda[:N]', got 'CUDA'"),
        ("device", "CPU", "must be 'cpu' or 'cuda[:N]', got 'CPU'"),
        ("device", "xcuda", "must be 'cpu' or 'cuda[:N]', got 'xcuda'"),
        ("device", 0, "must be 'cpu' or 'cuda[:N]', got 0"),
        ("device", None, "must be 'cpu' or 'cuda[:N]', got None"),
    ],
)
def test_bad_typed_values_name_the_origin_file_and_key(key, value, reason):
    # Without an origin (a config built in code) the file is called "config".
    with pytest.raises(ConfigError) as info:
        make(**{key: value})
    assert str(info.value) == f"config: key '{key}' {reason}"
    with pytest.raises(ConfigError) as info:
        make(**{key: value}, origin={key: "/x/acme_configurations.yaml"})
    assert str(info.value) == f"/x/acme_configurations.yaml: key '{key}' {reason}"


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("batch_size", 1, 1),
        ("input_size", None, None),
        ("input_size", 150528, 150528),
        ("num_workers", 0, 0),
        ("log_freq", 3, 3),
        ("fp16", True, True),
        ("compiler", None, None),
        ("compiler", "onnxruntime", "onnxruntime"),
        ("compiler", "tensor_rt-10", "tensor_rt-10"),
        ("compiler", "a_b", "a_b"),
        ("compiler", "a-b", "a-b"),
        ("exist_onnx_path", "/m.onnx", "/m.onnx"),
        ("exist_compiler_path", "e.plan", "e.plan"),
        ("flops", None, None),
        ("flops", 0.5, 0.5),
        ("flops", "1e-3", 1e-3),
        ("flops", "2*4.1e9", 8.2e9),
        ("flops", 7, 7.0),
        ("device", "cpu", "cpu"),
        ("device", "cuda", "cuda"),
        ("device", "cuda:1", "cuda:1"),
        ("warmup", 0, 0),
        ("seed", 42, 42),
        ("onnx_opset", 13, 13),
    ],
)
def test_good_typed_values_are_kept(key, value, expected):
    config = make(**{key: value})
    assert getattr(config, key) == expected
    assert type(getattr(config, key)) is type(expected)


def test_framework_defaults():
    config = make()
    assert (config.warmup, config.flops, config.seed, config.onnx_opset, config.device) == (2, None, 0, 17, "cpu")
    assert (config.cache_dir, config.export_onnx_path, config.engine_path) == ("", None, None)


def test_no_validation_needs_an_onnx_path_and_names_its_origin():
    tail = (
        "key 'no_validation' is true, so key 'exist_onnx_path' must name an ONNX file (validation and export are "
        "both skipped)"
    )
    with pytest.raises(ConfigError) as info:
        make(no_validation=True)
    assert str(info.value) == f"config: {tail}"
    with pytest.raises(ConfigError) as info:
        make(no_validation=True, origin={"no_validation": "/v.yaml", "exist_onnx_path": "/b.yaml"})
    assert str(info.value) == f"/v.yaml: {tail}"
    assert make(no_validation=True, exist_onnx_path="/m.onnx").no_validation is True


def test_extra_keys_attribute_get_and_as_dict():
    config = make(extra={"weights": "/w.pth", "resize": 256})
    assert config.weights == "/w.pth" and config.resize == 256
    assert config.get("resize") == 256
    assert config.get("batch_size") == 8
    assert config.get("nope") is None
    assert config.get("nope", 3) == 3
    with pytest.raises(AttributeError) as info:
        config.nope
    assert str(info.value) == "config has no key 'nope'"
    data = config.as_dict()
    assert data["weights"] == "/w.pth" and data["resize"] == 256 and data["batch_size"] == 8
    assert data["vendor"] == "acme" and data["cache_dir"] == "" and data["device"] == "cpu"
    assert "extra" not in data and "origin" not in data
    assert set(data) == {f for f in CaseConfig.__dataclass_fields__ if f not in ("extra", "origin")} | {
        "weights",
        "resize",
    }


def test_a_config_survives_pickle_and_deepcopy():
    # DataLoader workers receive the config pickled; unpickling reaches __getattr__
    # before ``extra`` exists.
    config = make(extra={"weights": "/w.pth"}, origin={"batch_size": "/b.yaml"})
    for clone in (pickle.loads(pickle.dumps(config)), copy.deepcopy(config), copy.copy(config)):
        assert clone == config
        assert clone.weights == "/w.pth"


# --- loading the files ----------------------------------------------------------

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
"""


def tree(tmp_path: Path, base: str = BASE, params: str | None = None, vendor: str | None = None) -> Path:
    case = tmp_path / "inference" / "configs" / "toy"
    case.mkdir(parents=True)
    (case / "configurations.yaml").write_text(textwrap.dedent(base))
    if params is not None:
        (case / "parameters.yaml").write_text(textwrap.dedent(params))
    if vendor is not None:
        (case / "vendor_config").mkdir()
        (case / "vendor_config" / "acme_configurations.yaml").write_text(textwrap.dedent(vendor))
    return tmp_path / "inference"


def test_parameters_and_vendor_files_are_optional_and_command_line_keys_are_set(tmp_path):
    root = tree(tmp_path)
    config = load_case_config(root, "toy", "pytorch", "acme", Path("/data"), Path("/logs"))
    assert (config.vendor, config.case, config.framework) == ("acme", "toy", "pytorch")
    assert (config.perf_dir, config.data_dir, config.log_dir) == (str(root), "/data", "/logs")
    assert all(type(v) is str for v in (config.perf_dir, config.data_dir, config.log_dir))
    assert config.compiler == "onnxruntime" and config.input_size == 150528
    assert config.extra == {}
    # input_size is optional (FlagPerf's configs lack it) but BASE sets it, so it has an origin too.
    assert config.origin == {
        key: str(root / "configs" / "toy" / "configurations.yaml") for key in (*REQUIRED_KEYS, "input_size")
    }


def test_origin_of_each_key_is_its_file(tmp_path):
    root = tree(tmp_path, params="weights: /w.pth\n", vendor="batch_size: 4\nthreads: 2\n")
    config = load_case_config(str(root), "toy", "pytorch", "acme", "/d", "/l")
    case = root / "configs" / "toy"
    assert config.origin["weights"] == str(case / "parameters.yaml")
    assert config.origin["batch_size"] == str(case / "vendor_config" / "acme_configurations.yaml")
    assert config.origin["threads"] == str(case / "vendor_config" / "acme_configurations.yaml")
    assert config.origin["repeat"] == str(case / "configurations.yaml")
    assert config.extra == {"weights": "/w.pth", "threads": 2}
    assert config.batch_size == 4


@pytest.mark.parametrize("key", ["cache_dir", "export_onnx_path", "engine_path", "accuracy_note"])
def test_keys_the_framework_sets_may_not_be_configured(tmp_path, key):
    root = tree(tmp_path, params=f"{key}: /x\n")
    with pytest.raises(ConfigError) as info:
        load_case_config(str(root), "toy", "pytorch", "acme", "/d", "/l")
    assert str(info.value) == (
        f"{root / 'configs' / 'toy' / 'parameters.yaml'}: key '{key}' is set by the framework and may not be configured"
    )


@pytest.mark.parametrize("key", ["extra", "origin", "get", "as_dict"])
def test_case_keys_named_like_internal_fields_are_refused(tmp_path, key):
    """config.<key> would answer with CaseConfig's own machinery, never the value."""
    root = tree(tmp_path, params=f"{key}: 5\n")
    with pytest.raises(ConfigError) as info:
        load_case_config(str(root), "toy", "pytorch", "acme", "/d", "/l")
    assert str(info.value) == (
        f"{root / 'configs' / 'toy' / 'parameters.yaml'}: key '{key}' is a reserved name and cannot be read as "
        f"config.{key}; rename it"
    )
