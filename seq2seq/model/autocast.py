"""What the model asks of autocast: the dtype its products run in, so that loop-invariant tensors
are cast once per batch instead of once per time step (autocast caches casts of parameters only)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence


def compute_dtype(device: torch.device) -> torch.dtype | None:
    """The autocast dtype on ``device`` when autocast is on there, else None."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None


def cast(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``tensor`` in ``dtype`` (unchanged for None)."""
    return tensor if dtype is None else tensor.to(dtype)


@contextlib.contextmanager
def gru_call(device_type: str) -> Iterator[None]:
    """Around ``torch.gru`` on weights cast or picked out of a module: autocast off (its dtype is
    the caller's), and cuDNN's warning that it copies weights of no flat buffer silenced (these
    are few)."""
    with warnings.catch_warnings(), torch.autocast(device_type, enabled=False):
        warnings.filterwarnings("ignore", "RNN module weights are not part")
        yield


def run_gru(gru: nn.GRU, dtype: torch.dtype | None, input: Any, hx: Tensor | None = None) -> Any:
    """``gru(input, hx)`` (a tensor or a packed sequence) in ``dtype``: weights and inputs cast
    here and ``torch.gru`` called with autocast off, which would leave it in fp32 on a CPU and run
    cuDNN's in fp16 on CUDA whatever autocast's dtype (`_cudnn_rnn`'s autocast wrapper). The
    module is not called with the cast weights: it would flatten its own into a new buffer at its
    next plain call on CUDA, which moves them under a captured graph. None: as it is."""
    if dtype is None:
        return gru(input, hx)
    packed = isinstance(input, PackedSequence)
    weights = [w.to(dtype) for layer in gru.all_weights for w in layer]
    if hx is None:
        rows = int(input.batch_sizes[0]) if packed else input.size(0 if gru.batch_first else 1)
        layers = gru.num_layers * (2 if gru.bidirectional else 1)
        data = input.data if packed else input
        hx = data.new_zeros(layers, rows, gru.hidden_size, dtype=dtype)
    hx = hx.to(dtype)
    flags = (gru.bias, gru.num_layers, gru.dropout, gru.training, gru.bidirectional)
    with gru_call(hx.device.type):
        if not packed:
            return torch.gru(input.to(dtype), hx, weights, *flags, gru.batch_first)
        if input.sorted_indices is not None:
            hx = hx.index_select(1, input.sorted_indices)
        out, h_n = torch.gru(input.data.to(dtype), input.batch_sizes, hx, weights, *flags)
        if input.unsorted_indices is not None:
            h_n = h_n.index_select(1, input.unsorted_indices)
        return PackedSequence(
            out, input.batch_sizes, input.sorted_indices, input.unsorted_indices
        ), h_n
