"""Print the slowest tests of one or more JUnit XML reports (pytest --junitxml), slowest first.

scripts/test.sh runs the suite in two parts (parallel, then serial); this prints one list
for both, so the tests that set CI's wall time are named in one place.

    python scripts/slowest.py [-n 15] REPORT.xml [REPORT.xml ...]
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path


def durations(report: Path) -> list[tuple[float, str]]:
    """(seconds, node id) of every test case in a JUnit XML report; a missing report gives none."""
    if not report.is_file():
        return []
    rows = []
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        rows.append((float(case.get("time", 0.0)), f"{module}.py::{case.get('name', '?')}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15, help="how many (default 15)")
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args(argv)
    rows = sorted((row for report in args.reports for row in durations(report)), reverse=True)
    total = sum(seconds for seconds, _ in rows)
    print(f"{args.n} slowest of {len(rows)} tests ({total / 60:.1f} min of test time in all):")
    for seconds, name in rows[: args.n]:
        print(f"{seconds:8.2f}s  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
