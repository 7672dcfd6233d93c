"""What do the result records' codec cost? Encode + decode of a typical result.json and summary.json, per call.

    python3 -m bench.record_codec [--base 416dc1b] [--repeats 7] [--number 200]

The files are the golden fixtures (tests/fixtures/golden/): a vision case's result.json (digits,
with its rows and phases), the LLM case's (llama), and the summary.json written from digits. Each
line is the best of --repeats runs of --number calls, in microseconds per call:
  json      json.loads + json.dumps of the same text: the floor any codec sits on;
  new       Record.from_json(json.loads(text)) and json.dumps(record.to_json()): common/codec.py;
  old       the same through the hand-written to_json/from_json of commit --base (common/record.py
            and common/summary_record.py as they were there, read with ``git show``), side by side
            in this process; left out where git or that commit is not at hand.
The codec runs once per case after its measurement (tools/results/result.py writes result.json;
the host reads it once in utils/executors/base.py::read_outcome), never inside a timed loop.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import timeit
import types
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
GOLDEN = REPO / "tests" / "fixtures" / "golden"
FILES = {
    "result digits": GOLDEN / "results" / "digits" / "result.json",
    "result llama": GOLDEN / "results" / "llm_llama" / "result.json",
    "summary digits": GOLDEN / "summaries" / "digits.summary.json",
}


def old_records(base: str) -> tuple[Any, Any] | None:
    """``(CaseResult, Summary)`` of commit ``base``, loaded as modules of their own; None without git."""
    sources = {}
    for name in ("record", "summary_record"):
        try:
            sources[name] = subprocess.run(
                ["git", "-C", str(REPO), "show", f"{base}:inference/common/{name}.py"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
    modules = {}
    for name in ("record", "summary_record"):
        module = types.ModuleType(f"old_{name}")
        sys.modules[module.__name__] = module  # dataclasses look their module up by name
        exec(
            compile(sources[name].replace("from common.record import", "from old_record import"), name, "exec"),
            module.__dict__,
        )
        modules[name] = module
    return modules["record"].CaseResult, modules["summary_record"].Summary


def per_call(work: Callable[[], Any], repeats: int, number: int) -> float:
    """Microseconds per call, the best of ``repeats``."""
    return min(timeit.repeat(work, repeat=repeats, number=number)) / number * 1e6


def round_trip(cls: Any, text: str) -> Callable[[], str]:
    return lambda: json.dumps(cls.from_json(json.loads(text)).to_json())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="416dc1b", help="the commit whose hand-written codec is measured beside")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(INFERENCE))
    from common.record import CaseResult
    from common.summary_record import Summary

    old = old_records(args.base)
    print(f"{'file':<16} {'json':>9} {'new':>9} {'old':>9}   (us per encode + decode)")
    for label, path in FILES.items():
        text = path.read_text(encoding="utf-8")
        new_cls, old_cls = (
            (CaseResult, old[0] if old else None) if label.startswith("result") else (Summary, old[1] if old else None)
        )
        floor = per_call(lambda: json.dumps(json.loads(text)), args.repeats, args.number)
        new = per_call(round_trip(new_cls, text), args.repeats, args.number)
        before = per_call(round_trip(old_cls, text), args.repeats, args.number) if old_cls is not None else None
        shown = f"{before:9.1f}" if before is not None else f"{'n/a':>9}"
        print(f"{label:<16} {floor:9.1f} {new:9.1f} {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
