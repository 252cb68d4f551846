"""Greedy and beam search over a `Graphs` pair, in numpy: the torch search of seq2seq
(``seq2seq/decoding/search.py`` and ``beam.py``) step for step, on the host.

Both stop a sentence at its length limit by forcing EOS there, and never end one at the first
step before it (no output is empty); scores are log-prob sums over the GNMT length penalty
(these rules: ``rules.py``, shared with seq2seq), and apply the same bans (no n-gram of
``no_repeat_ngram`` pieces twice, no EOS before the minimum length). Beam search keeps the k
best unfinished continuations; EOS among the k best candidates finishes a hypothesis; a
sentence is done with k of them, at its length limit, or when no live beam can end above its
n-best-th finished score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from seq2seq_lite.constraints import Constraints, allocate
from seq2seq_lite.rules import (
    eos_banned,
    follow_back,
    length_penalty,
    max_lengths,
    min_lengths,
    ngram_bans,
    settled,
)
from seq2seq_lite.steering import forced_max_lengths

if TYPE_CHECKING:
    from seq2seq_lite.release import Graphs

NEG_INF = np.float32(-np.inf)


@dataclass
class Hypothesis:
    """One translation: target ids without BOS/EOS, its score, and its attention
    [len(tokens) + 1, src_len] (mean over heads; the last row is the EOS's)."""

    tokens: list[int]
    score: float
    attention: np.ndarray


def restrict(log_probs: np.ndarray, at_limit: np.ndarray, ids: dict, first: bool) -> np.ndarray:
    """Forbid PAD and BOS everywhere, EOS at the ``first`` step (no translation is empty)
    unless the limit comes first, and anything but EOS in rows at their limit."""
    log_probs[:, ids["pad"]] = NEG_INF
    log_probs[:, ids["bos"]] = NEG_INF
    if (banned := eos_banned(first, at_limit)) is not None:
        log_probs[banned, ids["eos"]] = NEG_INF
    if at_limit.any():
        eos = log_probs[at_limit, ids["eos"]]
        log_probs[at_limit] = NEG_INF
        log_probs[at_limit, ids["eos"]] = eos
    return log_probs


class UserBans:
    """The user's bans on one batch's search: no n-gram of ``n`` pieces twice in a hypothesis
    (`rules.ngram_bans`), no EOS before ``min_len`` [B] (`rules.min_lengths`; None: none), and
    each sentence's target ``prefix`` [B, P] (``pad`` after it; None: none) forced first."""

    def __init__(
        self,
        n: int,
        min_len: np.ndarray | None,
        eos: int,
        prefix: np.ndarray | None = None,
        pad: int = 0,
    ) -> None:
        self.n, self.min_len, self.eos = n, min_len, eos
        self.prefix, self.pad = prefix, pad

    def apply(
        self, log_probs: np.ndarray, t: int, sent: np.ndarray, history: np.ndarray | None
    ) -> np.ndarray:
        """Ban, at step ``t``, EOS in rows whose sentence (batch row ``sent`` [rows]) is short,
        and every token completing an n-gram already in the row's ``history`` [rows, t]; rows
        inside their sentence's prefix keep only its token at ``t``, with its log-prob."""
        forced = None
        if self.prefix is not None and t < self.prefix.shape[1]:
            forced = self.prefix[sent, t][:, None]  # [rows, 1] pad: not forced
            kept = np.take_along_axis(log_probs, forced, 1)  # before any ban
        if self.min_len is not None:
            log_probs[self.min_len[sent] > t, self.eos] = NEG_INF
        for row, tokens in enumerate(history if self.n else ()):
            if banned := ngram_bans(tokens.tolist(), self.n):
                log_probs[row, sorted(banned)] = NEG_INF
        if forced is not None:  # rows not forced write pad's -inf back into pad's column
            log_probs[forced[:, 0] != self.pad] = NEG_INF
            np.put_along_axis(log_probs, forced, kept, 1)
        return log_probs

    def forced_rows(self, t: int, sent: np.ndarray) -> np.ndarray | None:
        """[rows] bool: the rows whose prefix forces their token at step ``t`` (None: none)."""
        if self.prefix is None or t >= self.prefix.shape[1]:
            return None
        return self.prefix[sent, t] != self.pad


def user_bans(
    cfg: dict, src_lengths: np.ndarray, limit: np.ndarray, ids: dict, prefix: np.ndarray | None
) -> UserBans | None:
    """The bans of the settings ``cfg`` (absent, as in releases made before them: off) for a
    batch of length limits ``limit``, with its target ``prefix``; None where none is on."""
    n = cfg.get("no_repeat_ngram", 0)
    mins = min_lengths(src_lengths, cfg.get("min_len_a", 0.0), cfg.get("min_len_b", 0), limit)
    min_len = mins if mins.max(initial=0) > 0 else None
    if not n and min_len is None and prefix is None:
        return None
    return UserBans(n, min_len, ids["eos"], prefix, ids["pad"])


def limits(
    cfg: dict,
    src_lengths: np.ndarray,
    prefix: np.ndarray | None,
    pad: int,
    phrases: np.ndarray | None = None,
) -> np.ndarray:
    """Each sentence's length limit, raised so that its prefix and phrases fit with one more."""
    limit = max_lengths(src_lengths, cfg["max_len_a"], cfg["max_len_b"])
    return forced_max_lengths(limit, prefix, phrases, pad)


def _rows(fields: dict, rows: np.ndarray) -> dict:
    """Rows ``rows`` of every batched field (a 0-d field, the target position, is shared)."""
    return {n: (x if x.ndim == 0 else x[rows]) for n, x in fields.items()}


def greedy(
    graphs: Graphs,
    src: np.ndarray,
    src_lengths: np.ndarray,
    cfg: dict,
    prefix: np.ndarray | None = None,
) -> list[Hypothesis]:
    """The most probable token at every step, for a padded batch src [B, S], each sentence's
    ``prefix`` row ([B, P], pad after it; None: none) forced first."""
    ids = graphs.ids
    memory, state = graphs.encode(src)
    batch, src_len = src.shape
    limit = limits(cfg, src_lengths, prefix, ids["pad"])
    bans = user_bans(cfg, src_lengths, limit, ids, prefix)
    steps = int(limit.max()) + 1
    tokens = np.full((batch, steps), ids["pad"], dtype=np.int64)
    attention = np.zeros((batch, steps, src_len), dtype=np.float32)
    scores = np.zeros(batch, dtype=np.float32)
    lengths = np.zeros(batch, dtype=np.int64)
    active = np.arange(batch)
    running = np.ones(batch, dtype=bool)
    prev = np.full(batch, ids["bos"], dtype=np.int64)
    for t in range(steps):
        log_probs, state, weights = graphs.step(prev, state, memory)
        log_probs = restrict(log_probs, limit[active] == t, ids, t == 0)
        if bans is not None:
            log_probs = bans.apply(log_probs, t, active, tokens[active, :t])
        prev = log_probs.argmax(-1)
        best = log_probs[np.arange(len(prev)), prev]
        tokens[active, t] = prev
        attention[active, t] = weights.mean(1)
        scores[active] += np.where(running, best, np.float32(0))
        ended = running & (prev == ids["eos"])
        lengths[active] = np.where(ended, t + 1, lengths[active])
        running &= ~ended
        if not running.any():
            break
        if not running.all():
            keep = running.nonzero()[0]
            active, prev, running = active[keep], prev[keep], running[keep]
            state, memory = _rows(state, keep), _rows(memory, keep)
    return [
        Hypothesis(
            tokens[i, : lengths[i] - 1].tolist(),
            float(scores[i]) / length_penalty(int(lengths[i]), cfg["alpha"]),
            attention[i, : lengths[i], :n],
        )
        for i, n in enumerate(src_lengths.tolist())
    ]


def _top(x: np.ndarray, count: int) -> np.ndarray:
    """Indices of the ``count`` largest entries of each row, largest first."""
    part = np.argpartition(-x, count - 1, axis=1)[:, :count]
    order = np.argsort(-np.take_along_axis(x, part, 1), axis=1, kind="stable")
    return np.take_along_axis(part, order, 1)


class _Beam:
    """One batch's beam search (k beams per sentence): live beams, finished hypotheses, and
    every step's back-pointers and attention, followed back at the end."""

    def __init__(
        self,
        graphs,
        src: np.ndarray,
        src_lengths: np.ndarray,
        cfg: dict,
        prefix: np.ndarray | None,
        phrases: np.ndarray | None,
        joins: np.ndarray | None = None,
    ) -> None:
        self.graphs, self.ids = graphs, graphs.ids
        self.k, self.alpha = cfg["beam_size"], cfg["alpha"]
        self.nbest = min(cfg["nbest"], self.k)
        batch, k = len(src), self.k
        limit = limits(cfg, src_lengths, prefix, self.ids["pad"], phrases)
        self.limit, self.steps = limit, int(limit.max()) + 1
        self.user_bans = user_bans(cfg, src_lengths, limit, self.ids, prefix)
        pad = self.ids["pad"]
        self.constraints = None if phrases is None else Constraints(phrases, pad, joins)
        self.progress = None if phrases is None else self.constraints.start(batch)
        repeats = self.user_bans is not None and self.user_bans.n > 0
        # [rows, t] each row's tokens so far (no_repeat_ngram only)
        self.seqs = np.zeros((batch, 0), dtype=np.int64) if repeats else None
        self.best_penalty = np.float32(length_penalty(limit.astype(np.float64) + 1, self.alpha))
        self.memory, self.state = graphs.encode(src)
        self.sent = np.arange(batch)  # batch row of each live sentence
        self.scores = np.zeros((batch, 1), dtype=np.float32)  # [n, width]
        self.done = np.zeros(batch, dtype=bool)
        self.prev = np.full(batch, self.ids["bos"], dtype=np.int64)
        self.parents: list[np.ndarray] = []  # step t: row of step t of each row of step t + 1
        self.fed: list[np.ndarray] = []  # step t: the token each row of step t + 1 was fed
        self.history: list[np.ndarray] = []  # step t: weights of its rows [rows, S]
        self.ended_score = np.full((batch, k + 1), NEG_INF, dtype=np.float32)  # slot k: spill
        self.ended_step = np.zeros((batch, k + 1), dtype=np.int64)
        self.ended_row = np.zeros((batch, k + 1), dtype=np.int64)
        self.ended = np.zeros(batch, dtype=np.int64)
        self.ended_short = np.zeros((batch, k + 1), dtype=bool)  # ended without every phrase
        self.slots = np.arange(2 * k)

    def step(self, t: int) -> None:
        """Step ``t`` of every live beam (see the module's docstring)."""
        k, eos = self.k, self.ids["eos"]
        n, width = self.scores.shape
        log_probs, state, weights = self.graphs.step(self.prev, self.state, self.memory)
        self.history.append(weights.mean(1))
        at_limit = self.limit[self.sent] == t
        row_limit = np.repeat(at_limit, width)  # [rows]
        log_probs = restrict(log_probs, row_limit, self.ids, t == 0)
        steered = self.user_bans is not None or self.constraints is not None
        sent = np.repeat(self.sent, width) if steered else None
        if self.user_bans is not None:
            log_probs = self.user_bans.apply(log_probs, t, sent, self.seqs)
        short = None  # with constraints: rows that cannot end before their limit
        if self.constraints is not None:
            forced = None if self.user_bans is None else self.user_bans.forced_rows(t, sent)
            free = row_limit, forced
            short = self.constraints.ban(log_probs, sent, self.progress, eos, free)
        vocab = log_probs.shape[1]
        candidates = (self.scores[:, :, None] + log_probs.reshape(n, width, vocab)).reshape(n, -1)
        top_idx = _top(candidates, 2 * k)  # [n, 2k]
        top_scores = np.take_along_axis(candidates, top_idx, 1)
        top_tokens = top_idx % vocab
        top_rows = top_idx // vocab + (np.arange(n) * width)[:, None]
        is_eos = top_tokens == eos
        if self.constraints is None:  # EOS among the k best ends; the k best others go on
            self._finish(top_scores, top_rows, is_eos & (self.slots < k), t)
            order = np.argsort(is_eos * 2 * k + self.slots, axis=1, kind="stable")[:, :k]
            rows = np.take_along_axis(top_rows, order, 1).reshape(-1)
            next_tokens = np.take_along_axis(top_tokens, order, 1).reshape(-1)
            next_scores = np.take_along_axis(top_scores, order, 1)  # [n, k], best first
        else:
            top = (top_scores, top_rows, top_tokens)
            rows, next_tokens, next_scores = self._allocate(log_probs, top, sent, t, short)
        kept = -np.sort(-self.ended_score[self.sent, :k], axis=1)[:, self.nbest - 1]
        beyond = settled(kept, next_scores.max(1), self.best_penalty[self.sent])
        done = self.done | at_limit | (self.ended[self.sent] >= k) | beyond
        next_scores[done] = NEG_INF
        self.parents.append(rows)
        self.fed.append(next_tokens)
        if self.seqs is not None:
            self.seqs = np.concatenate([self.seqs[rows], next_tokens[:, None]], 1)
        self.memory = self.memory if width == k else _rows(self.memory, rows)
        self.state, self.scores, self.done, self.prev = (
            _rows(state, rows),
            next_scores,
            done,
            next_tokens,
        )

    def _allocate(
        self, log_probs: np.ndarray, top: tuple, sent: np.ndarray, t: int, short: np.ndarray
    ) -> tuple:
        """The next beams under constraints, as torch's `_allocate` chooses them (and ends
        hypotheses): rows and tokens [n * k], scores [n, k]; the chosen beams' progress is kept."""
        c, eos = self.constraints, self.ids["eos"]
        found = c.candidates(log_probs, top, sent, self.scores, self.progress, eos)
        scores, rows, tokens, valid, banks, progress = found
        n, m = scores.shape
        first = allocate(scores, banks, valid, self.k, c.banks)  # [n, k] EOS here ends
        picked = np.zeros_like(valid)
        np.put_along_axis(picked, first, True, 1)
        self._finish(scores, rows, picked & (tokens == eos) & valid, t, short)
        valid = valid & (tokens != eos)
        pick = allocate(scores, banks, valid, self.k, c.banks)  # [n, k]
        self.progress = progress.index((pick + (np.arange(n) * m)[:, None]).reshape(-1))
        next_scores = np.where(
            np.take_along_axis(valid, pick, 1), np.take_along_axis(scores, pick, 1), NEG_INF
        )
        pick_rows = np.take_along_axis(rows, pick, 1).reshape(-1)
        return pick_rows, np.take_along_axis(tokens, pick, 1).reshape(-1), next_scores

    def _finish(self, top_scores, top_rows, ends, t: int, short: np.ndarray | None = None) -> None:
        """Candidates [n, m] that ``ends`` marks (EOS at step ``t``), while their sentence has
        room, become finished hypotheses (length-normalised scores); ``short`` [rows]: rows
        that end without every phrase (constraints only)."""
        k = self.k
        ends = ends & np.isfinite(top_scores)
        rank = self.ended[self.sent][:, None] + ends.cumsum(1)
        accepted = ends & (rank <= k)
        slot = np.where(accepted, rank - 1, k)
        sentence = np.broadcast_to(self.sent[:, None], slot.shape)
        penalised = top_scores / np.float32(length_penalty(t + 1, self.alpha))
        self.ended_score[sentence, slot] = np.where(accepted, penalised, NEG_INF)
        self.ended_step[sentence, slot] = t
        self.ended_row[sentence, slot] = top_rows
        self.ended[self.sent] += accepted.sum(1)
        if short is not None:
            self.ended_short[sentence, slot] = short[top_rows] & accepted

    def drop_done(self) -> None:
        """Leave out the sentences that are done, and their rows of the last step."""
        keep = (~self.done).nonzero()[0]
        rows = (keep[:, None] * self.k + np.arange(self.k)).reshape(-1)
        self.parents[-1], self.fed[-1] = self.parents[-1][rows], self.fed[-1][rows]
        self.sent, self.scores, self.done = self.sent[keep], self.scores[keep], self.done[keep]
        self.prev = self.prev[rows]
        self.seqs = None if self.seqs is None else self.seqs[rows]
        self.progress = None if self.progress is None else self.progress.index(rows)
        self.state, self.memory = _rows(self.state, rows), _rows(self.memory, rows)

    def results(self, src_lengths: np.ndarray) -> list[list[Hypothesis]]:
        """Each sentence's ``nbest`` best finished hypotheses, best first (`follow_back`)."""
        scores = self.ended_score[:, : self.k]
        if self.constraints is not None:  # one that placed every phrase: none that did not
            short = self.ended_short[:, : self.k]
            complete = (~short & np.isfinite(scores)).any(1, keepdims=True)
            scores = np.where(short & complete, NEG_INF, scores)
        best = np.argsort(-scores, axis=1, kind="stable")[:, : self.nbest]  # [B, nbest]
        end = np.take_along_axis(self.ended_step, best, 1).reshape(-1)
        row = np.take_along_axis(self.ended_row, best, 1).reshape(-1)
        tokens, at = follow_back(self.parents, self.fed, end, row, self.ids["pad"])
        history = np.zeros(
            (len(self.history), max(map(len, self.history)), *self.history[0].shape[1:]),
            dtype=np.float32,
        )
        for t, weights in enumerate(self.history):
            history[t, : len(weights)] = weights
        attention = history[np.arange(at.shape[1]), at]  # [H, longest + 1, S]
        out, nbest = [], self.nbest
        for h, score in enumerate(np.take_along_axis(scores, best, 1).reshape(-1).tolist()):
            if h % nbest == 0:
                out.append([])
            if math.isfinite(score):
                n, length = int(src_lengths[h // nbest]), int(end[h])
                out[-1].append(
                    Hypothesis(tokens[h, :length].tolist(), score, attention[h, : length + 1, :n])
                )
        return out


def beam(
    graphs: Graphs,
    src: np.ndarray,
    src_lengths: np.ndarray,
    cfg: dict,
    prefix: np.ndarray | None = None,
    phrases: np.ndarray | None = None,
    joins: np.ndarray | None = None,
) -> list[list[Hypothesis]]:
    """n-best lists (at most ``beam_size`` each) for a padded batch src [B, S], each sentence's
    ``prefix`` row ([B, P], pad after it; None: none) forced in all its beams first, and its
    ``phrases`` ([B, C, L], pad after each; None: none) in every hypothesis (constraints), each
    ending a word: no piece of ``joins`` [V] (`word_continuations`; None: any) right after."""
    search = _Beam(graphs, src, src_lengths, cfg, prefix, phrases, joins)
    for t in range(search.steps):
        search.step(t)
        if search.done.all():
            break
        if search.done.any():
            search.drop_done()
    return search.results(src_lengths)
