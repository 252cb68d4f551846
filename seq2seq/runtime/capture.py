"""Recording a CUDA graph as the graphed training and search do: the stream left as it was also
when the capture fails (`torch.cuda.graph`'s exit raises before it leaves its side stream), and a
graph that recorded nothing refused, since its replays would silently do nothing (work on another
device or stream: CUDA only warns)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

EMPTY = "The CUDA Graph is empty"  # the start of CUDA graph capture's warning


@contextlib.contextmanager
def recording(graph: Any, pool: Any, device: torch.device | None = None) -> Iterator[None]:
    """Capture the block into ``graph`` (memory from ``pool``); a RuntimeError where CUDA refuses
    or nothing was recorded (nothing ran either way)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with (
            torch.cuda.stream(torch.cuda.current_stream(device)),
            torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"),
        ):
            yield
    empty = False
    for warning in seen:  # the others, as they were
        if str(warning.message).startswith(EMPTY):
            empty = True
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    if empty:
        raise RuntimeError("the CUDA graph recorded nothing (work on another device or stream?)")
