"""The executor registry (utils/executors/registry.py::EXECUTORS): a MODE is one line there plus
its module, every executor declares every fact (ExecutorFacts.FACTS), and run.py and
utils/host_config.py ask the facts, never MODE's name (docs/architecture.md, "An executor")."""

from __future__ import annotations

import re
import sys
import textwrap
import threading

import pytest
import yaml

from common.errors import ConfigError
from tests.conftest import INFERENCE
from tests.infra.host_config import host_fields

# A minimal executor, as a new module would be: it "runs" a case by writing its result.json.
FAKE_MODULE = """
from utils.executors.base import HostSession


class FakeSession(HostSession[str]):
    in_container = {in_container}
    uses_ssh = False
    runs_here = {runs_here}

    def prepare(self):
        self.started = []

    def perf_dir(self):
        return "/perf"

    def data_dir(self, spec):
        return spec.data_dir

    def case_log_dir(self, spec, local_dir):
        return "/logs"

    def start(self, role, argv, spec, env, stdout):
        self.started.append(role)
        return role

    def wait(self, handle, timeout):
        return 0 if handle == "case" else None  # the monitors live until stopped

    def stop(self, handle):
        pass

    def fetch(self, spec, log_dir, local_dir):
        from tests.result_records import write_result

        write_result(local_dir, case=spec.label, framework=spec.framework)

    def cleanup(self):
        pass


class Forgetful(FakeSession):
    in_container = False
    uses_ssh = False
"""


@pytest.fixture
def fake_mode(tmp_path, monkeypatch):
    """Registers MODE fake (one EXECUTORS line) backed by a new module; returns a function that
    writes the module with the given facts."""
    from utils.executors import registry

    name = f"fake_executor_{tmp_path.name.replace('-', '_')}"
    folder = tmp_path / "modules"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setitem(registry.DYNAMIC_IMPORTS, "executor", "{module}")  # the fake module is top-level
    monkeypatch.setitem(registry.EXECUTORS, "fake", registry.Executor(f"{name}:FakeSession"))
    monkeypatch.setitem(registry.EXECUTORS, "forgetful", registry.Executor(f"{name}:Forgetful"))

    def write(in_container: bool = False, runs_here: bool = False) -> None:
        (folder / f"{name}.py").write_text(
            textwrap.dedent(FAKE_MODULE.format(in_container=in_container, runs_here=runs_here))
        )
        sys.modules.pop(name, None)

    yield write
    sys.modules.pop(name, None)


def registered_classes() -> list[type]:
    """Every class the registry can hand out: each MODE's, and those its keys pick."""
    from utils import executors
    from utils.executors import registry

    picked = [
        executors.mode_class(mode, {key: value})
        for mode, line in registry.EXECUTORS.items()
        for key, value, _ in line.picks
    ]
    return [*(executors.mode_class(mode) for mode in registry.modes()), *picked]


def test_every_executor_declares_every_fact_itself():
    from utils.executors.base import HostSession

    classes = registered_classes()
    assert [c.__name__ for c in classes] == ["LocalSession", "DockerSession", "SlurmSession", "SlurmDockerSession"]
    for cls in classes:
        assert issubclass(cls, HostSession)
        for fact in HostSession.FACTS:
            assert fact in vars(cls), f"{cls.__name__} does not declare {fact}"
            assert isinstance(vars(cls)[fact], bool)
    facts = {cls.__name__: tuple(vars(cls)[fact] for fact in HostSession.FACTS) for cls in classes}
    # (in_container, uses_ssh, runs_here): what the MODE branches of run.py and host_config.py tested
    assert facts == {
        "LocalSession": (False, False, True),
        "DockerSession": (True, True, False),
        "SlurmSession": (False, False, False),
        "SlurmDockerSession": (True, False, False),
    }
    # what host.yaml's checks read from the source, without loading a class, is the class's own
    from utils.executors import registry

    declared = [registry.executor_facts(mode) for mode in registry.modes()] + [
        registry.executor_facts(mode, {key: value})
        for mode, line in registry.EXECUTORS.items()
        for key, value, _ in line.picks
    ]
    assert {d.class_name: tuple(getattr(d, fact) for fact in HostSession.FACTS) for d in declared} == facts


def test_a_fact_inherited_from_another_executor_is_refused(fake_mode):
    from utils import executors
    from utils.executors import registry

    fake_mode()
    assert executors.mode_class("fake").__name__ == "FakeSession"
    assert registry.executor_facts("fake").class_name == "FakeSession"
    # refused where the class is loaded, and where its facts are read from its source
    with pytest.raises(TypeError, match=r"Forgetful does not declare runs_here \(ExecutorFacts.FACTS\)"):
        executors.mode_class("forgetful")
    with pytest.raises(TypeError, match=r"Forgetful does not declare runs_here \(ExecutorFacts.FACTS\)"):
        registry.executor_facts("forgetful")
    with pytest.raises(TypeError, match="is not an executor"):
        executors.checked(dict)


def test_every_executor_key_is_a_host_yaml_key_of_one_mode():
    from common.host_keys import KEY_FIELDS
    from utils.executors import registry

    keys = [key for executor in registry.EXECUTORS.values() for key in executor.keys]
    assert keys and set(keys) <= set(KEY_FIELDS)
    assert len(keys) == len(set(keys))
    assert registry.key_owner("SLURM_CONTAINER") == "slurm" and registry.key_owner("DOCKER_LOCAL") == "docker"
    assert registry.key_owner("HOSTS") is None
    # A key that picks another class is one of its MODE's own.
    assert all(key in line.keys for line in registry.EXECUTORS.values() for key, _, _ in line.picks)


@pytest.mark.parametrize(
    "path", ["run.py", "entry/checks.py", "entry/run_config.py", "utils/cli/hosts.py", "utils/host_config.py"]
)
def test_run_py_and_host_config_never_test_a_mode_name(path):
    text = (INFERENCE / path).read_text(encoding="utf-8")
    assert not re.findall(r"\bmode\s*(?:==|!=)|\bmode\s+(?:not\s+)?in\s*[(\[\"']|make_session|\bMODES\b", text)


def test_a_registered_mode_is_valid_host_yaml_without_other_edits(tmp_path, fake_mode):
    from utils.host_config import HostConfig

    fake_mode()
    config = HostConfig(**host_fields(tmp_path, mode="fake", hosts=["node7"]), inference_dir=INFERENCE)
    assert config.mode == "fake" and config.executor.class_name == "FakeSession" and not config.in_container
    with pytest.raises(ConfigError) as info:
        HostConfig(**host_fields(tmp_path, mode="k8s"), inference_dir=INFERENCE)
    assert (
        str(info.value)
        == f"{tmp_path / 'host.yaml'}: key 'MODE' must be one of local, docker, slurm, fake, forgetful, got 'k8s'"
    )
    # Another MODE's keys are refused in it, one line naming the file and key.
    with pytest.raises(ConfigError) as info:
        HostConfig(**host_fields(tmp_path, mode="fake", slurm_partition="debug"), inference_dir=INFERENCE)
    assert str(info.value) == f"{tmp_path / 'host.yaml'}: key 'SLURM_PARTITION' applies to MODE slurm only"


@pytest.mark.parametrize("runs_here", [False, True])
def test_host_yaml_checks_follow_the_facts(tmp_path, fake_mode, runs_here):
    """runs_here: HOSTS defaults to this machine and lists exactly one; relative data dirs are inference/'s."""
    from utils.host_config import HostConfig

    fake_mode(runs_here=runs_here)
    fields = host_fields(tmp_path, mode="fake", hosts=None, cases={"digits:pytorch": "data"})
    if runs_here:
        config = HostConfig(**fields, inference_dir=INFERENCE)
        assert [h.label for h in config.hosts] == ["127.0.0.1"] and config.cases[0].data_dir == str(INFERENCE / "data")
        with pytest.raises(ConfigError, match="key 'HOSTS' must list exactly one host in MODE fake"):
            HostConfig(**{**fields, "hosts": ["a", "b"]}, inference_dir=INFERENCE)
    else:
        with pytest.raises(ConfigError, match="key 'HOSTS' must be a non-empty list"):
            HostConfig(**fields, inference_dir=INFERENCE)
        with pytest.raises(ConfigError, match="data dir 'data' must be an absolute path on the hosts"):
            HostConfig(**{**fields, "hosts": ["a", "b"]}, inference_dir=INFERENCE)


def test_run_py_plans_and_runs_a_case_through_a_registered_mode(tmp_path, fake_mode):
    """run.py's start-up checks, its plan, the registry's session and the case lifecycle
    (HostSession.run_case) with MODE fake, which no file but the registry names."""
    from entry.run_config import load_run_config
    from utils import executors
    from utils.cli.args import parse_args
    from utils.cli.hosts import host_worker
    from utils.run_plan import Variant, build_plan

    fake_mode(in_container=False, runs_here=False)
    host_yaml = tmp_path / "host.yaml"
    host_yaml.write_text(
        yaml.safe_dump(
            {
                "MODE": "fake",
                "VENDOR": "cpu",
                "FLAGPERF_PATH": str(INFERENCE),
                "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
                "HOSTS": ["node1", "node2"],
                "CASES": {"digits:pytorch": "/data/digits"},
            }
        )
    )
    config = load_run_config(parse_args(["--config", str(host_yaml)]))
    assert config.executor.class_name == "FakeSession"
    plan = build_plan([Variant("", tmp_path / "run", config.cases)], config.repetitions)
    sessions = [
        executors.create(config, i, "20260101-000000-abcd", threading.Event(), tmp_path / "run") for i in range(2)
    ]
    outcomes = [outcome for session in sessions for outcome in host_worker(session, plan)]
    assert [(o.host, o.status, o.result and f"{o.result.case}:{o.result.framework}") for o in outcomes] == [
        ("node1", "success", "digits:pytorch"),
        ("node2", "success", "digits:pytorch"),
    ]
    assert sessions[0].started == ["mon-sys", "mon-cpu", "case"]  # the system and vendor monitors, then the pipeline


def test_in_the_image_a_registered_mode_needs_the_dockerfile_not_the_packages(tmp_path, fake_mode, monkeypatch):
    """in_container: the case's packages are the image's (not checked here); its Dockerfile must exist."""
    from entry import checks
    from utils.host_config import HostConfig

    fake_mode(in_container=True)
    checked = tmp_path / "requirements_checked"
    monkeypatch.setattr(checks, "check_case_requirements", lambda *args: checked.touch())
    config = HostConfig(
        **host_fields(tmp_path, mode="fake", hosts=["node1"], cases={"digits:pytorch": "/data"}),
        inference_dir=INFERENCE,
    )
    assert config.in_container
    checks.check_cases(config)  # cpu/pytorch has its Dockerfile
    assert not checked.exists()
    config.vendor = "acme"  # no docker_images/acme/
    with pytest.raises(ConfigError, match="no docker_images/acme/pytorch/Dockerfile"):
        checks.check_image(config, config.cases[0])
    fake_mode(in_container=False)  # natively, the packages are checked here instead
    checks.check_case_files(config, config.cases[0])
    assert checked.exists()
