"""``--set KEY=VALUE`` for the benches that run a shipped case: a case config key for every run
the bench makes (each value read as YAML), as run.py's ``--set``. Their smoke tests cap the
measured phases with it (``--set max_duration_s=5``)."""

from __future__ import annotations

import argparse
import sys

import yaml


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a case config key for every run of the bench (YAML value), e.g. --set max_duration_s=5",
    )


def overrides(pairs: list[str]) -> dict:
    """``--set`` pairs as config keys; a pair without ``=`` is one line and exit 2."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            print(f"--set {pair}: expected KEY=VALUE", file=sys.stderr)
            sys.exit(2)
        found[key] = yaml.safe_load(value)
    return found
