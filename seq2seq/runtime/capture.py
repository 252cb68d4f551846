"""Recording CUDA graphs as the graphed training and search do: a graph that recorded nothing is
refused, since its replays would silently do nothing (work on another device or stream: CUDA only
warns), and the stream is left as it was also when a capture fails."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

EMPTY = "The CUDA Graph is empty"  # the start of CUDA graph capture's warning
REFUSED = "the CUDA graph recorded nothing (work on another device or stream)"


class Recorder:
    """Captures CUDA graphs into one memory pool, all from one side stream (a pool reuses its
    blocks between captures from the same stream). Unlike `torch.cuda.graph`, it keeps the
    device's and the pinned host's caches: emptying them at every capture costs a synchronising
    free per cached block and allocations anew after it, and these graphs read no pinned memory."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.pool = torch.cuda.graph_pool_handle()

    def renew(self) -> None:
        """A new pool for later captures: a failed capture's or forgotten graphs' blocks may
        outlive them in the old one."""
        self.pool = torch.cuda.graph_pool_handle()

    @contextlib.contextmanager
    def recording(self, graph: Any) -> Iterator[None]:
        """Capture the block into ``graph``; a RuntimeError where CUDA refuses or nothing was
        recorded (nothing ran either way)."""
        torch.cuda.synchronize(self.device)  # as torch.cuda.graph: nothing queued is in flight
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with torch.cuda.stream(self.stream):
                graph.capture_begin(self.pool, capture_error_mode="thread_local")
                try:
                    yield
                finally:
                    graph.capture_end()  # raises where the capture was invalidated
        empty = False
        for warning in seen:  # the others, as they were
            if str(warning.message).startswith(EMPTY):
                empty = True
            else:
                warnings.warn_explicit(
                    warning.message, warning.category, warning.filename, warning.lineno
                )
        if empty:
            raise RuntimeError(REFUSED)
