"""Luong's local attention (Luong et al. 2015, section 3.2): the Luong score inside a window of
``2 D + 1`` source positions around a centre p_t, exactly 0 outside it.

local-m takes p_t = t, the target position (monotonic alignment), kept inside the sentence;
local-p predicts p_t = S sigmoid(v_p . tanh(W_p h_t)) from the decoder state (S: the sentence's
source length) and multiplies the weights by a Gaussian exp(-(s - p_t)^2 / (2 sigma^2)) with
sigma = D / 2, as the paper does, so its weights sum to at most 1. Both score every position and
then mask (at these lengths that is cheaper than gathering windows); the window is the mask.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.model.attention import LuongAttention, energy_vector
from seq2seq.model.linear import Linear


class LocalMonotonicAttention(LuongAttention):
    """local-m: the window centred on the target position t (at most the last source position)."""

    positional = True

    def __init__(
        self,
        size: int,
        query_size: int,
        memory_size: int,
        score: str = "general",
        scale: bool = True,
        window: int = 10,
        normalizer: str = "softmax",
    ) -> None:
        super().__init__(size, query_size, memory_size, score, scale, normalizer)
        self.window = window

    def centres(self, query: Tensor, positions: Tensor, lengths: Tensor) -> Tensor:
        """p_t [B, T] of queries [B, T, Q] at target positions [T], source lengths [B]."""
        last = (lengths - 1).float().unsqueeze(1)  # [B, 1]; fp32: positions stay exact
        return torch.minimum(positions.float().unsqueeze(0), last)

    def reweight(self, weights: Tensor, distance: Tensor) -> Tensor:
        """Weights [B, T, S] after the window's normalizer; s - p_t [B, T, S]."""
        return weights

    def weights(
        self,
        query: Tensor,
        keys: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> Tensor:
        if positions is None:  # sequence mode from the first target position
            positions = torch.arange(query.size(1), device=query.device)
        centre = self.centres(query, positions, mask.sum(-1))  # [B, T]
        source = torch.arange(mask.size(1), device=query.device, dtype=torch.float32)  # [S]
        distance = source - centre.unsqueeze(-1)  # [B, T, S]
        window = mask.unsqueeze(1) & (distance.abs() <= self.window)  # [B, T, S]
        weights = self.reweight(self.normalize(self.scores(query, keys), window), distance)
        return weights.unsqueeze(1)  # [B, 1, T, S]


class LocalPredictiveAttention(LocalMonotonicAttention):
    """local-p: p_t predicted from the query; weights times a Gaussian of sigma = window / 2."""

    def __init__(
        self,
        size: int,
        query_size: int,
        memory_size: int,
        score: str = "general",
        scale: bool = True,
        window: int = 10,
        normalizer: str = "softmax",
    ) -> None:
        super().__init__(size, query_size, memory_size, score, scale, window, normalizer)
        self.position_layer = Linear(query_size, size, bias=False)  # W_p
        self.position_energy = energy_vector(size)  # v_p

    def centres(self, query: Tensor, positions: Tensor, lengths: Tensor) -> Tensor:
        gate = torch.sigmoid(torch.tanh(self.position_layer(query)) @ self.position_energy)
        return lengths.float().unsqueeze(1) * gate.float()  # [B, T] in [0, S]

    def reweight(self, weights: Tensor, distance: Tensor) -> Tensor:
        sigma = self.window / 2
        return weights * torch.exp(-(distance**2) / (2 * sigma**2))
