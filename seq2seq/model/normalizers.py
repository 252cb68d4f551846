"""What turns attention scores into weights: softmax, or a sparse mapping with exact zeros.

Every normalizer takes scores [..., S] and a boolean mask broadcastable to them (True = a position
the query may attend to) and returns weights that sum to 1 over the allowed positions and are
exactly 0 elsewhere. sparsemax (Martins & Astudillo 2016) and 1.5-entmax (Peters et al. 2019) come
from the ``entmax`` package (``pip install -e '.[sparse]'``): they also give exact zeros to
allowed positions that score far enough below the best one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import Normalizer

Normalize = Callable[[Tensor, Tensor], Tensor]

# A masked position's score sits this far below the lowest score of its row: sparsemax gives 0 to
# anything more than 1 below the row's largest score, 1.5-entmax to anything more than 2 below.
_SPARSE_GAP = 1e4


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis; positions where ``mask`` is False get exactly 0."""
    return torch.softmax(torch.where(mask, scores, float("-inf")), dim=-1)


def _sparse(mapping: Callable[..., Tensor]) -> Normalize:
    """A sparse mapping of the ``entmax`` package made mask-exact: masked positions get a finite
    score far below the row's (its sort and cumulative sums cannot take -inf), then exactly 0."""

    def normalize(scores: Tensor, mask: Tensor) -> Tensor:
        x = scores.float()
        low = x.detach().amin(-1, keepdim=True) - _SPARSE_GAP
        weights = mapping(torch.where(mask, x, low), dim=-1)
        return torch.where(mask, weights, 0.0).to(scores.dtype)

    return normalize


def _entmax(mapping: str) -> Normalize:
    """``entmax.<mapping>``, mask-exact; one line naming the extra where the package is missing."""
    try:
        import entmax
    except ImportError:
        raise Seq2SeqError(
            "the sparse attention normalizers need the entmax package: "
            "pip install -e '.[sparse]' in the seq2seq checkout (or pip install entmax)"
        ) from None
    return _sparse(getattr(entmax, mapping))


# model.attention.normalizer -> a factory of its function (the package is imported when chosen)
NORMALIZERS: dict[Normalizer, Callable[[], Normalize]] = {
    Normalizer.softmax: lambda: masked_softmax,
    Normalizer.sparsemax: lambda: _entmax("sparsemax"),
    Normalizer.entmax15: lambda: _entmax("entmax15"),
}


def normalizer(name: str | Normalizer) -> Normalize:
    """The normalizer called ``name`` (``model.attention.normalizer``)."""
    return NORMALIZERS[Normalizer(name)]()
