"""Attention over the encoder memory: Bahdanau (additive), Luong (global) and multi-head.

Every variant has one interface: ``precompute(memory)`` projects keys/values once per batch, then
``forward(query, keys, values, mask)`` serves one decoder step (query [B, Q]) or all steps at once
(query [B, T, Q]). Padded source positions get exactly zero weight.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import LuongScore
from seq2seq.model.linear import Linear


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis; positions where ``mask`` is False get exactly 0."""
    return torch.softmax(torch.where(mask, scores, float("-inf")), dim=-1)


def energy_vector(size: int) -> nn.Parameter:
    """The ``v`` of an additive score, initialised like an ``nn.Linear(size, 1)`` weight."""
    bound = 1 / math.sqrt(size)
    return nn.Parameter(torch.empty(size).uniform_(-bound, bound))


def additive_scores(query: Tensor, keys: Tensor, energy: Tensor) -> Tensor:
    """``v . tanh(q + k)`` for projected queries [B, T, A] and keys [B, S, A] -> [B, T, S]."""
    hidden = torch.tanh(query.unsqueeze(2) + keys.unsqueeze(1))  # [B, T, S, A]
    return hidden @ energy  # [B, T, S]


class Attention(nn.Module):
    """Common interface; subclasses implement ``precompute`` and ``attend`` (sequence mode)."""

    heads: int = 1
    context_size: int

    def precompute(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Project the memory [B, S, M] into (keys, values); called once per batch."""
        raise NotImplementedError

    def attend(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Queries [B, T, Q], mask [B, S] -> (context [B, T, C], weights [B, heads, T, S])."""
        raise NotImplementedError

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """[B, Q] -> ([B, C], [B, heads, S]); or [B, T, Q] -> ([B, T, C], [B, heads, T, S])."""
        if query.dim() == 2:
            context, weights = self.attend(query.unsqueeze(1), keys, values, mask)
            return context.squeeze(1), weights.squeeze(2)
        return self.attend(query, keys, values, mask)


class BahdanauAttention(Attention):
    """Additive attention ``v . tanh(W q + U h_j)``; ``U h`` is computed once per batch."""

    def __init__(self, size: int, query_size: int, memory_size: int) -> None:
        super().__init__()
        self.query_layer = Linear(query_size, size, bias=False)
        self.key_layer = Linear(memory_size, size, bias=False)
        self.energy = energy_vector(size)
        self.context_size = memory_size

    def precompute(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        return self.key_layer(memory), memory  # [B, S, A], [B, S, M]

    def attend(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        scores = additive_scores(self.query_layer(query), keys, self.energy)  # [B, T, S]
        weights = masked_softmax(scores, mask.unsqueeze(1))
        return weights @ values, weights.unsqueeze(1)  # [B, T, M], [B, 1, T, S]


class LuongAttention(Attention):
    """Global attention with score dot, scaled_dot, general (``q W h``) or concat.

    dot/scaled_dot compare the query with the memory directly when both have the same size;
    otherwise the memory is projected to the query size once per batch (which makes dot equal to
    general). ``size`` is the hidden size of the concat score and unused by the others.
    """

    def __init__(
        self, size: int, query_size: int, memory_size: int, score: str = "general"
    ) -> None:
        super().__init__()
        self.score = LuongScore(score)
        self.context_size = memory_size
        self.scale = 1.0 / math.sqrt(query_size) if self.score == LuongScore.scaled_dot else 1.0
        if self.score == LuongScore.concat:
            self.query_layer = Linear(query_size, size, bias=False)
            self.key_layer = Linear(memory_size, size, bias=False)
            self.energy = energy_vector(size)
        elif self.score == LuongScore.general or memory_size != query_size:
            self.key_layer = Linear(memory_size, query_size, bias=False)
        else:
            self.key_layer = None

    def precompute(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        keys = memory if self.key_layer is None else self.key_layer(memory)  # [B, S, Q or A]
        return keys, memory

    def attend(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        if self.score == LuongScore.concat:
            scores = additive_scores(self.query_layer(query), keys, self.energy)  # [B, T, S]
        else:
            scores = torch.bmm(query, keys.transpose(1, 2)) * self.scale  # [B, T, S]
        weights = masked_softmax(scores, mask.unsqueeze(1))
        return torch.bmm(weights, values), weights.unsqueeze(1)  # [B, T, M], [B, 1, T, S]


class MultiHeadAttention(Attention):
    """Scaled dot-product attention with ``heads`` heads of size ``size // heads``."""

    def __init__(self, size: int, heads: int, query_size: int, memory_size: int) -> None:
        super().__init__()
        if size % heads:
            raise Seq2SeqError(f"attention size {size} is not divisible by heads={heads}")
        self.heads, self.head_size, self.context_size = heads, size // heads, size
        self.query_layer = Linear(query_size, size, bias=False)
        self.key_layer = Linear(memory_size, size, bias=False)
        self.value_layer = Linear(memory_size, size, bias=False)
        self.output_layer = Linear(size, size, bias=False)

    def _split(self, x: Tensor) -> Tensor:
        """[B, L, size] -> [B, heads, L, head_size]."""
        return x.view(x.size(0), x.size(1), self.heads, self.head_size).transpose(1, 2)

    def precompute(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        keys = self._split(self.key_layer(memory) / math.sqrt(self.head_size))  # [B, h, S, d]
        return keys, self._split(self.value_layer(memory))  # [B, h, S, d]

    def attend(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        q = self._split(self.query_layer(query))  # [B, h, T, d]
        weights = masked_softmax(q @ keys.transpose(2, 3), mask[:, None, None])  # [B, h, T, S]
        context = (weights @ values).transpose(1, 2).flatten(2)  # [B, T, size]
        return self.output_layer(context), weights
