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


def test_a_failed_capture_is_ended_and_followed_by_one_that_ends_well(monkeypatch) -> None:
    """A capture CUDA invalidates (an operation it does not allow) raises the block's error, not
    the one its end raises then; the capture is ended, so that the stream is not left capturing,
    and a small capture into a pool of its own follows, which takes CUDA's random generators out
    of the capturing state a failed capture leaves them in (torch before per-capture states)."""
    capturing = StandInCapture(monkeypatch)
    graph, ended = torch.cuda.CUDAGraph(), []

    def invalidated() -> None:
        ended.append(True)
        raise RuntimeError("operation failed due to a previous error during capture")

    graph.capture_end = invalidated
    with pytest.raises(RuntimeError, match="not permitted"), Recorder().recording(graph):
        raise RuntimeError("operation not permitted when stream is capturing")
    assert ended == [True]
    assert capturing.pools_used == [1, 2] and capturing.ended == 1  # the recovery's capture


def test_a_capture_whose_end_fails_is_followed_by_one_that_ends_well(monkeypatch) -> None:
    capturing = StandInCapture(monkeypatch)
    graph = torch.cuda.CUDAGraph()

    def invalidated() -> None:
        raise RuntimeError("capture invalidated")

    graph.capture_end = invalidated
    with pytest.raises(RuntimeError, match="invalidated"), Recorder().recording(graph):
        pass
    assert capturing.pools_used == [1, 2] and capturing.ended == 1
