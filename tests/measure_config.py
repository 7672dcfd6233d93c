"""The measurement settings of tests that run whole cases to check something else.

A test that runs ``run.py`` or ``run_inference.py`` end to end to check process
handling, result files, executors or the summary does not test the measurement,
yet under the framework defaults each of its phases and rows would measure until
±2 % or 60 s (docs/measurement.md, "The stop rule"): on a loaded CI machine that
is a minute per phase and row. ``CHEAP_MEASUREMENT`` keeps the stop rule, the
settle phase and the verdict working as they do for a user, with a loose
precision and short caps. ``tests.conftest.copy_inference_tree`` writes it into
the copied cases' configurations (``cheap=False`` keeps the shipped values);
``CHEAP_SET`` gives the same as ``--set`` options for runs of the real tree.
Tests OF the measurement (tests/test_precision.py, tests/test_verdict.py, the
mutant tests, tests/test_compare_runs.py's default runs) keep the real values.
"""

from __future__ import annotations

from pathlib import Path

CHEAP_MEASUREMENT = {
    "precision": 0.25,  # ±25 %: met by the first interval (16 queries) on almost any machine
    # >= the default min_duration_s (2 s); a figure short of ±25 % by then is INVALID, as for a user
    "max_duration_s": 5.0,
    "settle_max_s": 1.0,
}
# The cases tests run end to end (the LLM case keeps its own schedule-sized caps).
CHEAP_CASES = ("digits", "onnx_model", "bert")

CHEAP_SET: tuple[str, ...] = tuple(
    arg for key, value in CHEAP_MEASUREMENT.items() for arg in ("--set", f"{key}={value}")
)


def cheapen_tree(perf: Path, cases: tuple[str, ...] = CHEAP_CASES) -> None:
    """Write ``CHEAP_MEASUREMENT`` into the cases' configurations.yaml of a copied inference/ tree."""
    import yaml

    for case in cases:
        path = perf / "configs" / case / "configurations.yaml"
        if path.is_file():
            data = yaml.safe_load(path.read_text())
            data.update(CHEAP_MEASUREMENT)
            path.write_text(yaml.safe_dump(data, sort_keys=False))
