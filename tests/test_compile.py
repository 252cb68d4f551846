"""The compiled path (torch.compile of the decoder's per-step work) computes what eager does.

Tolerance: 1e-5 absolute and 1e-4 relative on the loss, every gradient and the search scores
(compiled kernels fuse and reorder float operations); the same tokens.
"""

from __future__ import annotations

import copy

import pytest
import torch
from model_helpers import SETUPS, HandBatch, assert_same, loss_of, tiny_model
from torch._dynamo.utils import counters

from seq2seq.config import DecodeConfig
from seq2seq.decoding.search import beam_search, greedy_search
from seq2seq.model import Seq2Seq
from seq2seq.runtime.engine import Engine


def trained_once(model: Seq2Seq) -> tuple[tuple[torch.Tensor, torch.Tensor], list[torch.Tensor]]:
    """(loss, NLL) of a batch and every parameter's gradient (dropout is 0)."""
    model.train()
    loss, nll = loss_of(model, HandBatch(), 0.1)
    loss.backward()
    return (loss.detach(), nll), [p.grad for p in model.parameters()]


def searched(model: Seq2Seq) -> list[list]:
    model.eval()
    batch = HandBatch(seed=3)
    cfg = DecodeConfig(beam_size=3, alpha=0.6, nbest=3, max_len_a=1.0, max_len_b=4)
    greedy = greedy_search(model, batch.src, batch.src_lengths, cfg)
    return [[h] for h in greedy] + beam_search(model, batch.src, batch.src_lengths, cfg)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bahdanau", "luong-feed", "multihead"])
def test_compiled_steps_equal_eager(name: str) -> None:
    eager = tiny_model(**SETUPS[name])
    compiled = copy.deepcopy(eager)
    Engine.create("cpu").compile(compiled)
    counters.clear()
    (loss, grads), (want_loss, want_grads) = trained_once(compiled), trained_once(eager)
    assert counters["stats"]["unique_graphs"] > 0  # the compiled path ran
    torch.testing.assert_close(loss, want_loss, atol=1e-5, rtol=1e-4)
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    for got, want in zip(searched(compiled), searched(eager), strict=True):
        for a, b in zip(got, want, strict=True):
            assert_same(a, b)
