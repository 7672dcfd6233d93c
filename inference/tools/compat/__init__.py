"""Adapters for files written for other benchmarks (FlagPerf today), so they drop in unchanged."""
