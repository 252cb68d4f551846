"""What greedy and beam search share: the result type, the length rule and penalty, the
restrictions every step applies, and when the step loop looks at the device.

Both searches stop a sentence at ``max_len = floor(a * src_len + b)`` target tokens (src_len
counts the source EOS) by forcing EOS there, so every hypothesis ends with EOS and its attention
has one row per output token plus the EOS row; before that limit, EOS cannot end a hypothesis at
the first step, so no translation is empty.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.vocab import BOS, EOS, PAD


@dataclass
class Hypothesis:
    """One translation: target ids without BOS/EOS, its score and where it attended."""

    tokens: list[int]
    score: float  # sum of log-probs / GNMT length penalty (+ beam's coverage penalty)
    attention: Tensor  # [len(tokens) + 1, src_len] mean over heads, last row = EOS
    head_attention: Tensor | None = None  # [heads, len(tokens) + 1, src_len] for multi-head


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty ((5 + length) / 6) ** alpha; ``length`` counts the EOS. One length
    gives a float, a (double) tensor of lengths a tensor of penalties."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src_lengths: Tensor, a: float, b: int) -> Tensor:
    """Per-sentence limit on generated tokens before EOS is forced: [B] int64 (host lengths)."""
    return (src_lengths.cpu().double() * a + b).floor().long().clamp(min=0)


def restrict(log_probs: Tensor, at_limit: Tensor, look: bool, first: bool) -> Tensor:
    """Forbid PAD and BOS everywhere, EOS at the ``first`` step (no translation is empty, as
    in fairseq and Joey NMT) unless the limit comes first, and anything but EOS in rows that
    reached their limit.

    With ``look`` (free on the host) only rows at their limit are touched; without, a masked
    fill over all rows avoids asking the device whether there are any.
    """
    log_probs[:, PAD].fill_(float("-inf"))  # fill_, not item assignment: no host tensor made
    log_probs[:, BOS].fill_(float("-inf"))
    if first:
        log_probs[:, EOS].masked_fill_(~at_limit, float("-inf"))
    if not look:
        not_eos = torch.arange(log_probs.size(1), device=log_probs.device) != EOS
        return log_probs.masked_fill_(at_limit.unsqueeze(1) & not_eos, float("-inf"))
    if at_limit.any():
        log_probs[at_limit, :EOS] = float("-inf")
        log_probs[at_limit, EOS + 1 :] = float("-inf")
    return log_probs


def make_hypothesis(tokens: Tensor, score: float, attention: Tensor, src_len: int) -> Hypothesis:
    """Build a result from host ids [L] and attention [L + 1, heads, S] cut to the real source."""
    attention = attention[:, :, :src_len].float()  # [L + 1, heads, src_len]
    heads = attention.transpose(0, 1).clone() if attention.size(1) > 1 else None
    return Hypothesis(tokens.tolist(), score, attention.mean(1), heads)


def check_interval(device: torch.device) -> int:
    """Search steps between looks at the device: every step on the host (looking is free
    there, and finished sentences leave the batch at once), every 8 on an accelerator."""
    return 1 if device.type == "cpu" else 8


def looks_at(t: int, steps: int, check_every: int) -> bool:
    """Whether the loop looks at the device after step ``t``."""
    return (t + 1) % check_every == 0 or t + 1 == steps
