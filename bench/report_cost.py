"""What does report.html cost? Times utils.results.report.write_report on an existing run directory.

    python3 -m bench.report_cost [RUN_DIR] [--processes 3] [--repeats 5] [--plots]

RUN_DIR defaults to the newest inference/result/run*. Its summary.json (and the files
its records point at) are read; report.html is written into a temporary copy of the
directory, never into RUN_DIR itself. Each of --processes fresh interpreters prints:
  import  importing utils.results.report and jinja2 (its page template); run.py has most of what
          utils.results.report imports (utils.results.summary, common.*) loaded already;
  first   the first write_report in that interpreter (template compiled, plotly.js
          read from report/vendor/, caches cold);
  warm    the median of --repeats further write_report calls.
The plots cost the browser, not this: each is a JSON figure spec that plotly.js draws when
the page opens. report.html's size is printed with plotly.js's share of it.
--plots adds, from the last interpreter, the time of each plot function on the
run's first case (the median of --repeats calls), spec serialisation included.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, {inference!r})
from pathlib import Path
t = time.perf_counter()
import utils.results.report as report
import jinja2  # noqa: F401  (what the page uses)
imported = time.perf_counter() - t
run_dir, perf_dir, repeats, plots = Path({run_dir!r}), Path({inference!r}), {repeats}, {plots}
t = time.perf_counter()
report.write_report(run_dir, perf_dir)
first = time.perf_counter() - t
warm = []
for _ in range(repeats):
    t = time.perf_counter()
    report.write_report(run_dir, perf_dir)
    warm.append(time.perf_counter() - t)
script = report.plotly_js()
out = {{
    "import": imported,
    "first": first,
    "warm": statistics.median(warm) if warm else None,
    "size": (run_dir / "report.html").stat().st_size,
    "plotly_js": len(script.encode("utf-8")) if script else 0,
}}
if plots:
    from common.record import RESULT_FILE, read_latencies
    from common.summary_record import read_summary
    record = next(r for r in read_summary(run_dir / "summary.json").results if r.succeeded)
    log_dir = Path(record.log_dir)
    result = json.loads((log_dir / RESULT_FILE).read_text())
    rows, raw = record.performance, read_latencies(log_dir)
    sys_samples, vendor_samples = report.monitor_files(log_dir)
    calls = {{
        "throughput_plot": lambda: report.throughput_plot(rows),
        "latency_plot": lambda: report.latency_plot(rows, raw, raw.get("inference")),
        "frontier_plot": lambda: report.frontier_plot(rows),
        "timeline_plot": lambda: report.timeline_plot(sys_samples, vendor_samples, report.phase_spans(result)),
        "top_ops_plot": lambda: report.top_ops_plot(
            ((result.get("engine") or {{}}).get("performance_data") or [])[: report.TOP_OPS]
        ),
    }}
    out["plots"] = {{}}
    for name, call in calls.items():
        times = []
        for _ in range(max(repeats, 1)):
            t = time.perf_counter()
            figure = call()
            if figure is not None:
                report.script_json(figure)
            times.append(time.perf_counter() - t)
        out["plots"][name] = statistics.median(times)
print(json.dumps(out))
"""


def newest_run() -> Path:
    runs = sorted(
        (p for p in (INFERENCE / "result").glob("run*") if (p / "summary.json").is_file()),
        key=lambda p: p.stat().st_mtime,
    )
    if not runs:
        sys.exit(f"no run directory with a summary.json under {INFERENCE / 'result'}")
    return runs[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", type=Path, default=None)
    parser.add_argument("--processes", type=int, default=3, help="fresh interpreters (default %(default)s)")
    parser.add_argument(
        "--repeats", type=int, default=5, help="warm write_report calls per interpreter (default %(default)s)"
    )
    parser.add_argument("--plots", action="store_true", help="also time each plot function on the first case")
    args = parser.parse_args(argv)
    source = (args.run_dir or newest_run()).resolve()
    cases = len(json.loads((source / "summary.json").read_text())["results"])
    print(f"run {source} ({cases} record(s)); {args.processes} interpreter(s) x (1 + {args.repeats}) write_report")
    with tempfile.TemporaryDirectory(prefix="report_cost_") as tmp:
        run_dir = Path(tmp) / source.name
        shutil.copytree(source, run_dir, ignore=shutil.ignore_patterns("report.html"))
        results = []
        for index in range(args.processes):
            code = CHILD.format(
                inference=str(INFERENCE),
                run_dir=str(run_dir),
                repeats=args.repeats,
                plots=args.plots and index == args.processes - 1,
            )
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=INFERENCE)
            if done.returncode != 0:
                sys.exit(f"write_report failed:\n{done.stderr[-3000:]}")
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{'':>6} {'import':>8} {'first':>8} {'warm':>8}  (s)")
    for index, r in enumerate(results):
        warm = f"{r['warm']:8.3f}" if r["warm"] is not None else f"{'-':>8}"
        print(f"{index:>6} {r['import']:8.3f} {r['first']:8.3f} {warm}")
    median = lambda key: statistics.median(r[key] for r in results if r[key] is not None)  # noqa: E731
    print(
        f"{'median':>6} {median('import'):8.3f} {median('first'):8.3f} "
        f"{median('warm') if args.repeats else float('nan'):8.3f}"
    )
    size, script = results[-1]["size"], results[-1]["plotly_js"]
    print(
        f"report.html {size / 1024:.0f} KiB, of which plotly.js {script / 1024:.0f} KiB and the rest "
        f"{(size - script) / 1024:.0f} KiB"
    )
    for name, seconds in (results[-1].get("plots") or {}).items():
        print(f"  {name:<16} {seconds * 1000:7.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
