"""Lexically constrained beam search in numpy, as seq2seq.decoding.constraints does it in torch
(the tests hold the two equal): each beam's progress through its sentence's phrases, and dynamic
beam allocation over banks of met constraint tokens, fullest bank first. A placed phrase ends a
word: the token after it may not go on with that word (`steering.word_continuations`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PhraseProgress:
    """Each live row's progress through its sentence's phrases."""

    current: np.ndarray  # [rows] the phrase being placed, -1: none
    matched: np.ndarray  # [rows] its tokens placed so far
    placed: np.ndarray  # [rows, C] bool: phrases placed whole
    ended: np.ndarray  # [rows] bool: the last token placed a phrase whole

    def index(self, rows: np.ndarray) -> PhraseProgress:
        return PhraseProgress(
            self.current[rows], self.matched[rows], self.placed[rows], self.ended[rows]
        )


class Constraints:
    """One batch's phrases [B, C, L] (``pad`` after each; an all-``pad`` phrase is none) and the
    target pieces that go on with a word, ``joins`` [V] (None: no such rule)."""

    def __init__(self, phrases: np.ndarray, pad: int, joins: np.ndarray | None = None) -> None:
        self.phrases, self.pad, self.joins = phrases, pad, joins
        self.lengths = (phrases != pad).sum(2)  # [B, C]
        self.total = self.lengths.sum(1)  # [B]
        self.banks = phrases.shape[1] * phrases.shape[2] + 1

    def start(self, rows: int) -> PhraseProgress:
        none = np.full(rows, -1, dtype=np.int64)
        placed = np.zeros((rows, self.phrases.shape[1]), bool)
        return PhraseProgress(none, np.zeros_like(none), placed, np.zeros(rows, bool))

    def met(self, sent: np.ndarray, progress: PhraseProgress) -> np.ndarray:
        """[rows] constraint tokens met: those of placed phrases and of the one in progress."""
        return (progress.placed * self.lengths[sent]).sum(1) + progress.matched

    def complete(self, sent: np.ndarray, progress: PhraseProgress) -> np.ndarray:
        return self.met(sent, progress) == self.total[sent]

    def ban(
        self,
        log_probs: np.ndarray,
        sent: np.ndarray,
        progress: PhraseProgress,
        eos: int,
        free: tuple[np.ndarray, np.ndarray | None],
    ) -> np.ndarray:
        """The rows [rows] short of a phrase, whose EOS is banned but at their limit (``free``:
        rows at it, and rows whose prefix forces the token, None: none), as torch's `ban`; a
        row that just placed a phrase may not go on with its word (`joins`) unless forced."""
        at_limit, forced = free
        short = ~self.complete(sent, progress)
        log_probs[short & ~at_limit, eos] = -np.inf
        if self.joins is not None:
            ended = progress.ended if forced is None else progress.ended & ~forced
            log_probs[ended[:, None] & self.joins[None, :]] = -np.inf
        return short

    def _next(self, phrases: np.ndarray, progress: PhraseProgress) -> np.ndarray:
        """[rows] the next token of each row's phrase in progress (any value where none)."""
        rows = np.arange(len(phrases))
        at = np.minimum(progress.matched, phrases.shape[2] - 1)
        return phrases[rows, np.maximum(progress.current, 0), at]

    def wanted(self, sent: np.ndarray, progress: PhraseProgress) -> np.ndarray:
        """[rows, C] the tokens that advance each row (``pad``: none), as torch's `wanted`."""
        phrases = self.phrases[sent]
        starts = np.where(progress.placed, self.pad, phrases[:, :, 0])
        going = np.full_like(starts, self.pad)
        going[:, 0] = self._next(phrases, progress)
        return np.where((progress.current >= 0)[:, None], going, starts)

    def advance(
        self, sent: np.ndarray, progress: PhraseProgress, tokens: np.ndarray
    ) -> PhraseProgress:
        """The progress after each row takes its token, by the rule of torch's `advance`."""
        phrases, lengths = self.phrases[sent], self.lengths[sent]
        goes_on = (progress.current >= 0) & (self._next(phrases, progress) == tokens)
        begins = (phrases[:, :, 0] == tokens[:, None]) & ~progress.placed & (lengths > 0)
        starts = begins.any(1) & ~goes_on
        current = np.where(goes_on, progress.current, np.where(starts, begins.argmax(1), -1))
        matched = np.where(goes_on, progress.matched + 1, starts.astype(np.int64))
        rows = np.arange(len(sent))
        whole = (current >= 0) & (matched == lengths[rows, np.maximum(current, 0)])
        column = np.arange(phrases.shape[1])[None, :] == current[:, None]
        placed = progress.placed | (column & whole[:, None])
        current, matched = np.where(whole, -1, current), np.where(whole, 0, matched)
        return PhraseProgress(current, matched, placed, whole)

    def candidates(
        self,
        log_probs: np.ndarray,
        top: tuple,
        sent: np.ndarray,
        scores: np.ndarray,
        progress: PhraseProgress,
        eos: int,
    ) -> tuple:
        """A step's candidates [n, m], as torch's `candidates`: the ``top`` ones (scores, rows,
        tokens [n, 2k]), then each row's advancing tokens, best token and EOS; their scores,
        rows, tokens, whether each can be chosen, their banks and their progress [n * m]."""
        n, width = scores.shape
        best = log_probs.argmax(1)[:, None]
        extra = np.concatenate([self.wanted(sent, progress), best, np.full_like(best, eos)], 1)
        extra_scores = scores.reshape(-1, 1) + np.take_along_axis(log_probs, extra, 1)
        extra_rows = np.broadcast_to(np.arange(n * width)[:, None], extra.shape)
        scores, rows, tokens = (
            np.concatenate([a, b.reshape(n, -1)], 1)
            for a, b in zip(top, (extra_scores, extra_rows, extra), strict=True)
        )
        key = rows * log_probs.shape[1] + tokens
        m = key.shape[1]
        before = np.tril(np.ones((m, m), dtype=bool), -1)
        repeated = ((key[:, :, None] == key[:, None, :]) & before).any(2)
        flat = rows.reshape(-1)
        after = self.advance(sent[flat], progress.index(flat), tokens.reshape(-1))
        banks = self.met(sent[flat], after).reshape(n, m)
        return scores, rows, tokens, np.isfinite(scores) & ~repeated, banks, after


def allocate(
    scores: np.ndarray, banks: np.ndarray, valid: np.ndarray, k: int, count: int
) -> np.ndarray:
    """Dynamic beam allocation over candidates [n, m]: the indices [n, k] chosen in turns from
    the banks, fullest first, each bank best first; invalid ones last (torch's `allocate`)."""
    scores = np.where(valid, scores, -np.inf)
    order = np.argsort(-scores, axis=1, kind="stable")
    bank = np.take_along_axis(banks, order, 1)
    ok = np.take_along_axis(valid, order, 1)
    m = order.shape[1]
    before = np.tril(np.ones((m, m), dtype=bool), -1)
    rank = ((bank[:, :, None] == bank[:, None, :]) & before & ok[:, None, :]).sum(2)
    turn = np.where(ok, rank * count + (count - 1 - bank), count * (m + 1))
    return np.take_along_axis(order, np.argsort(turn, axis=1, kind="stable")[:, :k], 1)
