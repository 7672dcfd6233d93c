"""The measurement scenarios as records: one ``Scenario`` per name, holding every fact the code asks.

A scenario is looked up by the name a case config and result.json use (``scenario("server")``);
code reads its facts (``scenario.judges_throughput``, ``scenario.scheduled``, ...), never
compares its name. Both sides read these records: the container side (``tools/measure``: the
runners, LoadGen's settings) and the host side (``utils/results``: tables, figures). What only
the container side has, the runner of each scenario, is registered against the record in
``tools/measure/scenarios.py`` (``RUNNERS``), so this module imports nothing of ``tools``.

Adding a scenario is one record here and one runner there; ``tests/test_scenario_records.py``
fails when a record misses a fact, a runner or a LoadGen setting (LoadGen's ``static_assert``).

LoadGen's facts are from MLPerf LoadGen itself (``mlcommons-loadgen`` 6.0.17: its
``test_settings.h``, ``results.cc`` and the ``mlperf.conf`` compiled into the wheel):
SingleStream's result is the 90th percentile of its queries' latency (``*.SingleStream.
target_latency_percentile = 90``); MultiStream issues queries of ``samples_per_query`` samples
(``*.MultiStream.samples_per_query = 8``), the next when the previous completes, and its result
is the 99th percentile of the per-query latency (``*.MultiStream.target_latency_percentile = 99``,
``*.MultiStream.min_query_count = 662``); Server's arrivals are Poisson at ``server_target_qps``
and its bound is ``server_target_latency_ns`` at the 99th percentile; Offline issues everything
in one query and its result is samples per second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.stats import MIN_SAMPLES_FOR_PERCENTILE

# LoadGen's samples per MultiStream query (mlperf.conf ``*.MultiStream.samples_per_query = 8``, the
# TestSettings default too): the default of the case config key ``multi_stream_samples_per_query``
# (a well-known extra key, contract/config/values.py: a config that does not set it keeps its bytes).
MULTI_STREAM_SAMPLES_PER_QUERY = 8


@dataclass(frozen=True)
class LoadgenFacts:
    """How MLPerf LoadGen runs a scenario: its ``TestScenario`` member, the detail-log keys the row
    reads and the ``TestSettings`` attributes the row sets (None: the scenario has no such setting)."""

    scenario: str  # lg.TestScenario's member
    rate_key: (
        str | None
    )  # detail-log key of the throughput, LoadGen samples (pool batches) per second; None: LoadGen logs none
    one_query: bool  # the whole test is one query (Offline): its latency is one figure, so a row shows
    # InferPerf's per-batch timings
    latency_key: str  # detail-log key pattern of its latency percentiles ("{q}" = "99.00"): per query where
    # a query has several samples
    latency_summary: (
        str  # "latency" or "query_latency": result_{min,mean,max}_<this>_ns, the min/mean/max beside the percentiles
    )
    expected_latency_setting: str | None  # TestSettings attribute: the guessed query latency LoadGen sizes its run by
    expected_qps_setting: str | None  # TestSettings attribute: the guessed rate LoadGen sizes its one query by
    target_qps_setting: str | None  # TestSettings attribute: the arrival rate (queries per second)
    target_latency_setting: str | None  # TestSettings attribute: the latency bound (ns)
    percentile_setting: str | None  # TestSettings attribute: the headline percentile, as a fraction
    samples_per_query_setting: str | None  # TestSettings attribute: LoadGen samples per query


@dataclass(frozen=True, repr=False)
class Scenario:
    """Every fact of one scenario (no defaults: a record states each one)."""

    name: str  # as in a case config's ``scenario`` and result.json's rows
    headline: str | None  # the percentile its result is (LoadGen's metric), judged like a throughput; None: none
    judges_throughput: bool  # a row judges its qps (not server's: the arrival schedule sets it)
    one_query_at_a_time: bool  # the next query is issued when the previous completes, so clients must be 1
    scheduled: bool  # queries arrive on a Poisson schedule at target_qps; latency counts from the arrival
    bound_key: str | None  # the config key of the bound its headline percentile must meet; None: no bound
    samples_per_query_key: (
        str | None
    )  # the config key of a query's samples (several engine calls); None: one batch a query
    samples_per_query_default: int | None  # that key's value where a config does not set it
    loadgen: LoadgenFacts

    def __repr__(self) -> str:
        return f"Scenario({self.name!r})"

    def min_query_count(self, asked: int) -> int:
        """The queries a row issues at least: ``asked``, raised to the headline percentile's floor."""
        return max(asked, MIN_SAMPLES_FOR_PERCENTILE[self.headline][1]) if self.headline else asked

    @property
    def result_is_throughput(self) -> bool:
        """Its result is a throughput, not a latency percentile (offline): the rate a backend's own
        benchmark is set beside."""
        return self.headline is None

    @property
    def headline_fraction(self) -> float | None:
        """The headline percentile as a fraction (p99: 0.99), as LoadGen's settings take it."""
        return MIN_SAMPLES_FOR_PERCENTILE[self.headline][0] / 100 if self.headline else None

    def samples_per_query(self, configured: Any, batch_size: int) -> int:
        """Samples in one query: ``configured``, the config's ``samples_per_query_key`` (its default where
        None), for a scenario that has the key; else one batch. ``contract.config.query_samples`` reads it."""
        if self.samples_per_query_key is None or self.samples_per_query_default is None:
            return batch_size
        return int(self.samples_per_query_default if configured is None else configured)

    def calls_per_query(self, configured: Any, batch_size: int) -> int:
        """Engine calls (pool batches) in one query; a query's samples are a whole number of batches."""
        samples = self.samples_per_query(configured, batch_size)
        if samples % batch_size:
            raise ValueError(
                f"{self.name}: {self.samples_per_query_key} {samples} is not a multiple of batch size {batch_size}"
            )
        return samples // batch_size


OFFLINE = Scenario(
    name="offline",
    headline=None,
    judges_throughput=True,
    one_query_at_a_time=False,
    scheduled=False,
    bound_key=None,
    samples_per_query_key=None,
    samples_per_query_default=None,
    loadgen=LoadgenFacts(
        scenario="Offline",
        rate_key="result_samples_per_second",
        one_query=True,
        latency_key="result_{q}_percentile_latency_ns",
        latency_summary="latency",
        expected_latency_setting=None,
        expected_qps_setting="offline_expected_qps",
        target_qps_setting=None,
        target_latency_setting=None,
        percentile_setting=None,
        samples_per_query_setting=None,
    ),
)
SINGLE_STREAM = Scenario(
    name="single_stream",
    headline="p90",
    judges_throughput=True,
    one_query_at_a_time=True,
    scheduled=False,
    bound_key=None,
    samples_per_query_key=None,
    samples_per_query_default=None,
    loadgen=LoadgenFacts(
        scenario="SingleStream",
        rate_key="result_qps_with_loadgen_overhead",
        one_query=False,
        latency_key="result_{q}_percentile_latency_ns",
        latency_summary="latency",
        expected_latency_setting="single_stream_expected_latency_ns",
        expected_qps_setting=None,
        target_qps_setting=None,
        target_latency_setting=None,
        percentile_setting="single_stream_target_latency_percentile",
        samples_per_query_setting=None,
    ),
)
MULTI_STREAM = Scenario(
    name="multi_stream",
    headline="p99",
    judges_throughput=True,
    one_query_at_a_time=True,
    scheduled=False,
    bound_key=None,
    samples_per_query_key="multi_stream_samples_per_query",
    samples_per_query_default=MULTI_STREAM_SAMPLES_PER_QUERY,
    loadgen=LoadgenFacts(
        scenario="MultiStream",
        rate_key=None,  # LoadGen logs no MultiStream throughput; the row's qps is InferPerf's timing of
        # LoadGen's queries
        one_query=False,
        latency_key="result_{q}_percentile_per_query_latency_ns",
        latency_summary="query_latency",
        expected_latency_setting="multi_stream_expected_latency_ns",
        expected_qps_setting=None,
        target_qps_setting=None,
        target_latency_setting=None,
        percentile_setting="multi_stream_target_latency_percentile",
        samples_per_query_setting="multi_stream_samples_per_query",
    ),
)
SERVER = Scenario(
    name="server",
    headline="p99",
    judges_throughput=False,
    one_query_at_a_time=False,
    scheduled=True,
    bound_key="latency_bound_ms",
    samples_per_query_key=None,
    samples_per_query_default=None,
    loadgen=LoadgenFacts(
        scenario="Server",
        rate_key="result_completed_samples_per_sec",
        one_query=False,
        latency_key="result_{q}_percentile_latency_ns",
        latency_summary="latency",
        expected_latency_setting=None,
        expected_qps_setting=None,
        target_qps_setting="server_target_qps",
        target_latency_setting="server_target_latency_ns",
        percentile_setting="server_target_latency_percentile",
        samples_per_query_setting=None,
    ),
)

# Every scenario by name, in the order configs and messages list them.
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (OFFLINE, SINGLE_STREAM, MULTI_STREAM, SERVER)}


def scenario(name: str | Scenario) -> Scenario:
    """The scenario called ``name`` (a record is returned as it is); one ValueError naming the known
    ones for anything else."""
    if isinstance(name, Scenario):
        return name
    found = SCENARIOS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown scenario {name!r}: expected one of {', '.join(SCENARIOS)}")
    return found
