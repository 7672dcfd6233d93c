"""common.scenario: every scenario is a record with every fact (LoadGen's static_assert), its facts
checked against MLPerf LoadGen's own settings and mlperf.conf, no code comparing a scenario's name,
and MultiStream, the scenario added through one record and one runner: LoadGen's for real with a small
engine, the config and the stage (InferPerf's runner on a fake clock: tests/test_multi_stream_units.py).
"""

from __future__ import annotations

import ast
import dataclasses
import time
import types
from pathlib import Path

import mlperf_loadgen as lg  # a declared dependency: a broken install fails, never skips
import pytest
import torch

from common.errors import ConfigError
from common.scenario import (
    MULTI_STREAM,
    MULTI_STREAM_SAMPLES_PER_QUERY,
    OFFLINE,
    SCENARIOS,
    SERVER,
    SINGLE_STREAM,
    LoadgenFacts,
    Scenario,
    scenario,
)
from common.stats import MIN_SAMPLES_FOR_PERCENTILE
from contract.config import CaseConfig, query_samples
from contract.config.values import EXTRA_CHECKS
from tests.conftest import TYPED_CASE_CONFIG
from tools.measure import loadgen
from tools.measure.rows import row_target
from tools.measure.scenarios import RUNNERS
from tools.measure.stage import PerformanceStage

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
CONFIG_KEYS = {f.name for f in dataclasses.fields(CaseConfig)} | set(EXTRA_CHECKS)  # typed keys and checked extra keys


# ---- every scenario has every fact -----------------------------------------------------------------


def test_the_registry_holds_each_record_under_its_name_and_refuses_an_unknown_one_in_one_line():
    assert list(SCENARIOS) == ["offline", "single_stream", "multi_stream", "server"]
    assert all(SCENARIOS[name].name == name and scenario(name) is SCENARIOS[name] for name in SCENARIOS)
    assert scenario(SERVER) is SERVER
    for bad in ("Server", "multi-stream", None, 3):
        with pytest.raises(ValueError) as info:
            scenario(bad)
        assert (
            str(info.value) == f"unknown scenario {bad!r}: expected one of offline, single_stream, multi_stream, server"
        )


@pytest.mark.parametrize("record", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_every_scenario_states_every_fact_and_has_a_runner(record):
    # No field has a default: a record that leaves one out does not construct.
    assert all(
        f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        for f in dataclasses.fields(Scenario)
    )
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(LoadgenFacts))
    for f in dataclasses.fields(Scenario):
        value = getattr(record, f.name)
        if f.type == "bool":
            assert isinstance(value, bool), f.name
    assert record.headline is None or record.headline in MIN_SAMPLES_FOR_PERCENTILE
    for key in (record.bound_key, record.samples_per_query_key):  # config keys the record names exist
        assert key is None or key in CONFIG_KEYS
    assert record.bound_key is None or record.headline is not None  # a bound is on the headline percentile
    assert record.judges_throughput or record.headline is not None  # every row judges something
    assert (record.samples_per_query_key is None) == (record.samples_per_query_default is None)
    assert callable(RUNNERS[record])
    assert set(RUNNERS) == set(SCENARIOS.values())


@pytest.mark.parametrize("record", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_every_loadgen_mapping_names_loadgens_real_members_and_settings(record):
    facts = record.loadgen
    assert isinstance(getattr(lg.TestScenario, facts.scenario), lg.TestScenario)
    settings = lg.TestSettings()
    named = [
        v
        for f in dataclasses.fields(LoadgenFacts)
        if f.name.endswith("_setting") and (v := getattr(facts, f.name)) is not None
    ]
    assert named and all(hasattr(settings, name) for name in named), named
    assert facts.latency_key.format(q="99.00").startswith("result_99.00_percentile_")
    assert facts.latency_summary in ("latency", "query_latency")
    # The settings loadgen_settings makes for the scenario are LoadGen's own for it.
    config = types.SimpleNamespace(
        min_duration_s=1.0,
        max_duration_s=5.0,
        min_query_count=10,
        seed=0,
        latency_bound_ms=20.0,
        multi_stream_samples_per_query=8,
    )
    made = loadgen.loadgen_settings(lg, record, config, loadgen.Probe(8, 1_000_000, 1000.0), 4, 1, 400.0)
    assert made.scenario == getattr(lg.TestScenario, facts.scenario)
    assert made.min_query_count == record.min_query_count(10)


@pytest.mark.parametrize("record", [r for r in SCENARIOS.values() if r.headline is not None], ids=lambda r: r.name)
def test_the_headline_percentile_is_the_one_loadgens_mlperf_conf_sets(record):
    # FromConfig(conf_type=0) loads the mlperf.conf compiled into the installed LoadGen; start from a
    # value it must overwrite, so the check cannot pass on TestSettings' defaults.
    settings = lg.TestSettings()
    setattr(settings, record.loadgen.percentile_setting, 0.5)
    assert settings.FromConfig("", "resnet50", record.loadgen.scenario, 0) == 0
    assert getattr(settings, record.loadgen.percentile_setting) == record.headline_fraction


def test_multi_stream_is_loadgens_multistream():
    settings = lg.TestSettings()
    settings.multi_stream_samples_per_query, settings.min_query_count = 1, 1
    assert settings.FromConfig("", "resnet50", "MultiStream", 0) == 0
    # mlperf.conf: *.MultiStream.samples_per_query = 8, min_query_count = 662, target_latency_percentile = 99
    assert settings.multi_stream_samples_per_query == MULTI_STREAM_SAMPLES_PER_QUERY == 8
    assert settings.min_query_count == MULTI_STREAM.min_query_count(1) == MIN_SAMPLES_FOR_PERCENTILE["p99"][1] == 662
    assert (
        MULTI_STREAM.headline,
        MULTI_STREAM.one_query_at_a_time,
        MULTI_STREAM.scheduled,
        MULTI_STREAM.judges_throughput,
    ) == ("p99", True, False, True)


def test_the_facts_the_code_reads():
    assert [s.name for s in SCENARIOS.values() if s.judges_throughput] == ["offline", "single_stream", "multi_stream"]
    assert [s.name for s in SCENARIOS.values() if s.scheduled] == [SERVER.name]
    assert [s.name for s in SCENARIOS.values() if s.result_is_throughput] == [OFFLINE.name]
    assert [s.name for s in SCENARIOS.values() if s.one_query_at_a_time] == [SINGLE_STREAM.name, MULTI_STREAM.name]
    assert (
        SERVER.bound_key == "latency_bound_ms"
        and [s.bound_key for s in (OFFLINE, SINGLE_STREAM, MULTI_STREAM)] == [None] * 3
    )
    assert [s.min_query_count(24) for s in SCENARIOS.values()] == [24, 64, 662, 662]
    assert row_target("multi_stream", types.SimpleNamespace(precision=0.1, latency_precision=None)).throughput == (
        "qps",
    )
    assert row_target("multi_stream", types.SimpleNamespace(precision=0.1, latency_precision=None)).percentile == "p99"
    config = types.SimpleNamespace(multi_stream_samples_per_query=8)
    assert (
        MULTI_STREAM.samples_per_query(query_samples(config, MULTI_STREAM), 2),
        MULTI_STREAM.calls_per_query(query_samples(config, MULTI_STREAM), 2),
        SERVER.calls_per_query(query_samples(config, SERVER), 2),
    ) == (8, 4, 1)
    with pytest.raises(
        ValueError, match="multi_stream: multi_stream_samples_per_query 8 is not a multiple of batch size 3"
    ):
        MULTI_STREAM.calls_per_query(query_samples(config, MULTI_STREAM), 3)


def _name_compares(tree: ast.AST) -> list[int]:
    names = set(SCENARIOS)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Constant) and s.value in names for s in sides):
                found.append(node.lineno)
    return found


def test_no_code_compares_a_scenario_name():
    """Branches read a record's facts; a comparison with a scenario's name anywhere in inference/ fails here."""
    offenders = {
        str(p.relative_to(INFERENCE)): lines
        for p in sorted(INFERENCE.rglob("*.py"))
        if (lines := _name_compares(ast.parse(p.read_text())))
    }
    assert offenders == {}
    assert _name_compares(ast.parse('if row["scenario"] == "server": pass\nif "offline" in names: pass')) == [
        1,
        2,
    ]  # the check can fail


# ---- the config and the stage ------------------------------------------------------------------------


def test_multi_stream_is_selectable_and_its_query_must_be_whole_batches():
    config = CaseConfig(**TYPED_CASE_CONFIG, scenario=["offline", "multi_stream"], batch_sizes=[1, 2, 4, 8])
    assert (
        config.scenario == ["offline", "multi_stream"]
        and MULTI_STREAM.samples_per_query(query_samples(config, MULTI_STREAM), 8) == 8
    )  # LoadGen's default
    assert "multi_stream_samples_per_query" not in config.as_dict()  # unset, so result.json's config keeps its bytes
    with pytest.raises(ConfigError) as info:
        CaseConfig(**TYPED_CASE_CONFIG, scenario="multi_stream", batch_sizes=[2, 3], origin={"scenario": "/c.yaml"})
    assert str(info.value) == (
        "/c.yaml: key 'scenario' includes multi_stream, so key 'multi_stream_samples_per_query' (8) must be a "
        "whole number of batches, "
        "but batch size 3 does not divide it"
    )
    config = CaseConfig(
        **TYPED_CASE_CONFIG, scenario="multi_stream", batch_sizes=[3], extra={"multi_stream_samples_per_query": 6}
    )
    assert MULTI_STREAM.calls_per_query(query_samples(config, MULTI_STREAM), 3) == 2
    with pytest.raises(ConfigError, match="key 'multi_stream_samples_per_query' must be a positive integer"):
        CaseConfig(**TYPED_CASE_CONFIG, extra={"multi_stream_samples_per_query": 0})


def _stage(tmp_path, **changes):
    values = dict(
        pool_max_mb=1.0,
        batch_sizes=[2],
        batch_size=2,
        warmup=1,
        audits=True,
        numeric_tolerance=None,
        scenario=["multi_stream"],
        clients=[1, 2],
        server_search=False,
        target_qps=None,
        min_query_count=24,
        min_duration_s=0.05,
        max_duration_s=30.0,
        seed=0,
        device="cpu",
        contention_limit=1.0,
        latency_bound_ms=None,
        precision=None,
        latency_precision=None,
        settle_max_s=0.0,
        log_dir=str(tmp_path),
        load_generator="inferperf",
        multi_stream_samples_per_query=4,
    )
    values.update(changes)
    loader = [(torch.full((2, 3), float(b)), None) for b in range(8)]
    return PerformanceStage(types.SimpleNamespace(**values), loader, lambda: None, "fp32")


def _engine(inputs):
    time.sleep(0.0002)
    return [inputs[0] * 2.0], 0.0


@pytest.mark.parametrize("generator", ["inferperf", "mlperf"])
def test_a_multi_stream_row_under_either_generator(tmp_path, generator):
    stage = _stage(tmp_path, load_generator=generator)
    stage.rows_for(_engine, 2)
    (row,) = (r.to_json() for r in stage.report.rows)  # one client only, whatever clients lists: one query at a time
    assert (row["scenario"], row["clients"], row["samples_per_query"], row["load_generator"]) == (
        "multi_stream",
        1,
        4,
        generator,
    )
    assert row["queries"] >= 662 and row["samples"] == row["queries"] * 4
    assert row["latency_ms"]["p99"] is not None and row["precision"]["figures"].keys() == {"qps", "p99"}
    assert row["accuracy_in_performance_mode"]["passed"] is True
    assert len(stage.report.raw_latencies_ns[0]) == row["queries"]
    if generator == "mlperf":
        block = row["loadgen"]
        assert block["result_validity"] == "VALID" and row["verdict"] == {"valid": True, "reasons": []}
        assert block["settings"]["samples_per_query"] == 2  # LoadGen's samples are pool batches: 4 samples = 2 batches
        assert (
            block["query_count"] == row["queries"] and block["samples_per_second"] is None
        )  # LoadGen logs no MultiStream rate
        assert row["qps"] == pytest.approx(
            row["samples"] / row["duration_s"]
        )  # InferPerf's timing of LoadGen's queries
        assert set(block["early_stopping_estimate_ms"]) == {"p99"}
        assert block["latency_ms"]["p99"] >= block["latency_ms"]["p50"] > 0.3  # per query: two calls of at least 0.2 ms
        assert (tmp_path / "mlperf_log_bs2_multi_stream_x1_summary.txt").is_file()
