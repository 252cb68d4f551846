"""Recording CUDA graphs as the graphed training and search do: a graph that recorded nothing is
refused, since its replays would silently do nothing (work on another device or stream: CUDA only
warns), and a failed capture leaves the stream and the random generators as they were."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

EMPTY = "The CUDA Graph is empty"  # the start of CUDA graph capture's warning
MODE = "thread_local"  # other threads (a server's, the heatmaps') may go on while one captures
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
        with torch.cuda.stream(self.stream):
            graph.capture_begin(self.pool, capture_error_mode=MODE)
            try:
                yield
            except BaseException:
                with contextlib.suppress(RuntimeError):  # the block's error is the one to see
                    graph.capture_end()
                self._recover()
                raise
            try:
                with warnings.catch_warnings(record=True) as seen:  # only here: other threads
                    warnings.simplefilter("always")
                    graph.capture_end()  # raises where CUDA invalidated the capture
            except RuntimeError:
                self._recover()
                raise
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

    def _recover(self) -> None:
        """What a failed capture leaves behind, undone as far as torch lets it: the caching
        allocator still routing to its pool (so no freed block's events are processed again) and,
        where torch lacks per-capture generator states (2.13 has them), CUDA's random generators
        left capturing, which refuses eager random numbers and every replay until a capture ends
        well. Best effort: the capture's own error is the one raised."""
        index = None if self.device is None else self.device.index
        with contextlib.suppress(RuntimeError, AttributeError):  # a private call of torch's
            torch._C._cuda_endAllocateToPool(
                torch.cuda.current_device() if index is None else index, self.pool
            )
        with contextlib.suppress(RuntimeError):
            mark, graph = torch.zeros(1, device=self.device), torch.cuda.CUDAGraph()
            with torch.cuda.stream(torch.cuda.Stream(self.device)):
                graph.capture_begin(torch.cuda.graph_pool_handle(), capture_error_mode=MODE)
                mark.add_(1)
                graph.capture_end()
