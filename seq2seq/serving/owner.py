"""The thread that owns the model: the process's main thread, which decodes while the HTTP event
loop runs on a second thread.

The same batches decoded markedly slower on a worker thread of the server than on its main
thread, for a cause not found (docs/serving.md, "Why the model runs on the main thread"). So the
model stays on the main thread and the event loop moves instead.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

_STOP = None


class MainThreadExecutor(Executor):
    """An executor whose work runs on the thread that calls `run_until` (the main thread), one
    item at a time, in the order submitted."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue = queue.SimpleQueue()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        self._work.put((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop `run_until` after the item it is running (called from any thread)."""
        self._work.put(_STOP)

    def run_until(self, thread: threading.Thread) -> None:
        """Run submitted work on this thread until `shutdown`, or until ``thread`` has ended
        (the HTTP server's: nothing can submit after it)."""
        while thread.is_alive():
            try:
                item = self._work.get(timeout=0.2)  # also lets signal handlers run
            except queue.Empty:
                continue
            if item is _STOP:
                return
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the awaiting request, as an executor does
                future.set_exception(e)
