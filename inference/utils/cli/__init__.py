"""run.py's host-side rooms, one per concern: the command line (``args.py``), the cases it picks
(``cases.py``), the stop signals (``stops.py``), the hosts' threads (``hosts.py``), the summary and
exit status (``summary.py``), ``run.py ab`` (``ab.py``) and the subcommands that need no hosts
(``subcommands.py``). What joins them with the container side's case checks is ``entry/``."""

from pathlib import Path

INFERENCE_DIR = Path(__file__).resolve().parents[2]
