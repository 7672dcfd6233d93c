"""Code both sides share: the host side (``utils/``, ``run.py``) and the container side
(``tools/``, ``run_inference.py``, engines, cases, monitors) import it, and it imports
neither of them.

- ``errors``: typed errors carrying exit codes (config 2, data 3, engine 4, host 5)
- ``yamlio``: strict, bounded YAML reading
- ``files``: atomic writes and content hashes
- ``stats``: latency statistics
- ``record``: the result files' names and the raw-latency file
- ``sampler``, ``sys_monitor``: the monitor loop and the system monitor
"""

from pathlib import Path as _Path

# The one place the version is written: common/VERSION (pyproject.toml reads it too).
__version__ = _Path(__file__).with_name("VERSION").read_text(encoding="utf-8").strip()
