"""How far apart are two serving runs of the same server, and does compare call a slow one worse?

    python3 -m bench.serving_compare_noise [--rounds 20] [--fast 100,50] [--slow 400,200] [--together]

Each round benchmarks loopback servers (``python -m tools.serving.loopback``, each its own process)
with ``run.py --endpoint``'s code (``tools/serving/cli.py``): the fast server twice (A and A'), the
slow one once (B), with the load of ``tests/test_serving_compare.py`` (concurrency 8 and 16, 64
requests, 4 output tokens). ``--together`` runs the three at the same time, A and A' against one
server (as the test does); without it, one after the other, each against its own server. Per round
it prints the A/A' ratios' range, the figures outside 0.8-1.25, and compare's exit status and
verdicts for A/A' (at ``--aa-between-run-cv``) and for A/B (at ``--ab-between-run-cv``).

``--history-runs N --keep DIR`` instead benchmarks one fast loopback server N times, one run after
another (runs made at different times, each against a fresh server process), every run landing in
the history ``DIR/history.sqlite`` as ``run.py --endpoint`` lands it. Then
``python3 -m bench.history_calibration --history DIR/history.sqlite`` counts compare's false alarms
at its defaults (the noise learned from the first half of the runs, the pairs decided in the second).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
sys.path.insert(0, str(INFERENCE))

from tools.serving.cli import main as serving_main  # noqa: E402
from utils.results import decide  # noqa: E402
from utils.results.compare import compare_runs  # noqa: E402

LOAD = ["--served-model", "loopback-llama", "--concurrency", "8,16", "--num-requests", "64", "--warmup", "2",
        "--input-len", "8", "--output-len", "4", "--slo", "ttft_ms=5000"]  # fmt: skip


@contextlib.contextmanager
def server(ttft_ms: str, itl_ms: str) -> Iterator[str]:
    command = [sys.executable, "-m", "tools.serving.loopback", "--model", "loopback-llama",
               "--ttft-ms", ttft_ms, "--itl-ms", itl_ms]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(INFERENCE)}
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            yield f"http://127.0.0.1:{proc.stdout.readline().split()[1]}/v1"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def serving_run(out: Path, url: str) -> Path:
    if serving_main(["--endpoint", url, *LOAD, "--output-dir", str(out)]) != 0:
        raise SystemExit(f"the serving run against {url} failed")
    (run,) = out.iterdir()
    return run


def one_round(root: Path, fast: list[str], slow: list[str], together: bool) -> tuple[Path, Path, Path]:
    if together:
        with server(*fast) as a, server(*slow) as b, ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(serving_run, root / name, url) for name, url in (("a", a), ("a2", a), ("b", b))]
            first, second, third = (f.result() for f in futures)
            return first, second, third
    runs = []
    for name, speed in (("a", fast), ("a2", fast), ("b", slow)):
        with server(*speed) as url:
            runs.append(serving_run(root / name, url))
    return runs[0], runs[1], runs[2]


def history_runs(count: int, keep: Path, fast: list[str]) -> None:
    """``count`` serving runs of a fresh fast server each, one after another, into ``keep``'s history."""
    from utils.history.ingest import record_runs
    from utils.history.store import resolve_url

    keep.mkdir(parents=True, exist_ok=True)
    url = resolve_url(None, keep)
    for k in range(count):
        with server(*fast) as endpoint, contextlib.redirect_stdout(open(os.devnull, "w")):
            code = serving_main(
                ["--endpoint", endpoint, *LOAD, "--output-dir", str(keep)],
                on_written=lambda folder: print(record_runs([folder], url), file=sys.stderr),
            )
        if code != 0:
            raise SystemExit(f"serving run {k} failed ({code})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fast", default="100,50", help="TTFT,ITL of the fast server in ms")
    parser.add_argument("--slow", default="400,200", help="TTFT,ITL of the slow server in ms")
    parser.add_argument("--together", action="store_true", help="the three runs at the same time (the test's way)")
    parser.add_argument("--aa-between-run-cv", type=float, default=0.30)
    parser.add_argument("--ab-between-run-cv", type=float, default=decide.BETWEEN_RUN_CV)
    parser.add_argument("--history-runs", type=int, default=0, help="N runs one after another into a history")
    parser.add_argument("--keep", type=Path, help="with --history-runs: the folder of the runs and history.sqlite")
    args = parser.parse_args(argv)
    fast, slow = args.fast.split(","), args.slow.split(",")
    if args.history_runs:
        if args.keep is None:
            parser.error("--history-runs needs --keep DIR")
        history_runs(args.history_runs, args.keep, fast)
        return 0
    flagged = 0
    for k in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            with contextlib.redirect_stdout(open(os.devnull, "w")):
                a, a2, b = one_round(Path(tmp), fast, slow, args.together)
                aa = compare_runs(a, a2, 5.0, args.aa_between_run_cv, allow_invalid=True)
                ab = compare_runs(a, b, 5.0, args.ab_between_run_cv, allow_invalid=True)
        ratios = [line.ratio for line in aa.lines]
        flagged += aa.exit_code == 1
        print(
            f"round {k}: A/A' exit {aa.exit_code}, ratios {min(ratios):.3f}-{max(ratios):.3f}; "
            f"A/B exit {ab.exit_code}, verdicts {sorted({line.verdict for line in ab.lines})}",
            flush=True,
        )
        for line in aa.lines:
            if not 0.8 < line.ratio < 1.25:
                print(f"    A/A' {line.row} {line.figure}: {line.a:.1f} vs {line.b:.1f}", flush=True)
    print(f"A/A' called worse in {flagged} of {args.rounds} rounds (between-run cv {args.aa_between_run_cv})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
