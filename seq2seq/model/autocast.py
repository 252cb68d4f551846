"""What the model asks of autocast: the dtype its products run in, so that loop-invariant tensors
are cast once per batch instead of once per time step (autocast caches casts of parameters only)."""

from __future__ import annotations

import torch


def compute_dtype(device: torch.device) -> torch.dtype | None:
    """The autocast dtype on ``device`` when autocast is on there, else None."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None


def cast(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``tensor`` in ``dtype`` (unchanged for None)."""
    return tensor if dtype is None else tensor.to(dtype)
