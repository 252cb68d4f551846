"""Several trained models decoding as one: the mean of their log-probabilities at every step.

An `Ensemble` offers what search uses of a `Seq2Seq` (``encode``, ``decoder.init_state``,
``decoder.step``, ``decoder.heads``), so greedy and beam search run on it unchanged. The
attention it reports is the members' attention averaged over their heads and then over members,
so it has one head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.model.states import DecoderState, EncoderOutput


@dataclass
class Members:
    """One encoder output or decoder state per member, selected together."""

    parts: list[EncoderOutput] | list[DecoderState]

    def index_select(self, idx: Tensor) -> Members:
        return Members([part.index_select(idx) for part in self.parts])


class EnsembleDecoder:
    """The decoder side of an ensemble: every member steps, their log-probabilities averaged."""

    heads = 1  # members' heads are averaged: step reports weights [B, 1, S]

    def __init__(self, members: Sequence[Seq2Seq]) -> None:
        self.members = members

    def init_state(self, enc: Members) -> Members:
        return Members(
            [m.decoder.init_state(e) for m, e in zip(self.members, enc.parts, strict=True)]
        )

    def step(self, prev: Tensor, state: Members, enc: Members) -> tuple[Tensor, Members, Tensor]:
        """prev [B] -> (mean log-probs [B, V], states, mean attention [B, 1, S])."""
        log_probs, states, weights = [], [], []
        for model, s, e in zip(self.members, state.parts, enc.parts, strict=True):
            lp, s, w = model.decoder.step(prev, s, e)
            log_probs.append(lp.float())
            states.append(s)
            weights.append(w.float().mean(1, keepdim=True))  # [B, 1, S]
        return torch.stack(log_probs).mean(0), Members(states), torch.stack(weights).mean(0)


class Ensemble(nn.Module):
    """Models trained apart, with the same tokenizers, decoding together."""

    def __init__(self, members: Sequence[Seq2Seq]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        self.decoder = EnsembleDecoder(list(members))

    def compile_steps(self, compiler: Callable[[Callable], Callable]) -> None:
        """Each member's search step through ``compiler`` (as `Decoder.compile_steps`)."""
        for model in self.members:
            model.compile_steps(compiler)

    def encode(self, src: Tensor, lengths: Tensor) -> Members:
        return Members([model.encode(src, lengths) for model in self.members])
