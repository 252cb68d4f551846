"""The model's matrix products: fp32 on the CPU through oneDNN or PyTorch's BLAS, whichever is
faster on this CPU (chosen by the runtime, `seq2seq.runtime.kernels`, and in force inside a
``products`` block); everything else, and everything outside such a block, through F.linear.

PyTorch multiplies fp32 matrices on the CPU with its BLAS (MKL). oneDNN (the library PyTorch
already uses for bf16) does the same arithmetic much faster on some CPUs and slower on others
(docs/performance.md, "Where fp32 comes from"), so the runtime times both on the model's own
shapes.
Small products (``MIN_WORK``), bf16/fp16, autocast, GPUs and torch.compile keep PyTorch's path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_ONEDNN_OP = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
# rows x in x out below which a oneDNN call (and this module's autograd step) costs more than it
# saves (twice the break-even measured: docs/performance.md, "Where fp32 comes from")
MIN_WORK = 2**22


def _plain(matrix: Tensor) -> Tensor:
    """``matrix`` laid out row- or column-major: oneDNN multiplies other strides (a slice of a
    wider weight's columns) hundreds of times slower."""
    if matrix.is_contiguous() or matrix.t().is_contiguous():
        return matrix
    return matrix.contiguous()


def _onednn(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x [N, in] @ weight[out, in].T (+ bias) -> [N, out], both operands ``_plain``."""
    return _ONEDNN_OP(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """F.linear of 2-d fp32 host tensors, forward and backward products in oneDNN."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        x, weight = _plain(x), _plain(weight)
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn(x, weight, bias)  # [N, out]

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        grad = _plain(grad)  # e.g. expanded, from a sum
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _onednn(grad, weight.t(), None)  # [N, out] @ [out, in]
        if ctx.needs_input_grad[1]:
            grad_w = _onednn(grad.t(), x.t(), None)  # [out, N] @ [N, in]
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b


def _takes(x: Tensor, weight: Tensor) -> bool:
    """Whether oneDNN's fp32 path serves these operands."""
    return (
        _ONEDNN.get()
        and x.is_cpu
        and x.dtype == weight.dtype == torch.float32
        and x.numel() * weight.size(0) >= MIN_WORK
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``: x [..., in], weight [out, in] -> [..., out]."""
    if not _takes(x, weight):
        return F.linear(x, weight, bias)
    out = _OneDNNLinear.apply(x.reshape(-1, x.size(-1)), weight, bias)
    return out.view(*x.shape[:-1], weight.size(0))


def takes_onednn(x: Tensor, weight: Tensor) -> bool:
    """Whether `linear` multiplies these operands through oneDNN (decided at the forward; a
    backward made later takes the same path)."""
    return _takes(x, weight)


def product(a: Tensor, b: Tensor, onednn: bool) -> Tensor:
    """``a @ b`` of 2-d tensors, through oneDNN or PyTorch's product."""
    return _onednn(_plain(a), _plain(b.t()), None) if onednn else a @ b


def linear_add(add: Tensor, x: Tensor, weight: Tensor, onednn: bool) -> Tensor:
    """``add + linear(x, weight)`` of 2-d tensors: one ``addmm`` off oneDNN's path."""
    return add + linear(x, weight) if onednn else torch.addmm(add, x, weight.t())


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state-dict keys) whose product is ``linear``; inside a
    teacher-forced loop (`seq2seq.model.recurrence.looping`), the loop's weight's."""

    loop: Callable[[Tensor], Tensor] | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.loop is not None:
            return self.loop(x)
        return linear(x, self.weight, self.bias)


PRODUCTS = ("onednn", "pytorch")  # the fp32 CPU paths; "auto" chooses by measuring both


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's fp32 product."""
    return _ONEDNN_OP is not None and torch.backends.mkldnn.is_available()


# whether this thread's fp32 CPU products go through oneDNN: inside a ``products("onednn")``
# block only (the runtime's choice); the model alone multiplies as nn.Linear does
_ONEDNN: ContextVar[bool] = ContextVar("seq2seq_onednn_products", default=False)


@contextlib.contextmanager
def products(name: str) -> Iterator[None]:
    """fp32 products on the CPU through ``name`` (one of PRODUCTS) inside the block."""
    if name not in PRODUCTS:
        raise ValueError(f"unknown products {name!r}; choose one of {', '.join(PRODUCTS)}")
    token = _ONEDNN.set(name == "onednn" and onednn_available())
    try:
        yield
    finally:
        _ONEDNN.reset(token)


def pytorch_products() -> contextlib.AbstractContextManager:
    """PyTorch's own fp32 products inside the block (graph export, comparisons)."""
    return products("pytorch")
