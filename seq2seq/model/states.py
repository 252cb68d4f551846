"""What passes between the encoder, the decoder's steps and a search: the encoder's output,
computed once per batch, and the decoder's recurrent state, carried from step to step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class EncoderOutput:
    """What the decoder reads from the encoder, computed once per batch."""

    memory: Tensor  # [B, S, M]
    mask: Tensor  # [B, S] bool, True = real source token
    keys: Tensor  # attention keys, batch first
    values: Tensor  # attention values, batch first
    final: Tensor  # [B, M] summary for the initial decoder state
    gates: Tensor | None = None  # [B, S, 3H] values times the GRU input weight (Bahdanau)

    def index_select(self, idx: Tensor) -> EncoderOutput:
        """Rows ``idx`` of every field (beam expansion, dropping finished sentences)."""
        return EncoderOutput(
            self.memory.index_select(0, idx),
            self.mask.index_select(0, idx),
            self.keys.index_select(0, idx),
            self.values.index_select(0, idx),
            self.final.index_select(0, idx),
            _rows(self.gates, idx),
        )


@dataclass
class DecoderState:
    """Recurrent state between steps: ``hidden`` is the top GRU layer's, the one attention and
    the output read, and ``lower`` the layers under it in a stacked decoder; ``feed`` is Luong's
    previous attentional vector; the attention's ``coverage`` and the next target ``position``
    are kept where the attention reads them (`Attention.uses_coverage`, `Attention.positional`).
    Every field but ``position`` has the batch first, so a search picks rows alike."""

    hidden: Tensor  # [B, H]
    feed: Tensor | None = None  # [B, H]
    coverage: Tensor | None = None  # [B, S] fp32: the weights of the steps so far, summed
    position: Tensor | None = None  # 0-d long: every row of a batch is at the same step
    lower: Tensor | None = None  # [B, L - 1, H]: layers 0 .. L - 2 (model.decoder_layers = L)

    def layers(self) -> list[Tensor]:
        """Each GRU layer's state [B, H], the bottom first."""
        return [self.hidden] if self.lower is None else [*self.lower.unbind(1), self.hidden]

    @staticmethod
    def stacked(layers: Sequence[Tensor]) -> tuple[Tensor, Tensor | None]:
        """Each layer's state, the bottom first -> (``hidden``, ``lower``)."""
        return layers[-1], torch.stack(layers[:-1], 1) if len(layers) > 1 else None

    def index_select(self, idx: Tensor) -> DecoderState:
        """Rows ``idx`` (beam reordering, dropping finished sentences)."""
        return DecoderState(
            self.hidden.index_select(0, idx),
            _rows(self.feed, idx),
            _rows(self.coverage, idx),
            self.position,
            _rows(self.lower, idx),
        )


def _rows(x: Tensor | None, idx: Tensor) -> Tensor | None:
    return None if x is None else x.index_select(0, idx)
