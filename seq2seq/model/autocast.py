"""What the model asks of autocast: the dtype its products run in, so that loop-invariant tensors
are cast once per batch instead of once per time step (autocast caches casts of parameters only)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def compute_dtype(device: torch.device) -> torch.dtype | None:
    """The autocast dtype on ``device`` when autocast is on there, else None."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None


def cast(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``tensor`` in ``dtype`` (unchanged for None)."""
    return tensor if dtype is None else tensor.to(dtype)


def run_rnn(rnn: nn.RNNBase, dtype: torch.dtype | None, *inputs: Any) -> Any:
    """``rnn(*inputs)`` (tensors or a packed sequence) in ``dtype``: its weights and inputs cast
    here, autocast off for the call, which would leave it in fp32 on a CPU and run cuDNN's in
    fp16 on CUDA whatever autocast's dtype (`_cudnn_rnn`'s autocast wrapper). None: as it is."""
    if dtype is None:
        return rnn(*inputs)
    weights = {name: p.to(dtype) for name, p in rnn.named_parameters()}
    cast = tuple(x.to(dtype) for x in inputs)
    with torch.autocast(cast[0].data.device.type, enabled=False):
        return torch.func.functional_call(rnn, weights, cast)
