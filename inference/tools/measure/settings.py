"""The measurement's vocabulary, defined once: the scenarios and the framework defaults of the measurement keys.

Imported by the config (to validate), the timing loop, the scenarios and the
progress lines; it imports nothing of the project, so no import circle can
pass through it.
"""

from __future__ import annotations

from typing import Any

SCENARIOS = ("offline", "single_stream", "server")

# The measurement keys' framework defaults: configs that lack them keep
# working, and FlagPerf-style configs without these attributes get the same.
MEASUREMENT_DEFAULTS: dict[str, Any] = {
    "min_query_count": 64,  # enough queries for a measured p90 (LoadGen's floor)
    "min_duration_s": 2.0,  # of measured wall time, per phase and per performance row
    "max_duration_s": 600.0,  # wall-clock cap per phase or row: hitting it first makes the result invalid
    "contention_limit": 0.10,  # share of the benchmark's CPUs other processes may use
}
