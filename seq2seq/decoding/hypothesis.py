"""What greedy and beam search share: the result type, the length rule and penalty, the
restrictions every step applies, the user's bans (n-gram repeats, a minimum length), and when
the step loop looks at the device.

Both searches stop a sentence at its length limit by forcing EOS there, so every hypothesis ends
with EOS and its attention has one row per output token plus the EOS row; before that limit, EOS
cannot end a hypothesis at the first step, so no translation is empty. These rules, and the
length penalty, are those of every search (seq2seq_lite.rules), applied here to tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from seq2seq_lite import rules
from seq2seq_lite.steering import (
    SteeringIds,
    forced_max_lengths,
    steering_arrays,
)
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.constraints import Constraints
from seq2seq.vocab import BOS, EOS, PAD


@dataclass
class Hypothesis:
    """One translation: target ids without BOS/EOS, its score and where it attended."""

    tokens: list[int]
    score: float  # sum of log-probs / GNMT length penalty (+ beam's coverage penalty)
    attention: Tensor  # [len(tokens) + 1, src_len] mean over heads, last row = EOS
    head_attention: Tensor | None = None  # [heads, len(tokens) + 1, src_len] for multi-head


def max_lengths(src_lengths: Tensor, a: float, b: int) -> Tensor:
    """Per-sentence limit on generated tokens before EOS is forced (`rules.max_lengths`): [B]
    int64 on the host."""
    return torch.from_numpy(rules.max_lengths(src_lengths.cpu().numpy(), a, b))


class Bans:
    """`restrict`'s rules as rows to add to a step's log-probs (0 or -inf per token), made at a
    search's first step so that later steps add them in two kernels without looking at the
    device: a row that goes on bans PAD and BOS (at the first step EOS too:
    `rules.eos_banned`), a row at its limit everything but EOS."""

    def __init__(self) -> None:
        self._rows: tuple[Tensor, Tensor, Tensor] | None = None  # going, first, at the limit

    def rows(self, log_probs: Tensor, at_limit: Tensor, first: bool) -> Tensor:
        """[rows, V] for rows ``at_limit`` [rows] at the ``first`` step or not."""
        if self._rows is None:
            self._rows = _ban_rows(log_probs.size(1), log_probs.device)
        going, at_first, only_eos = self._rows
        return torch.where(at_limit.unsqueeze(1), only_eos, at_first if first else going)


def _ban_rows(vocab: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    going = torch.zeros(vocab, device=device)
    going[PAD].fill_(float("-inf"))  # fill_, not item assignment: no host tensor made
    going[BOS].fill_(float("-inf"))
    at_first = going.clone()
    at_first[EOS].fill_(float("-inf"))
    only_eos = torch.full((vocab,), float("-inf"), device=device)
    only_eos[EOS].fill_(0.0)
    return going, at_first, only_eos


def restrict(log_probs: Tensor, at_limit: Tensor, look: bool, first: bool, bans: Bans) -> Tensor:
    """Forbid PAD and BOS everywhere, EOS at the ``first`` step (no translation is empty, as
    in fairseq and Joey NMT) unless the limit comes first (`rules.eos_banned`), and anything
    but EOS in rows that reached their limit.

    With ``look`` (free on the host) only rows at their limit are touched; without, the search's
    ``bans`` rows are added to every row, which asks the device nothing.
    """
    if not look:
        return log_probs.add_(bans.rows(log_probs, at_limit, first))
    log_probs[:, PAD].fill_(float("-inf"))
    log_probs[:, BOS].fill_(float("-inf"))
    if (banned := rules.eos_banned(first, at_limit)) is not None:
        log_probs[:, EOS].masked_fill_(banned, float("-inf"))
    if at_limit.any():
        log_probs[at_limit, :EOS] = float("-inf")
        log_probs[at_limit, EOS + 1 :] = float("-inf")
    return log_probs


class UserBans:
    """The user's bans on one batch's search, on the device: no n-gram of ``no_repeat_ngram``
    pieces twice in a hypothesis (`rules.ngram_bans`), no EOS before the minimum length
    (`rules.min_lengths`), and each sentence's target prefix forced at its first steps. Built
    only where a setting is on (see `user_bans`)."""

    def __init__(self, n: int, min_len: Tensor | None, prefix: Tensor | None = None) -> None:
        self.n, self.min_len = n, min_len  # min_len: [B] on the device, None: no minimum
        self.prefix = prefix  # [B, P] on the device, PAD after each prefix; None: no prefixes

    def apply(self, log_probs: Tensor, t: int, sent: Tensor, history: Tensor | None) -> Tensor:
        """Ban, at step ``t``, EOS in rows whose sentence (batch row ``sent`` [rows]) is short,
        and every token completing an n-gram already in the row's ``history`` [rows, t]; rows
        inside their sentence's prefix keep only its token at ``t``, with its log-prob."""
        forced = None
        if self.prefix is not None and t < self.prefix.size(1):  # a shape: no device read
            forced = self.prefix[sent, t].unsqueeze(1)  # [rows, 1] PAD: not forced
            kept = log_probs.gather(1, forced)  # the forced token's log-prob, before any ban
        if self.min_len is not None:
            log_probs[:, EOS].masked_fill_(self.min_len[sent] > t, float("-inf"))
        if self.n and history is not None and history.size(1) >= self.n:
            grams = history.unfold(1, self.n, 1)  # [rows, t - n + 1, n]
            prefix = history[:, history.size(1) - self.n + 1 :].unsqueeze(1)  # the n - 1 last
            repeats = (grams[:, :, :-1] == prefix).all(-1)  # [rows, t - n + 1]
            # every write is -inf (PAD's column already is), so duplicates cannot race
            banned = torch.where(repeats, grams[:, :, -1], PAD)
            log_probs.scatter_(1, banned, float("-inf"))
        if forced is not None:  # rows not forced write PAD's -inf back into PAD's column
            log_probs.masked_fill_(forced != PAD, float("-inf")).scatter_(1, forced, kept)
        return log_probs

    def forced_rows(self, t: int, sent: Tensor) -> Tensor | None:
        """[rows] bool: the rows whose prefix forces their token at step ``t`` (None: none)."""
        if self.prefix is None or t >= self.prefix.size(1):  # a shape: no device read
            return None
        return self.prefix[sent, t] != PAD


@dataclass
class BatchSteering:
    """A batch's steer on the host (`seq2seq_lite.steering.steering_arrays`, PAD-padded): target
    prefixes [B, P] and constraint phrases [B, C, L]; None: none; ``joins`` [V]: the pieces that
    may not follow a placed phrase (`word_continuations`; None: any)."""

    prefix: Tensor | None = None
    phrases: Tensor | None = None
    joins: Tensor | None = None

    @classmethod
    def of(
        cls,
        steer: Sequence[SteeringIds] | None,
        chunk: Sequence[int],
        joins: np.ndarray | None = None,
    ) -> BatchSteering | None:
        """The steer of the lines ``chunk`` (their indices, in batch order), with the
        vocabulary's ``joins``; None: none."""
        prefix, phrases = steering_arrays(steer, chunk, PAD)
        if prefix is None and phrases is None:
            return None
        return cls(*(None if a is None else torch.from_numpy(a) for a in (prefix, phrases, joins)))

    def rows(self, rows: Tensor) -> BatchSteering:
        """The steer of batch rows ``rows`` (host)."""
        found = (None if a is None else a[rows] for a in (self.prefix, self.phrases))
        return BatchSteering(*found, self.joins)

    def constraints(self, device: torch.device) -> Constraints | None:
        """The search's `Constraints` on ``device`` (None: no phrases)."""
        if self.phrases is None:
            return None
        joins = None if self.joins is None else self.joins.to(device)
        return Constraints(self.phrases.to(device), joins)

    def limits(self, limits: Tensor) -> Tensor:
        """The length limits [B] (host) raised so that the prefix and phrases fit with one
        token more (`forced_max_lengths`)."""
        arrays = (None if a is None else a.numpy() for a in (self.prefix, self.phrases))
        return torch.from_numpy(forced_max_lengths(limits.numpy(), *arrays, PAD))


def bans_on(cfg: DecodeConfig) -> bool:
    """Whether a setting of ``cfg`` bans tokens (no_repeat_ngram, min_len_a, min_len_b)."""
    return bool(cfg.no_repeat_ngram or cfg.min_len_a or cfg.min_len_b)


def user_bans(
    cfg: DecodeConfig,
    src_lengths: Tensor,
    limits: Tensor,
    device: torch.device,
    steer: BatchSteering | None = None,
) -> UserBans | None:
    """The bans of ``cfg`` for a batch whose length limits are ``limits`` [B] (host), and its
    target prefixes (in ``steer``); None where none is on, so that the default search does no
    work for them (not even a host copy)."""
    prefix = None if steer is None else steer.prefix
    if not bans_on(cfg) and prefix is None:
        return None
    lengths, limits = src_lengths.cpu().numpy(), limits.numpy()
    mins = rules.min_lengths(lengths, cfg.min_len_a, cfg.min_len_b, limits)
    min_len = torch.from_numpy(mins).to(device) if mins.max(initial=0) > 0 else None
    if not cfg.no_repeat_ngram and min_len is None and prefix is None:
        return None
    return UserBans(cfg.no_repeat_ngram, min_len, None if prefix is None else prefix.to(device))


def greedy_results(
    tokens: Tensor,
    attention: Tensor,
    scores: Tensor,
    lengths: Tensor,
    src_lengths: Tensor,
    alpha: float,
) -> list[Hypothesis]:
    """Each row's translation from host tensors (tokens [B, W], attention [B, W, heads, S],
    score sums and lengths with EOS [B]), scored over ``alpha``'s length penalty as beam search
    scores."""
    lengths_host = lengths.tolist()
    scored = [
        score / rules.length_penalty(n, alpha)
        for score, n in zip(scores.tolist(), lengths_host, strict=True)
    ]
    return make_hypotheses(tokens, scored, attention, lengths_host, src_lengths.tolist())


def make_hypotheses(
    tokens: Tensor | np.ndarray,
    scores: Sequence[float],
    attention: Tensor,
    lengths: Sequence[int] | np.ndarray,
    src_lengths: Sequence[int],
) -> list[Hypothesis]:
    """Results from host arrays, one per row h: ``tokens`` [H, W] before its EOS, its score, and
    its attention [H, W + 1, heads, S] over ``lengths[h]`` steps (EOS included) and
    ``src_lengths[h]`` source positions: the heads' mean, and each head where there are several
    (copies, so that a result does not hold its batch's buffers)."""
    rows, attention = tokens.tolist(), attention.float()
    mean = attention.mean(2).numpy()  # [H, W + 1, S]; numpy slices: a third of torch's time
    each = attention.transpose(1, 2).numpy() if attention.size(2) > 1 else None
    return [
        Hypothesis(
            rows[h][: n - 1],
            score,
            torch.from_numpy(mean[h, :n, :src].copy()),
            None if each is None else torch.from_numpy(each[h, :, :n, :src].copy()),
        )
        for h, (score, n, src) in enumerate(zip(scores, lengths, src_lengths, strict=True))
    ]


def check_interval(device: torch.device) -> int:
    """Search steps between looks at the device: every step on the host (looking is free
    there, and finished sentences leave the batch at once), every 8 on an accelerator."""
    return 1 if device.type == "cpu" else 8


def looks_at(t: int, steps: int, check_every: int) -> bool:
    """Whether the loop looks at the device after step ``t``."""
    return (t + 1) % check_every == 0 or t + 1 == steps
