"""`seq2seq.runtime.capture.Recorder`, with torch.cuda's capture stood in for on the CPU: a
graph that recorded nothing is refused (its replays would do nothing), other warnings pass, and
every capture of a recorder takes its one pool until it is renewed."""

from __future__ import annotations

import pytest
import torch
from capture_helpers import StandInCapture

from seq2seq.runtime.capture import EMPTY, Recorder


def test_a_graph_that_recorded_nothing_is_refused(monkeypatch) -> None:
    StandInCapture(monkeypatch, f"{EMPTY}. This usually means ...")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="recorded nothing"), Recorder().recording(graph):
        pass


def test_a_recorded_graph_passes_and_other_warnings_are_kept(monkeypatch) -> None:
    StandInCapture(monkeypatch, "something else")
    graph = torch.cuda.CUDAGraph()
    with pytest.warns(UserWarning, match="something else"), Recorder().recording(graph):
        pass


def test_captures_share_the_pool_until_it_is_renewed(monkeypatch) -> None:
    capturing = StandInCapture(monkeypatch)
    recorder = Recorder()
    for renew in (False, False, True, False):
        if renew:
            recorder.renew()
        with recorder.recording(torch.cuda.CUDAGraph()):
            pass
    assert capturing.pools_used == [1, 1, 2, 2]


def test_an_error_inside_a_capture_still_ends_it(monkeypatch) -> None:
    """A capture CUDA invalidates (an operation it does not allow) raises, and the capture is
    ended, so that the stream is not left capturing."""
    StandInCapture(monkeypatch)
    ended = []
    graph = torch.cuda.CUDAGraph()
    graph.capture_end = lambda: ended.append(True)
    with pytest.raises(RuntimeError, match="not permitted"), Recorder().recording(graph):
        raise RuntimeError("operation not permitted when stream is capturing")
    assert ended == [True]
