"""The model's matrix products: fp32 on the CPU through oneDNN or PyTorch's BLAS, whichever is
faster on this CPU; everything else through F.linear.

PyTorch multiplies fp32 matrices on the CPU with its BLAS (MKL). oneDNN (the library PyTorch
already uses for bf16) does the same arithmetic much faster on some CPUs and slower on others
(docs/performance.md, "Where fp32 comes from"), so ``choose_products`` times both on the model's
own shapes.
Small products (``MIN_WORK``), bf16/fp16, autocast, GPUs and torch.compile keep PyTorch's path.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# oneDNN keeps a compiled kernel with its buffers for every matrix shape it meets, up to 1024 of
# them; 64 keeps the speed at a fraction of the memory (docs/performance.md)
KERNEL_CACHE = 64
KERNEL_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"

_ONEDNN_OP = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
_enabled = bool(_ONEDNN_OP is not None and torch.backends.mkldnn.is_available())
# rows x in x out below which a oneDNN call (and this module's autograd step) costs more than it
# saves (twice the break-even measured: docs/performance.md, "Where fp32 comes from")
MIN_WORK = 2**22
_compiling = getattr(torch.compiler, "is_compiling", lambda: False)  # torch < 2.3 lacks it


def limit_kernel_cache(environ: dict[str, str] | None = None) -> str:
    """Keep oneDNN's kernels for at most KERNEL_CACHE shapes: a process setting, made by a
    command (the engine) before its first product, not at import; the environment's own value
    wins. What was done, for the log."""
    environ = os.environ if environ is None else environ
    if KERNEL_CACHE_VARIABLE in environ:
        return f"kernels of {environ[KERNEL_CACHE_VARIABLE]} shapes kept (the environment's)"
    environ[KERNEL_CACHE_VARIABLE] = str(KERNEL_CACHE)
    return f"kernels of {KERNEL_CACHE} shapes kept ({KERNEL_CACHE_VARIABLE}={KERNEL_CACHE})"


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
        _enabled
        and x.is_cpu
        and x.dtype == weight.dtype == torch.float32
        and x.numel() * weight.size(0) >= MIN_WORK
        and not torch.is_autocast_enabled("cpu")
        and not _compiling()
    )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``: x [..., in], weight [out, in] -> [..., out]."""
    if not _takes(x, weight):
        return F.linear(x, weight, bias)
    out = _OneDNNLinear.apply(x.reshape(-1, x.size(-1)), weight, bias)
    return out.view(*x.shape[:-1], weight.size(0))


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state-dict keys) whose product is ``linear``."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


@contextlib.contextmanager
def pytorch_products() -> Iterator[None]:
    """PyTorch's own fp32 products inside the block (to compare the two paths)."""
    global _enabled
    saved, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = saved


PRODUCTS = ("onednn", "pytorch")  # the fp32 CPU paths; "auto" chooses by measuring both


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's fp32 product."""
    return _ONEDNN_OP is not None and torch.backends.mkldnn.is_available()


def use_products(name: str) -> None:
    """Multiply fp32 on the CPU through ``name`` (one of PRODUCTS) from now on."""
    global _enabled
    if name not in PRODUCTS:
        raise ValueError(f"unknown products {name!r}; choose one of {', '.join(PRODUCTS)}")
    _enabled = name == "onednn" and onednn_available()


def current_products() -> str:
    """The fp32 CPU path in use."""
    return "onednn" if _enabled else "pytorch"


# Rows of the products timed: a decoding step of 64 sentences, a beam of 5 over them, and the
# projections of all steps at once in training (~1,000 target pieces); a smaller probe chose the
# slower path (docs/performance.md, "Levers")
ROWS = (64, 320, 1024)


def time_products(
    model: nn.Module, rows: tuple[int, ...] = ROWS, repeats: int = 3
) -> dict[str, float]:
    """Seconds (median of ``repeats``) of one forward and backward product through each of the
    model's distinct ``Linear`` shapes at each row count of ``rows``, on each path."""
    global _enabled
    shapes = sorted(
        {(m.in_features, m.out_features) for m in model.modules() if isinstance(m, Linear)}
    )
    inputs = [
        (torch.randn(n, i, requires_grad=True), torch.randn(o, i, requires_grad=True))
        for n in rows
        for i, o in shapes
    ]
    saved, seconds = _enabled, {}
    try:
        for name in PRODUCTS:
            use_products(name)
            laps = []
            for _ in range(repeats + 1):  # the first pass warms caches up
                start = time.perf_counter()
                for x, w in inputs:
                    linear(x, w).sum().backward()
                laps.append(time.perf_counter() - start)
            seconds[name] = statistics.median(laps[1:])
    finally:
        _enabled = saved
    return seconds


def choose_products(model: nn.Module) -> tuple[str, dict[str, float]]:
    """The faster fp32 CPU path for this model on this CPU (PyTorch's where oneDNN is absent),
    and the timings it was chosen by; switches to it."""
    if not onednn_available():
        use_products("pytorch")
        return "pytorch", {}
    seconds = time_products(model)
    name = min(seconds, key=seconds.__getitem__)
    use_products(name)
    return name, seconds
