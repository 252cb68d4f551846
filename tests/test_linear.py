"""The model's products: oneDNN's fp32 path equals F.linear (values and gradients), and leaves
autocast and other dtypes to PyTorch, as it leaves everything outside a ``products`` block."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from seq2seq.model import build_model
from seq2seq.model import linear as products
from seq2seq.model.config import BahdanauConfig, LuongConfig, ModelConfig
from seq2seq.model.linear import Linear, linear, pytorch_products
from seq2seq.runtime.kernels import fastest_products, time_products

needs_onednn = pytest.mark.skipif(
    not products.onednn_available(), reason="this torch has no oneDNN linear kernel"
)


@pytest.fixture
def calls(monkeypatch) -> list[tuple[int, ...]]:
    """The shapes of every oneDNN product."""
    monkeypatch.setattr(products, "MIN_WORK", 1)  # the tests' products are small
    seen: list[tuple[int, ...]] = []
    op = products._ONEDNN_OP

    def counted(x, weight, *args):
        seen.append((*x.shape, weight.size(0)))
        return op(x, weight, *args)

    monkeypatch.setattr(products, "_ONEDNN_OP", counted)
    return seen


@needs_onednn
@pytest.mark.parametrize("shape", [(7, 13), (3, 5, 13)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("sliced", [True, False])
def test_values_and_gradients_equal_f_linear(shape, bias, sliced, calls) -> None:
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    wide = torch.randn(11, 20, requires_grad=True)
    weight = wide[:, 4:17] if sliced else wide[:, :13].detach().clone().requires_grad_()
    b = torch.randn(11, requires_grad=True) if bias else None
    leaves = [t for t in (x, wide if sliced else weight, b) if t is not None]
    grad_out = torch.randn(*shape[:-1], 11)

    with products.products("onednn"):  # the backward takes the forward's path
        out = linear(x, weight, b)
    got = torch.autograd.grad(out, leaves, grad_out)
    assert len(calls) == 3  # forward, the input's gradient, the weight's gradient
    want_out = F.linear(x, weight, b)
    want = torch.autograd.grad(want_out, leaves, grad_out)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-5)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_autocast_other_dtypes_and_the_switch_use_pytorch(calls) -> None:
    x, layer = torch.randn(4, 8), Linear(8, 3)
    with products.products("onednn"):
        _other_paths_use_pytorch(x, layer, calls)


def _other_paths_use_pytorch(x: torch.Tensor, layer: Linear, calls: list) -> None:
    """Inside a oneDNN block: autocast, bf16, the switch, empty and small products."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16
    assert layer.to(torch.bfloat16)(x.bfloat16()).dtype == torch.bfloat16
    layer.float()
    with pytorch_products():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=0, atol=0)
    assert calls == []
    assert linear(torch.empty(0, 8), layer.weight).shape == (0, 3)
    assert calls == []
    products.MIN_WORK = 8 * 3 * 5  # a product this small is PyTorch's too
    layer(x)
    assert calls == []


@needs_onednn
@pytest.mark.parametrize("attention", [BahdanauConfig(size=24), LuongConfig(size=24)])
def test_a_training_step_matches_pytorch_products(attention, calls) -> None:
    """The whole model's loss and gradients, oneDNN against PyTorch's own products."""
    cfg = ModelConfig(emb_size=16, hidden_size=24, dropout=0.0, attention=attention)
    torch.manual_seed(0)
    model = build_model(OmegaConf.structured(cfg), 30, 40)
    src = torch.randint(4, 30, (6, 9))
    tgt = torch.randint(4, 40, (6, 7))
    tgt_in = torch.cat([torch.full((6, 1), 2), tgt[:, :-1]], 1)

    def step() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        loss, _ = model(src, torch.full((6,), 9), tgt_in, tgt, 0.1)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    with products.products("onednn"):
        loss, grads = step()
    assert len(calls) > 10
    with pytorch_products():
        want_loss, want_grads = step()
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_the_fastest_products_are_timed_on_both_paths_and_change_nothing(calls) -> None:
    model = build_model(
        ModelConfig(emb_size=16, hidden_size=24, attention=BahdanauConfig(size=24)), 50, 60
    )
    for training in (True, False):
        name, seconds = fastest_products(model, training)
        if products.onednn_available():
            assert set(seconds) == set(products.PRODUCTS)
            assert seconds[name] == min(seconds.values())
        else:
            assert (name, seconds) == ("pytorch", {})
    calls.clear()
    x, w = torch.randn(64, 24), torch.randn(24, 24)
    linear(x, w)  # outside a products block: PyTorch's, whatever was timed
    assert calls == []
    with products.products("onednn"):
        linear(x, w)
    assert len(calls) == int(products.onednn_available())
    with pytest.raises(ValueError, match="onednn, pytorch"), products.products("mkl"):
        pass


@needs_onednn
def test_a_searchs_timing_runs_forward_products_only(calls) -> None:
    """A search only multiplies forward: its timing runs no backward product (a third of the
    training timing's oneDNN calls at the same rows)."""
    model = torch.nn.Sequential(Linear(8, 4), Linear(4, 6))
    time_products(model, rows=(3,), repeats=1, backward=False)
    assert calls == [(3, 4, 6), (3, 8, 4)] * 2  # two passes: warm-up and timed
    calls.clear()
    time_products(model, rows=(3,), repeats=1)
    assert len(calls) == 3 * 4
