"""torch.cuda's graph capture stood in for on the CPU: the captured block runs as it is (its
work done once, eagerly), replays are counted, new memory pools are counted, and a capture can
be made to warn or be refused as CUDA would."""

from __future__ import annotations

import contextlib
import warnings

import torch


class StandInStream:
    def wait_stream(self, other) -> None:
        pass


class StandInGraph:
    """A `torch.cuda.CUDAGraph` whose capture records nothing: its end warns what ``said``
    holds, and ``refusal`` (a message) makes its start fail as CUDA's does."""

    def __init__(self, capturing: StandInCapture) -> None:
        self.capturing, self.replays = capturing, 0

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        self.capturing.pools_used.append(pool)
        if self.capturing.refusal:
            raise RuntimeError(self.capturing.refusal)

    def capture_end(self) -> None:
        self.capturing.ended += 1
        for text in self.capturing.said:
            warnings.warn(text, UserWarning, stacklevel=1)

    def replay(self) -> None:
        self.replays += 1


class StandInCapture:
    """Patches torch.cuda's streams, pools, synchronisation and graphs with stand-ins."""

    def __init__(self, monkeypatch, *said: str, refusal: str = "") -> None:
        self.said, self.refusal = said, refusal
        self.pools, self.pools_used, self.ended = 0, [], 0
        for name, value in (
            ("CUDAGraph", lambda: StandInGraph(self)),
            ("stream", lambda stream: contextlib.nullcontext()),
            ("current_stream", lambda device=None: StandInStream()),
            ("Stream", lambda device=None: StandInStream()),
            ("synchronize", lambda device=None: None),
            ("current_device", lambda: 0),
            ("graph_pool_handle", self.pool),
        ):
            monkeypatch.setattr(torch.cuda, name, value)

    def pool(self) -> int:
        self.pools += 1
        return self.pools
