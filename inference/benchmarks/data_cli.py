"""The command line of a case's data writers (``prepare.py``, ``synthetic.py``): ``OUT_DIR`` and
integer options, parsed with argparse; and the copy of data shipped beside a case. Standard library
only: a writer runs where the case's other dependencies may be missing."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Callable


def out_dir_args(description: str, argv: list[str] | None, options: dict[str, int] | None = None) -> argparse.Namespace:
    """``argv`` parsed as ``OUT_DIR`` followed by ``options`` (``--name``: its integer default)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out_dir")
    for name, default in (options or {}).items():
        parser.add_argument(name, type=int, default=default)
    return parser.parse_args(argv)


def writer_main(write: Callable[[str], object], description: str) -> Callable[[list[str] | None], None]:
    """The ``main(argv)`` of a writer that takes ``OUT_DIR`` alone: ``write(OUT_DIR)``, then ``wrote <its result>``."""

    def main(argv: list[str] | None = None) -> None:
        print(f"wrote {write(out_dir_args(description, argv).out_dir)}")

    return main


def copy_shipped(source: Path, target: Path) -> Path:
    """``source`` (a file or a folder shipped beside a case) copied to ``target``, its folder made first;
    returns ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copyfile(source, target)
    return target
