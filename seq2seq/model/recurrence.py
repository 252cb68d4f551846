"""The decoder's recurrence in few kernels: the GRU's gates and the products every time step of a
teacher-forced loop makes with the same weight.

On a GPU the decoder's update is thousands of small kernels, one time step after another, and a
replayed CUDA graph runs about as long as it holds kernels. Two rules cut them per step:

- `gru_update` takes CUDA's fused GRU cell (the kernel ``nn.GRUCell`` uses there): one kernel
  forward and one backward instead of about five and a dozen.
- `LoopWeight` multiplies each step by a weight whose gradient is one product over all steps,
  made once the loop's backward is through, instead of a product and an addition per step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.model.autocast import cast
from seq2seq.model.linear import linear, linear_add, product, takes_onednn


def gru_update(gi: Tensor, gh: Tensor, hidden: Tensor) -> Tensor:
    """The next GRU state (``nn.GRU``'s gates r, z, n) from the input projection gi [B, 3H],
    the state's projection gh [B, 3H] (both biases in them) and the state [B, H]."""
    if gi.is_cuda and gi.dtype == gh.dtype == hidden.dtype and not torch.compiler.is_compiling():
        return torch.ops.aten._thnn_fused_gru_cell(gi, gh, hidden)[0]
    size = hidden.size(1)
    gi_rz, gi_n = gi.split([2 * size, size], dim=1)
    gh_rz, gh_n = gh.split([2 * size, size], dim=1)
    r, z = torch.sigmoid(gi_rz + gh_rz).chunk(2, dim=1)  # [B, H] each
    n = torch.tanh(torch.addcmul(gi_n, r, gh_n))  # [B, H]
    return torch.lerp(n, hidden, z)  # (1 - z) * n + z * h


def gru_cell(gi: Tensor, hidden: Tensor, weight_hh: Tensor, bias_hh: Tensor) -> Tensor:
    """One GRU step from the input projection gi [B, 3H] and the state's weights."""
    return gru_update(gi, linear(hidden, weight_hh, bias_hh), hidden)


def upper_layers(rnn: nn.GRU, dtype: torch.dtype | None = None) -> list[tuple[LoopWeight, ...]]:
    """Layers 1 .. L - 1 of a stacked ``rnn``: each one's input and state projections, in
    ``dtype``, for the steps of one loop (none for one layer)."""
    return [
        tuple(
            LoopWeight(
                getattr(rnn, f"weight_{kind}_l{k}"), getattr(rnn, f"bias_{kind}_l{k}"), dtype
            )
            for kind in ("ih", "hh")
        )
        for k in range(1, rnn.num_layers)
    ]


def climb(
    bottom: Tensor,
    previous: list[Tensor],
    upper: list[tuple[LoopWeight, ...]],
    dropout: float,
    training: bool,
) -> list[Tensor]:
    """One step up a stacked GRU from layer 0's new state bottom [B, H]: every layer's new state,
    the bottom first. ``previous``: each layer's state before the step; ``upper``:
    `upper_layers`. Each layer reads the one below after dropout, as ``nn.GRU`` does."""
    states = [bottom]
    for (ih, hh), hidden in zip(upper, previous[1:], strict=True):
        below = F.dropout(states[-1], dropout, training) if dropout else states[-1]
        states.append(gru_update(ih(below), hh(hidden), hidden))
    return states


class _Steps:
    """What the steps' backward hands the weight: their inputs and output gradients."""

    def __init__(self) -> None:
        self.inputs: list[Tensor] = []
        self.grads: list[Tensor] = []
        self.onednn = False  # the steps' products went through oneDNN (the CPU's fp32)


class _Gather(torch.autograd.Function):
    """The weight (and bias) as the loop's steps read them; backward, once every step's has run,
    sums their gradient in one product."""

    @staticmethod
    def forward(ctx, steps: _Steps, weight: Tensor, bias: Tensor | None):
        ctx.set_materialize_grads(False)
        ctx.steps, ctx.has_bias = steps, bias is not None
        if bias is None:
            return weight.view_as(weight)
        return weight.view_as(weight), bias.view_as(bias)

    @staticmethod
    def backward(ctx, *unused: Tensor | None):
        steps = ctx.steps
        if not steps.grads:  # no step reached the loss
            return None, None, None
        grads, inputs = torch.cat(steps.grads), torch.cat(steps.inputs)  # [N, out], [N, in]
        steps.grads, steps.inputs = [], []
        grad_b = grads.sum(0) if ctx.has_bias else None
        return None, product(grads.t(), inputs, steps.onednn), grad_b


class _Step(torch.autograd.Function):
    """``add + x @ weight.T (+ bias)`` of one step; its weight gradient is left to `_Gather`."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, add, steps: _Steps):
        x = x.to(weight.dtype)
        ctx.save_for_backward(x, weight)
        ctx.steps = steps
        steps.onednn = takes_onednn(x, weight)
        return _affine(x, weight, bias, add, steps.onednn)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        ctx.steps.inputs.append(x)
        ctx.steps.grads.append(grad)
        grad_x = product(grad, weight, ctx.steps.onednn) if ctx.needs_input_grad[0] else None
        return grad_x, None, None, grad if ctx.needs_input_grad[3] else None, None


def _affine(
    x: Tensor, weight: Tensor, bias: Tensor | None, add: Tensor | None, onednn: bool
) -> Tensor:
    """``add + linear(x, weight, bias)``, ``add`` in the product's own kernel where it can be."""
    if add is not None and bias is None:
        return linear_add(add, x, weight, onednn)
    out = linear(x, weight, bias)  # which takes oneDNN as ``onednn`` says
    return out if add is None else out + add


class LoopWeight:
    """A weight [out, in] (and bias [out]) that every step of one teacher-forced loop multiplies
    by, in ``dtype`` (autocast's, cast once): ``loop(x, add)`` is ``add + linear(x, W, b)``.
    Its gradient is one product over the steps after their backward; without gradients (or
    with ``defer=False``) each step is a plain product."""

    def __init__(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        dtype: torch.dtype | None = None,
        defer: bool = True,
    ) -> None:
        weight = cast(weight, dtype).contiguous()
        bias = None if bias is None else cast(bias, dtype)
        self.steps = None
        if defer and torch.is_grad_enabled() and weight.requires_grad:
            self.steps = _Steps()
            gathered = _Gather.apply(self.steps, weight, bias)
            weight, bias = gathered if bias is not None else (gathered, None)
        self.weight, self.bias = weight, bias

    def __call__(self, x: Tensor, add: Tensor | None = None) -> Tensor:
        if x.dim() != 2:  # [..., in]: a step's products are of rows
            add = None if add is None else add.reshape(-1, add.size(-1))
            return self(x.reshape(-1, x.size(-1)), add).view(*x.shape[:-1], -1)
        if self.steps is not None:
            return _Step.apply(x, self.weight, self.bias, add, self.steps)
        return _affine(x, self.weight, self.bias, add, takes_onednn(x, self.weight))


@contextlib.contextmanager
def looping(layers: Iterable[nn.Module], dtype: torch.dtype | None = None) -> Iterator[None]:
    """Inside, each of these `Linear` layers multiplies by a `LoopWeight` of its weights (in
    ``dtype``): a teacher-forced loop's steps, one weight-gradient product. Without gradients (a
    validation's loss, int8 inference) the layers stay as they are."""
    looped = list(layers) if torch.is_grad_enabled() else []
    for layer in looped:
        layer.loop = LoopWeight(layer.weight, layer.bias, dtype)
    try:
        yield
    finally:
        for layer in looped:
            layer.loop = None
