"""How a vendor's monitor is driven: its protocol, declared in the monitor's own file.

``docker_images/<vendor>/<vendor>_monitor.py`` speaks one of two protocols:

- ``SAMPLER``, InferPerf's: ``python3 -m docker_images.<vendor>.<vendor>_monitor --output FILE
  --interval S [--devices D]`` appends one JSON line per sample until SIGTERM
  (``common/sampler.py`` is the loop);
- ``DAEMON``, FlagPerf's: ``python3 <vendor>_monitor.py -o start|stop -l DIR`` starts and
  stops a daemon that writes ``DIR/<vendor>_monitor.log``; the lifecycle runs it under
  ``common/daemon_monitor.py``.

A monitor declares its protocol with a module-level assignment::

    MONITOR_PROTOCOL = "sampler"   # or "daemon"

read from the file's syntax tree (the host never imports a vendor's code). A file that
declares nothing follows one rule: built on ``common.sampler`` (it imports it) it is a
sampler, otherwise FlagPerf's daemon, so FlagPerf's monitors run unchanged.
"""

from __future__ import annotations

import ast
from pathlib import Path

from common.declarations import declared as declared_literal
from common.errors import ConfigError

SAMPLER = "sampler"
DAEMON = "daemon"
PROTOCOLS = (SAMPLER, DAEMON)
DECLARATION = "MONITOR_PROTOCOL"


def monitor_protocol(path: Path, source: str | None = None) -> str:
    """The protocol of the monitor file ``path`` (``source`` names it in messages).

    A missing or unparsable file reads as a sampler: starting it then fails with its own
    error, which the lifecycle reports. A declaration that is not one of ``PROTOCOLS`` is
    a ConfigError naming the file."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return SAMPLER
    declared = declared_literal(tree, DECLARATION)
    if declared is not None:
        if declared not in PROTOCOLS:
            raise ConfigError(
                f"{source or path}: {DECLARATION} must be {' or '.join(repr(p) for p in PROTOCOLS)}, got {declared!r}"
            )
        return declared
    return SAMPLER if _imports_sampler(tree) else DAEMON


def _imports_sampler(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in ("common.sampler", "common"):
            if node.module == "common.sampler" or any(alias.name == "sampler" for alias in node.names):
                return True
        if isinstance(node, ast.Import) and any(alias.name == "common.sampler" for alias in node.names):
            return True
    return False
