"""The decoder's recurrence in few kernels (seq2seq/model/recurrence.py): a loop's weight
gradient summed in one product gives the gradients of a product per step, for every attention
setup, and the loop's backward no longer grows by a weight product per step."""

from __future__ import annotations

import collections
import contextlib
from functools import partial

import pytest
import torch
from model_helpers import SETUPS, HandBatch, loss_of, tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from seq2seq.model import decoder as decoder_module
from seq2seq.model.linear import onednn_available, products, takes_onednn
from seq2seq.model.recurrence import LoopWeight, gru_update


def loop(weights: dict[str, torch.Tensor], steps: int, defer: bool) -> torch.Tensor:
    """A small recurrence h = tanh(add_t + W h + b) through `LoopWeight`; its loss."""
    recur = LoopWeight(weights["w"], weights["b"], defer=defer)
    plain = LoopWeight(weights["v"], defer=defer)  # no bias, an added term instead
    h, outputs = weights["h0"], []
    for t in range(steps):
        h = torch.tanh(plain(h, add=weights["adds"][t]) + recur(h))
        outputs.append(h)
    return torch.stack(outputs).pow(2).sum()


def loop_grads(
    defer: bool, dtype: torch.dtype | None = None, rows: int = 3, size: int = 6
) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    shapes = {
        "w": (size, size),
        "b": (size,),
        "v": (size, size),
        "h0": (rows, size),
        "adds": (5, rows, size),
    }
    weights = {k: torch.randn(s, generator=gen).mul_(size**-0.5) for k, s in shapes.items()}
    weights = {k: w.requires_grad_() for k, w in weights.items()}
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        loop(weights, 5, defer).backward()
    return {k: w.grad for k, w in weights.items()}


@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["fp32", "bf16-autocast"])
def test_a_loop_weight_gives_the_gradients_of_a_product_per_step(dtype) -> None:
    deferred, plain = loop_grads(True, dtype), loop_grads(False, dtype)
    tolerance = 1e-6 if dtype is None else 2e-2
    for name, grad in plain.items():
        assert grad is not None and deferred[name] is not None, name
        torch.testing.assert_close(deferred[name], grad, atol=tolerance, rtol=tolerance, msg=name)


@pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN fp32 product")
def test_a_loop_weight_through_onednn_gives_the_gradients_of_a_product_per_step() -> None:
    """Products large enough for oneDNN's path (the CPU's fp32 products at the model's sizes)."""
    rows, size = 64, 256  # 64 x 256 x 256 = MIN_WORK
    with products("onednn"):
        assert takes_onednn(torch.ones(rows, size), torch.ones(size, size))
        deferred, plain = (loop_grads(defer, rows=rows, size=size) for defer in (True, False))
    for name, grad in plain.items():
        torch.testing.assert_close(deferred[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_without_gradients_a_loop_weight_is_a_plain_product() -> None:
    w, x, add = torch.randn(4, 3, requires_grad=True), torch.randn(2, 3), torch.randn(2, 4)
    with torch.no_grad():
        loop_weight = LoopWeight(w)
        assert loop_weight.steps is None
        torch.testing.assert_close(loop_weight(x, add=add), add + x @ w.t())


def test_the_gru_update_is_nn_grus() -> None:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(5, 4)
    x, h = torch.randn(3, 5), torch.randn(3, 4)
    gi = x @ cell.weight_ih.t() + cell.bias_ih
    gh = h @ cell.weight_hh.t() + cell.bias_hh
    torch.testing.assert_close(gru_update(gi, gh, h), cell(x, h))


def model_grads(name: str, monkeypatch, defer: bool, bf16: bool) -> dict[str, torch.Tensor]:
    with monkeypatch.context() as patch:
        patch.setattr(decoder_module, "LoopWeight", partial(LoopWeight, defer=defer))
        if not defer:  # the attention's and W_c's layers as they are, outside any loop
            patch.setattr(decoder_module, "looping", lambda layers, dtype: contextlib.nullcontext())
        model = tiny_model(**SETUPS[name]).train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = loss_of(model, HandBatch(), 0.1)
        loss.backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("name", sorted(SETUPS))
def test_the_models_gradients_equal_a_product_per_step(name: str, bf16: bool, monkeypatch) -> None:
    """The decoder casts its loop weights to autocast's dtype once; the sums differ in order."""
    deferred, plain = (model_grads(name, monkeypatch, defer, bf16) for defer in (True, False))
    assert deferred.keys() == plain.keys()
    tolerance = 3e-2 if bf16 else 1e-5
    for key, grad in plain.items():
        torch.testing.assert_close(deferred[key], grad, atol=tolerance, rtol=tolerance, msg=key)


class _Ops(TorchDispatchMode):
    """Counts the matrix products dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def backward_products(defer: bool, steps: int) -> int:
    """Matrix products in the backward of a `loop` of ``steps`` steps."""
    gen = torch.Generator().manual_seed(0)
    shapes = {"w": (6, 6), "b": (6,), "v": (6, 6), "h0": (3, 6), "adds": (steps, 3, 6)}
    weights = {k: torch.randn(s, generator=gen).requires_grad_() for k, s in shapes.items()}
    loss = loop(weights, steps, defer)
    with _Ops() as ops:
        loss.backward()
    return sum(ops.counts[op] for op in ("mm", "addmm", "bmm"))


def test_the_loops_backward_makes_no_weight_product_per_step() -> None:
    """A product per step per weight (the state's gradient), the weights' once: a step more adds
    two products, not four."""
    deferred = backward_products(True, 8) - backward_products(True, 4)
    plain = backward_products(False, 8) - backward_products(False, 4)
    assert (deferred, plain) == (2 * 4, 4 * 4)
