"""A stop signal that lands inside loguru's lock bookkeeping (common/log_lock.py::release_after_signal).

loguru 0.7.3 marks a handler's lock as held before entering the ``try`` that unmarks it; a signal
whose handler raises (run_inference.py's) in that window leaves the mark, and every later line on
the thread fails: a Ctrl-C at start-up then ends in exit 1 and loguru's traceback, not 130. The
window is a few bytecodes wide, so this test leaves the same state by hand, shows the
failure with this loguru, then the report's release and its line.
"""

from __future__ import annotations

import sys
import threading

import pytest
from loguru import logger

from common.log_lock import release_after_signal
from tools.logger import LOG_FILE_NAME, init_logger


def _restore_default() -> None:
    """loguru's own default (stderr, every level), as other tests in this process find it."""
    logger.remove()
    logger.add(sys.stderr)


def _marks():
    return [h._lock_acquired for h in logger._core.handlers.values()]


def test_a_mark_left_by_a_signal_is_released_and_the_report_line_is_written(tmp_path):
    init_logger(tmp_path)
    try:
        logger.info("before the signal")
        for mark in _marks():
            mark.acquired = True  # the state a signal between loguru's mark and its try leaves
        with pytest.raises(RuntimeError, match="Could not acquire internal lock"):
            logger.error("step 'init' failed: interrupted by SIGINT")
        release_after_signal()
        assert not any(getattr(mark, "acquired", False) for mark in _marks())
        logger.error("step 'init' failed: interrupted by SIGINT")
        text = (tmp_path / LOG_FILE_NAME).read_text(encoding="utf-8")
        assert "before the signal" in text and text.count("step 'init' failed: interrupted by SIGINT") == 1
    finally:
        _restore_default()


def test_release_leaves_unmarked_handlers_and_no_handlers_alone(tmp_path):
    logger.remove()
    release_after_signal()  # no handler: nothing to do
    init_logger(tmp_path)
    try:
        release_after_signal()
        logger.info("still logging")
        assert "still logging" in (tmp_path / LOG_FILE_NAME).read_text(encoding="utf-8")
    finally:
        _restore_default()


def test_release_clears_this_threads_mark_only(tmp_path):
    """run.py releases on its main thread while its host workers log: a worker's mark is its own."""
    init_logger(tmp_path)
    try:
        held, go, seen = threading.Event(), threading.Event(), []

        def worker() -> None:
            for mark in _marks():
                mark.acquired = True  # a worker inside loguru's bookkeeping at the moment of the release
            held.set()
            go.wait(10)
            seen.extend(getattr(mark, "acquired", False) for mark in _marks())
            for mark in _marks():
                mark.acquired = False

        thread = threading.Thread(target=worker)
        thread.start()
        assert held.wait(10)
        for mark in _marks():
            mark.acquired = True  # and the main thread's stale mark
        release_after_signal()
        assert not any(getattr(mark, "acquired", False) for mark in _marks())
        go.set()
        thread.join(10)
        assert seen and all(seen)  # the worker's marks untouched
        logger.info("the main thread logs again")
        assert "the main thread logs again" in (tmp_path / LOG_FILE_NAME).read_text(encoding="utf-8")
    finally:
        _restore_default()
