"""How an entry point (run.py on the host, run_inference.py in the case's container) ends its process.

``leave(code)`` ends it with ``code`` without the interpreter's own teardown when nothing is left for
that teardown to do: unloading every module takes time that whoever waits on the process spends for
nothing (once torch is imported, most of a second; bench/container_exit.py measures it). Every exit
handler has run first (``logging``'s, ``multiprocessing``'s, a tracer's), every loguru sink is closed
(so flushed), and stdout and stderr are flushed. With another thread alive that the interpreter would
join (not a daemon), the process ends as usual, joining it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def leave(code: int) -> NoReturn:
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    loguru = sys.modules.get("loguru")
    if loguru is not None:
        loguru.logger.remove()  # closes (and so flushes) every file sink
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
