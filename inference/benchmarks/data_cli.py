"""The command line of a case's data writers (``prepare.py``, ``synthetic.py``): ``OUT_DIR`` and
integer options, parsed with argparse. Standard library only: a writer runs where the case's
other dependencies may be missing."""

from __future__ import annotations

import argparse


def out_dir_args(description: str, argv: list[str] | None, options: dict[str, int] | None = None) -> argparse.Namespace:
    """``argv`` parsed as ``OUT_DIR`` followed by ``options`` (``--name``: its integer default)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out_dir")
    for name, default in (options or {}).items():
        parser.add_argument(name, type=int, default=default)
    return parser.parse_args(argv)
