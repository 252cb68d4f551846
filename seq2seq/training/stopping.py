"""A stop asked for by SIGINT/SIGTERM, taken at the next update boundary by every rank at once,
so that training can save last.pt before it exits instead of dying mid-update."""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from seq2seq.runtime.distributed import ProcessGroup

log = logging.getLogger(__name__)


@dataclass
class StopRequest:
    signal: int = 0  # the first SIGINT/SIGTERM this process received
    at: float = 0.0  # when (time.monotonic)


@contextlib.contextmanager
def stop_signals(distributed: bool) -> Iterator[StopRequest]:
    """SIGINT/SIGTERM request a stop at the next update boundary; a second one aborts.

    Under torchrun (``distributed``) a signal often arrives twice at once (Ctrl-C reaches every
    process of the terminal, and the launcher passes it on): a repeat within a second is the same
    one.
    """
    request = StopRequest()
    repeat_window = 1.0 if distributed else 0.0

    def handler(signum: int, _frame: Any) -> None:
        if request.signal:
            if time.monotonic() - request.at > repeat_window:
                raise KeyboardInterrupt
            return
        request.signal, request.at = signum, time.monotonic()
        log.warning("signal %d: stopping after this update (send again to abort)", signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield request
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def agreed_stop(group: ProcessGroup, request: StopRequest) -> int:
    """The signal any rank received (0: none), the same answer on every rank."""
    return group.max_over_ranks(request.signal)
