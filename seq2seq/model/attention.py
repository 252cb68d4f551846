"""Attention over the encoder memory: Bahdanau (additive), Luong (global) and multi-head.

Every variant has one interface: ``precompute(memory)`` projects keys/values once per batch, then
``forward(query, keys, values, mask)`` serves one decoder step (query [B, Q]) or all steps at once
(query [B, T, Q]) and returns the context c_t = sum_j a_tj v_j and the weights a_tj; ``weigh``
gives the weights alone. Padded source positions get exactly zero weight.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import LuongScore
from seq2seq.model.linear import Linear
from seq2seq.model.normalizers import normalizer as make_normalizer


def energy_vector(size: int) -> nn.Parameter:
    """The ``v`` of an additive score, initialised like an ``nn.Linear(size, 1)`` weight."""
    bound = 1 / math.sqrt(size)
    return nn.Parameter(torch.empty(size).uniform_(-bound, bound))


def additive_scores(query: Tensor, keys: Tensor, energy: Tensor) -> Tensor:
    """``v . tanh(q + k)`` for projected queries [B, T, A] and keys [B, S, A] (or per query:
    [B, T, S, A]) -> [B, T, S]."""
    if keys.dim() == 3:
        keys = keys.unsqueeze(1)  # [B, 1, S, A]
    hidden = torch.tanh(query.unsqueeze(2) + keys)  # [B, T, S, A]
    return hidden @ energy  # [B, T, S]


class Attention(nn.Module):
    """Common interface; subclasses implement ``precompute`` and ``weights`` (sequence mode),
    and ``read`` where the context is more than the weighted sum of the values.

    ``positional`` attentions read the target position of each query (local attention), and
    ``uses_coverage`` ones the sum of the earlier steps' weights: the decoder keeps both in its
    state only for attentions that read them.
    """

    heads: int = 1
    context_size: int
    positional: bool = False
    uses_coverage: bool = False

    def __init__(self, normalizer: str = "softmax") -> None:
        super().__init__()
        self.normalize = make_normalizer(normalizer)  # (scores, mask) -> weights

    def precompute(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Project the memory [B, S, M] into (keys, values); called once per batch."""
        raise NotImplementedError

    def weights(
        self,
        query: Tensor,
        keys: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> Tensor:
        """Queries [B, T, Q], mask [B, S], target positions [T] and coverage [B, T, S] where the
        attention reads them -> weights [B, heads, T, S]."""
        raise NotImplementedError

    def loop_layers(self) -> list[nn.Module]:
        """The layers every step of a decoder loop multiplies by (`recurrence.looping`): the
        query's projections and multi-head's output layer, where the attention has them."""
        names = ("query_layer", "position_layer", "output_layer")
        return [layer for name in names if isinstance(layer := getattr(self, name, None), Linear)]

    def read(self, weights: Tensor, values: Tensor) -> Tensor:
        """The context c_t = sum_j a_tj v_j: weights [B, 1, T, S], values [B, S, C] -> [B, T, C]."""
        return torch.bmm(weights.squeeze(1), values)  # a view: no copy in the backward

    def weigh(
        self,
        query: Tensor,
        keys: Tensor,
        mask: Tensor,
        position: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> Tensor:
        """The weights alone: [B, Q] -> [B, heads, S]; or [B, T, Q] -> [B, heads, T, S].

        ``position`` (0-d) is the target position of the (first) query, ``coverage`` [B, S] the
        sum of the weights of the steps before it."""
        step = query.dim() == 2
        query = query.unsqueeze(1) if step else query  # [B, T, Q]
        positions = None
        if self.positional:
            start = 0 if position is None else position
            positions = torch.arange(query.size(1), device=query.device) + start  # [T]
        if coverage is not None:
            coverage = coverage.unsqueeze(1)  # [B, 1, S]: a step's query
        weights = self.weights(query, keys, mask, positions, coverage)  # [B, heads, T, S]
        return weights.squeeze(2) if step else weights

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor,
        position: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """[B, Q] -> (context [B, C], weights [B, heads, S]); or [B, T, Q] -> ([B, T, C],
        [B, heads, T, S]) (see ``weigh``)."""
        weights = self.weigh(query, keys, mask, position, coverage)
        if query.dim() == 2:
            return self.read(weights.unsqueeze(2), values).squeeze(1), weights
        return self.read(weights, values), weights


class BahdanauAttention(Attention):
    """Additive attention ``v . tanh(W q + U h_j)``; ``U h`` is computed once per batch. With
    ``coverage``, ``+ w_c c_j`` inside the tanh, c_j the weight position j has had so far."""

    def __init__(
        self,
        size: int,
        query_size: int,
        memory_size: int,
        coverage: bool = False,
        normalizer: str = "softmax",
    ) -> None:
        super().__init__(normalizer)
        self.query_layer = Linear(query_size, size, bias=False)
        self.key_layer = Linear(memory_size, size, bias=False)
        self.energy = energy_vector(size)
        self.coverage_layer = energy_vector(size) if coverage else None  # w_c [A]
        self.uses_coverage = coverage
        self.context_size = memory_size

    def precompute(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        return self.key_layer(memory), memory  # [B, S, A], [B, S, M]

    def weights(
        self,
        query: Tensor,
        keys: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> Tensor:
        if self.coverage_layer is not None and coverage is not None:  # none yet: all zero
            keys = keys.unsqueeze(1) + coverage.unsqueeze(-1) * self.coverage_layer  # [B,T,S,A]
        scores = additive_scores(self.query_layer(query), keys, self.energy)  # [B, T, S]
        return self.normalize(scores, mask.unsqueeze(1)).unsqueeze(1)  # [B, 1, T, S]


class LuongAttention(Attention):
    """Global attention with score dot (``q . h``), general (``q W h``) or concat.

    dot compares the query with the memory directly when both have the same size; otherwise the
    memory is projected to the query size once per batch (which makes dot equal to general).
    With ``scale`` the dot and general scores are divided by sqrt(query size). ``size`` is the
    hidden size of the concat score only.
    """

    def __init__(
        self,
        size: int,
        query_size: int,
        memory_size: int,
        score: str = "general",
        scale: bool = True,
        normalizer: str = "softmax",
    ) -> None:
        super().__init__(normalizer)
        self.score = LuongScore(score)
        self.context_size = memory_size
        scaled = scale and self.score != LuongScore.concat
        self.scale = 1.0 / math.sqrt(query_size) if scaled else 1.0
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

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """Queries [B, T, Q], keys [B, S, Q or A] -> scores [B, T, S]."""
        if self.score == LuongScore.concat:
            return additive_scores(self.query_layer(query), keys, self.energy)
        return torch.bmm(query, keys.transpose(1, 2)) * self.scale

    def weights(
        self,
        query: Tensor,
        keys: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> Tensor:
        weights = self.normalize(self.scores(query, keys), mask.unsqueeze(1))  # [B, T, S]
        return weights.unsqueeze(1)  # [B, 1, T, S]


class MultiHeadAttention(Attention):
    """Scaled dot-product attention with ``heads`` heads of size ``size // heads``."""

    def __init__(
        self,
        size: int,
        heads: int,
        query_size: int,
        memory_size: int,
        normalizer: str = "softmax",
    ) -> None:
        super().__init__(normalizer)
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

    def weights(
        self,
        query: Tensor,
        keys: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> Tensor:
        q = self._split(self.query_layer(query))  # [B, h, T, d]
        return self.normalize(q @ keys.transpose(2, 3), mask[:, None, None])  # [B, h, T, S]

    def read(self, weights: Tensor, values: Tensor) -> Tensor:
        """Each head's weighted sum [B, h, T, d], the heads side by side [B, T, size], mixed by
        the output layer."""
        context = (weights @ values).transpose(1, 2).flatten(2)  # [B, T, size]
        return self.output_layer(context)
