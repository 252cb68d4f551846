"""`seq2seq.runtime.capture.recording`, with torch.cuda's capture stood in for on the CPU: a
graph that recorded nothing is refused (its replays would do nothing), other warnings pass."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

from seq2seq.runtime.capture import EMPTY, recording


def stand_in_capture(monkeypatch, *said: str) -> None:
    """torch.cuda's stream and graph contexts as no-ops; the graph's end warns ``said``."""

    @contextlib.contextmanager
    def graph(*args, **kwargs):
        yield
        for text in said:
            warnings.warn(text, UserWarning, stacklevel=1)

    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)


def test_a_graph_that_recorded_nothing_is_refused(monkeypatch) -> None:
    stand_in_capture(monkeypatch, f"{EMPTY}. This usually means ...")
    with pytest.raises(RuntimeError, match="recorded nothing"), recording(None, None):
        pass


def test_a_recorded_graph_passes_and_other_warnings_are_kept(monkeypatch) -> None:
    stand_in_capture(monkeypatch, "something else")
    with pytest.warns(UserWarning, match="something else"), recording(None, None):
        pass
