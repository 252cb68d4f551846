"""A full disk must not bury a run in tracebacks: each output that fails says so once.

Python's logging prints a traceback for every record a handler fails to write (a training run
logs hundreds): a failed log file is dropped after one line, and log lines go on to the terminal.
TensorBoard's event writer thread prints the traceback of a failed write before the monitor hears
of it; the monitor says it once and goes on without events. Checkpoints are written atomically
and their failures stop the run with one line (seq2seq.runtime.checkpoint).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading


def guard_log_files(logger: logging.Logger | None = None) -> None:
    """Make each file handler of ``logger`` (the root logger) drop itself on a failed write."""
    logger = logger or logging.getLogger()
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler) and not hasattr(handler, "seq2seq_guarded"):
            handler.seq2seq_guarded = True
            handler.handleError = _dropper(handler, logger)


def _dropper(handler: logging.FileHandler, logger: logging.Logger):
    def drop(record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if handler not in logger.handlers:
            return
        logger.removeHandler(handler)
        reason = getattr(error, "strerror", None) or error
        print(
            f"cannot write the log file {handler.baseFilename} ({reason}): log lines go to "
            "the terminal only",
            file=sys.stderr,
            flush=True,
        )
        with contextlib.suppress(Exception):
            handler.close()

    return drop


def quiet_event_writer_threads() -> None:
    """TensorBoard writes events from a thread of its own, which prints the traceback of a failed
    write before the monitor hears of it (at its next call): keep that thread's OSErrors quiet."""
    hook = threading.excepthook
    if getattr(hook, "seq2seq", False):
        return

    def quiet(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.exc_value, OSError) and "AsyncWriter" in type(args.thread).__name__:
            return
        hook(args)

    quiet.seq2seq = True
    threading.excepthook = quiet
