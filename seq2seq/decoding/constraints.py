"""Lexically constrained beam search: target phrases every hypothesis must hold, tracked per beam
on the device, and dynamic beam allocation (Post & Vilar 2018) in its vectorised form (Hu et
al. 2019; fairseq's): each step's candidates are the usual best ones, each beam's tokens that
advance a constraint and its single best token; they are grouped in banks by the constraint
tokens they have met, and the k beams are filled from the banks in turn, fullest bank first.
A hypothesis can end only once every phrase is placed, unless its length limit forces it, and
one that ends without them ranks below every one that has them. A placed phrase ends a word: the
token after it may not go on with that word (`seq2seq_lite.steering.word_continuations`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.vocab import EOS, PAD


@dataclass
class PhraseProgress:
    """Each live row's progress through its sentence's phrases."""

    current: Tensor  # [rows] the phrase being placed, -1: none
    matched: Tensor  # [rows] its tokens placed so far
    placed: Tensor  # [rows, C] bool: phrases placed whole
    ended: Tensor  # [rows] bool: the last token placed a phrase whole

    def index(self, rows: Tensor) -> PhraseProgress:
        return PhraseProgress(
            self.current[rows], self.matched[rows], self.placed[rows], self.ended[rows]
        )


class Constraints:
    """One batch's phrases [B, C, L] (PAD after each; an all-PAD phrase is none) and the target
    pieces that go on with a word, ``joins`` [V] (None: no such rule), on the device."""

    def __init__(self, phrases: Tensor, joins: Tensor | None = None) -> None:
        self.phrases, self.joins = phrases, joins
        self.lengths = (phrases != PAD).sum(2)  # [B, C]
        self.total = self.lengths.sum(1)  # [B] constraint tokens each sentence must meet
        self.banks = int(phrases.size(1) * phrases.size(2)) + 1  # a bound on met counts, host

    def start(self, rows: int) -> PhraseProgress:
        """Nothing placed, for ``rows`` rows."""
        device, count = self.phrases.device, self.phrases.size(1)
        none = torch.full((rows,), -1, dtype=torch.long, device=device)
        placed = torch.zeros(rows, count, dtype=torch.bool, device=device)
        return PhraseProgress(none, torch.zeros_like(none), placed, placed[:, 0].clone())

    def met(self, sent: Tensor, progress: PhraseProgress) -> Tensor:
        """[rows] constraint tokens met: those of placed phrases and of the one in progress."""
        placed = (progress.placed * self.lengths[sent]).sum(1)
        return placed + progress.matched

    def complete(self, sent: Tensor, progress: PhraseProgress) -> Tensor:
        """[rows] bool: every phrase of the row's sentence placed."""
        return self.met(sent, progress) == self.total[sent]

    def ban(
        self,
        log_probs: Tensor,
        sent: Tensor,
        progress: PhraseProgress,
        free: tuple[Tensor, Tensor | None],
    ) -> Tensor:
        """The rows [rows] short of a phrase, whose EOS is banned but at their limit (``free``:
        rows at it, and rows whose prefix forces the token, None: none); a row that just placed
        a phrase may not go on with its word (``joins``) unless its prefix forces it."""
        at_limit, forced = free
        short = ~self.complete(sent, progress)
        log_probs[:, EOS].masked_fill_(short & ~at_limit, float("-inf"))
        if self.joins is not None:
            ended = progress.ended if forced is None else progress.ended & ~forced
            log_probs.masked_fill_(ended.unsqueeze(1) & self.joins, float("-inf"))
        return short

    def wanted(self, sent: Tensor, progress: PhraseProgress) -> Tensor:
        """[rows, C] the tokens that advance each row: the next token of the phrase in progress
        (in column 0), else the first token of every phrase not yet placed; PAD: none."""
        phrases = self.phrases[sent]  # [rows, C, L]
        starts = phrases[:, :, 0].masked_fill(progress.placed, PAD)  # [rows, C]
        going = torch.full_like(starts, PAD)
        going[:, 0] = _next(phrases, progress)
        return torch.where((progress.current >= 0).unsqueeze(1), going, starts)

    def advance(self, sent: Tensor, progress: PhraseProgress, tokens: Tensor) -> PhraseProgress:
        """The progress of rows [m] (sentences ``sent``) after each takes ``tokens`` [m]: the
        phrase in progress goes on if the token is its next one, else is dropped, and a token
        that begins a phrase not yet placed starts it (the first such phrase)."""
        phrases, lengths = self.phrases[sent], self.lengths[sent]  # [m, C, L], [m, C]
        rows = torch.arange(len(sent), device=sent.device)
        goes_on = (progress.current >= 0) & (_next(phrases, progress) == tokens)
        begins = (phrases[:, :, 0] == tokens.unsqueeze(1)) & ~progress.placed & (lengths > 0)
        starts = begins.any(1) & ~goes_on
        current = torch.where(
            goes_on, progress.current, torch.where(starts, begins.int().argmax(1), -1)
        )
        matched = torch.where(goes_on, progress.matched + 1, starts.long())
        whole = (current >= 0) & (matched == lengths[rows, current.clamp(min=0)])
        column = torch.arange(phrases.size(1), device=sent.device) == current.unsqueeze(1)
        placed = progress.placed | (column & whole.unsqueeze(1))
        current, matched = current.masked_fill(whole, -1), matched.masked_fill(whole, 0)
        return PhraseProgress(current, matched, placed, whole)

    def candidates(
        self,
        log_probs: Tensor,
        top: tuple[Tensor, Tensor, Tensor],
        sent: Tensor,
        scores: Tensor,
        progress: PhraseProgress,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, PhraseProgress]:
        """A step's candidates [n, m] for live beams of ``scores`` [n, width] and ``progress``
        (rows of sentences ``sent``): the ``top`` ones (scores, rows, tokens [n, 2k]), then each
        row's tokens that advance a phrase, its best token and its EOS; their scores, rows,
        tokens, whether each can be chosen (finite, and not the same row and token as an earlier
        one), their banks (met counts) and their progress [n * m]."""
        n, width = scores.shape
        eos = torch.full_like(sent, EOS).unsqueeze(1)  # banned but where every phrase is placed
        extra = torch.cat([self.wanted(sent, progress), log_probs.argmax(1, True), eos], 1)
        extra_scores = scores.view(-1, 1) + log_probs.gather(1, extra)  # PAD: -inf
        extra_rows = torch.arange(n * width, device=extra.device).unsqueeze(1).expand_as(extra)
        scores, rows, tokens = (
            torch.cat([a, b.reshape(n, -1)], 1)
            for a, b in zip(top, (extra_scores, extra_rows, extra), strict=True)
        )
        key = rows * log_probs.size(1) + tokens  # [n, m]
        m = key.size(1)
        before = torch.ones(m, m, dtype=torch.bool, device=key.device).tril(-1)
        repeated = ((key.unsqueeze(2) == key.unsqueeze(1)) & before).any(2)
        flat = rows.view(-1)
        after = self.advance(sent[flat], progress.index(flat), tokens.view(-1))
        banks = self.met(sent[flat], after).view(n, m)
        return scores, rows, tokens, scores.isfinite() & ~repeated, banks, after


def _next(phrases: Tensor, progress: PhraseProgress) -> Tensor:
    """[rows] the next token of each row's phrase in progress (any token where none is)."""
    rows = torch.arange(len(phrases), device=phrases.device)
    at = progress.matched.clamp(max=phrases.size(2) - 1)
    return phrases[rows, progress.current.clamp(min=0), at]


def allocate(scores: Tensor, banks: Tensor, valid: Tensor, k: int, count: int) -> Tensor:
    """Dynamic beam allocation over candidates [n, m]: the indices [n, k] of the chosen ones,
    taken in turns from the banks (the met counts ``banks``, < ``count``), fullest bank first,
    each bank's candidates best first; invalid candidates come last."""
    scores = scores.masked_fill(~valid, float("-inf"))
    order = scores.argsort(dim=1, descending=True, stable=True)  # [n, m] best first
    bank, ok = banks.gather(1, order), valid.gather(1, order)
    m = order.size(1)
    before = torch.ones(m, m, dtype=torch.bool, device=order.device).tril(-1)  # [i, j]: j < i
    same = (bank.unsqueeze(2) == bank.unsqueeze(1)) & before & ok.unsqueeze(1)
    rank = same.sum(2)  # [n, m] better valid candidates in the same bank
    turn = rank * count + (count - 1 - bank)
    turn = turn.masked_fill(~ok, count * (m + 1))
    return order.gather(1, turn.argsort(dim=1, stable=True)[:, :k])
