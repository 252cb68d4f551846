"""Beam search, batched, on the model's device (see ``beam_search``), with GNMT's length
penalty and, optionally, its coverage penalty.

The step loop never waits for the device: every buffer is preallocated there, finished beams are
written into fixed slots, and the loop looks at the device only every ``check_interval`` steps
(to stop, and to drop finished sentences from the batch). Results come back to the host once per
batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from seq2seq_lite.rules import follow_back, length_penalty, settled
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import to_device
from seq2seq.decoding.constraints import PhraseProgress, allocate
from seq2seq.decoding.hypothesis import (
    Bans,
    BatchSteering,
    Hypothesis,
    check_interval,
    looks_at,
    make_hypotheses,
    max_lengths,
    restrict,
    user_bans,
)
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.model.states import DecoderState, EncoderOutput
from seq2seq.runtime.engine import HOST
from seq2seq.vocab import BOS, EOS, PAD


@dataclass
class _Beams:
    """What beam search carries from step to step for the ``n`` sentences still decoded."""

    sent: Tensor  # [n] batch row of each sentence
    scores: Tensor  # [n, k] log-prob sums of the live beams (-inf: none)
    done: Tensor  # [n] bool: k hypotheses finished, or the length limit reached
    prev: Tensor  # [n * k] last token of each beam
    state: DecoderState
    enc: EncoderOutput
    attended: Tensor | None = None  # [n * k, S] attention so far (coverage penalty only)
    fed: Tensor | None = None  # [n * k, t] each beam's tokens so far (no_repeat_ngram only)
    progress: PhraseProgress | None = None  # [n * k] through the constraints (constraints only)

    def select(self, keep: Tensor, k: int) -> _Beams:
        """Sentences ``keep`` [n'] only, with their k beams each."""
        rows = (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).view(-1)
        return _Beams(
            self.sent[keep],
            self.scores[keep],
            self.done[keep],
            self.prev[rows],
            self.state.index_select(rows),
            self.enc.index_select(rows),
            None if self.attended is None else self.attended[rows],
            None if self.fed is None else self.fed[rows],
            None if self.progress is None else self.progress.index(rows),
        )


@dataclass
class Ended:
    """Each batch sentence's finished hypotheses: k slots, and a last one where the others go."""

    score: Tensor  # [B, k + 1] length-normalised (+ coverage penalty); -inf: none
    step: Tensor  # [B, k + 1] the step of its EOS
    row: Tensor  # [B, k + 1] its row at that step
    count: Tensor  # [B] finished so far
    short: Tensor  # [B, k + 1] ended without every constraint phrase

    @classmethod
    def empty(cls, batch: int, k: int, device: torch.device) -> Ended:
        slots = (batch, k + 1)
        return cls(
            torch.full(slots, float("-inf"), device=device),
            torch.zeros(slots, dtype=torch.long, device=device),
            torch.zeros(slots, dtype=torch.long, device=device),
            torch.zeros(batch, dtype=torch.long, device=device),
            torch.zeros(slots, dtype=torch.bool, device=device),
        )

    def add(
        self,
        sent: Tensor,
        before: Tensor,
        found: tuple[Tensor, Tensor, Tensor],
        ends: Tensor,
        short: Tensor | None = None,
    ) -> None:
        """Write the candidates [n, m] that ``ends`` marks into the slots of their sentences
        ``sent`` [n] (``before`` [n] finished there so far) while a sentence has room; ``found``:
        their scores, rows and step (0-d); ``short``: those that end without every phrase."""
        scores, rows, step = found
        k = self.score.size(1) - 1
        ends = ends & scores.isfinite()
        rank = before.unsqueeze(1) + ends.cumsum(1)  # 1-based slot of each ending
        accepted = ends & (rank <= k)
        slot = torch.where(accepted, rank - 1, k)
        sentence = sent.unsqueeze(1).expand_as(ends)
        self.score.index_put_((sentence, slot), torch.where(accepted, scores, float("-inf")))
        self.step.index_put_((sentence, slot), step)
        self.row.index_put_((sentence, slot), rows)
        self.count.index_add_(0, sent, accepted.sum(1))
        if short is not None:
            self.short.index_put_((sentence, slot), short & accepted)


# A source word a hypothesis never attended counts as this much attention in the coverage
# penalty: log(0) would make the penalty -inf and drop every hypothesis of the sentence.
COVERAGE_FLOOR = 1e-6


def coverage_penalty(attended: Tensor, real: Tensor, beta: float) -> Tensor:
    """Wu et al. (2016): beta x sum over real source positions of log(min(attention, 1)), for
    the attention each row has given each position so far, [rows, S] -> [rows] (at most 0)."""
    capped = attended.clamp(COVERAGE_FLOOR, 1.0).log()
    return beta * torch.where(real, capped, 0.0).sum(-1)


class BeamSearch:
    """The device state of one batch's beam search (k beams per sentence): the live beams, the
    finished hypotheses, and every step's back-pointers and attention, followed back at the end.
    """

    def __init__(
        self,
        model: Seq2Seq,
        src: Tensor,
        src_lengths: Tensor,
        cfg: DecodeConfig,
        steer: BatchSteering | None = None,
        steps: int | None = None,
    ) -> None:
        self.model, self.k, self.alpha = model, cfg.beam_size, cfg.alpha
        self.beta = cfg.coverage_penalty
        self.nbest = min(cfg.nbest, cfg.beam_size)  # a sentence finishes at most k hypotheses
        k, (batch, src_len) = self.k, src.shape
        device = src.device
        limit_host = max_lengths(src_lengths, cfg.max_len_a, cfg.max_len_b)  # [B]
        limit_host = limit_host if steer is None else steer.limits(limit_host)
        self.steps = int(limit_host.max()) + 1 if steps is None else steps  # buffers' steps
        # [B] the largest penalty a hypothesis of each sentence can get: EOS at its length limit
        best = length_penalty(limit_host.double() + 1, self.alpha).float()
        self.limit, self.best_penalty = to_device(limit_host, device), to_device(best, device)
        # a prefix leaves one finite beam per sentence (the others -inf) until it ends
        self.user_bans = user_bans(cfg, src_lengths, limit_host, device, steer)
        self.constraints = None if steer is None else steer.constraints(device)
        repeats = self.user_bans is not None and self.user_bans.n > 0
        heads = model.decoder.heads
        enc = model.encode(src, src_lengths)
        self.beams = _Beams(
            torch.arange(batch, device=device),
            torch.zeros(batch, 1, device=device),  # [n, width]: one row per sentence at first
            torch.zeros(batch, dtype=torch.bool, device=device),
            torch.full((batch,), BOS, dtype=torch.long, device=device),
            model.decoder.init_state(enc),
            enc,
            torch.zeros(batch, src_len, device=device) if self.beta else None,
            torch.zeros(batch, 0, dtype=torch.long, device=device) if repeats else None,
            None if self.constraints is None else self.constraints.start(batch),
        )
        self.src_lengths = to_device(src_lengths, device)
        # Row j of step t + 1 continues row parents[t, j] of step t with token fed[t, j]; the rows
        # of a step are those of its live sentences, so their number shrinks as sentences finish.
        self.parents = torch.zeros(self.steps, batch * k, dtype=torch.long, device=device)
        self.fed = torch.zeros(self.steps, batch * k, dtype=torch.long, device=device)
        self.history = torch.zeros(self.steps, batch * k, heads, src_len, device=device)
        self.ended = Ended.empty(batch, k, device)
        self.slots = torch.arange(2 * k, device=device)  # [2k]
        self.first_k = self.slots < k
        self.step_numbers = torch.arange(self.steps, device=device)
        self.whole = True  # every batch sentence is live, in order: `mine` needs no indexing
        # row offsets of each sentence's rows, while whole: one row each at first, then k
        self.offsets = {w: torch.arange(0, batch * w, w, device=device)[:, None] for w in (1, k)}
        self.bans = Bans()  # its rows made at the first step, the vocabulary known

    def mine(self, x: Tensor) -> Tensor:
        """The rows of a per-sentence tensor [B, ...] that belong to the live sentences [n]."""
        return x if self.whole else x[self.beams.sent]

    def step(self, t: int, look: bool) -> None:
        """Step ``t`` of every live beam: EOS among the k best candidates of a sentence finishes
        a hypothesis, the k best other continuations become its beams (with constraints: the k
        that `allocate` chooses), and a sentence with k hypotheses, at its length limit, or
        beyond improving its n-best list is done."""
        beams, k = self.beams, self.k
        n, width = beams.scores.shape  # width: rows per sentence, 1 at the first step, then k
        log_probs, state, weights = self.model.decoder.step(beams.prev, beams.state, beams.enc)
        self.history[t, : n * width] = weights.float()
        attended, penalty = self._coverage(weights, width)
        at_limit = self.mine(self.limit) == t  # [n]
        row_limit = at_limit.unsqueeze(1).expand(n, width).reshape(-1)  # [rows]
        log_probs = restrict(log_probs, row_limit, look, t == 0, self.bans)
        sent = beams.sent.repeat_interleave(width) if self.user_bans or self.constraints else None
        if self.user_bans is not None:
            log_probs = self.user_bans.apply(log_probs, t, sent, beams.fed)
        short = None  # [rows] with constraints: rows that have not placed every phrase
        if self.constraints is not None:  # they cannot end before their limit (`ban`)
            forced = None if self.user_bans is None else self.user_bans.forced_rows(t, sent)
            short = self.constraints.ban(log_probs, sent, beams.progress, (row_limit, forced))
        vocab = log_probs.size(1)
        candidates = beams.scores.unsqueeze(2) + log_probs.view(n, width, vocab)
        top_scores, top_idx = candidates.view(n, width * vocab).topk(2 * k, dim=1)  # [n, 2k]
        offsets = self.offsets.get(width) if self.whole else None  # [n, 1]
        if offsets is None:
            offsets = torch.arange(0, n * width, width, device=top_idx.device)[:, None]
        top_rows, top_tokens = top_idx // vocab + offsets, top_idx % vocab
        rows, next_tokens = self.parents[t, : n * k], self.fed[t, : n * k]  # [n * k] written
        progress = None
        if self.constraints is None:  # EOS among the k best ends; the k best others go on
            is_eos = top_tokens == EOS
            self._finish((top_scores, top_rows), is_eos & self.first_k, t, penalty)
            order = (self.slots + is_eos * (2 * k)).argsort(dim=1)[:, :k]  # [n, k]
            torch.gather(top_rows, 1, order, out=rows.view(n, k))
            torch.gather(top_tokens, 1, order, out=next_tokens.view(n, k))
            next_scores = top_scores.gather(1, order)  # [n, k], best first
        else:
            top, ending = (top_scores, top_rows, top_tokens), (t, penalty, short)
            chosen, tokens, next_scores, progress = self._allocate(log_probs, top, sent, ending)
            rows.copy_(chosen)
            next_tokens.copy_(tokens)
        # [n] the nbest-th finished score of each sentence
        kept = self.mine(self.ended.score)[:, :k].topk(self.nbest, dim=1).values[:, -1]
        best = next_scores.max(1).values
        done = (
            beams.done
            | at_limit
            | (self.mine(self.ended.count) >= k)
            | settled(kept, best, self.mine(self.best_penalty))
        )
        next_scores = next_scores.masked_fill(done.unsqueeze(1), float("-inf"))
        enc = beams.enc if width == k else beams.enc.index_select(rows)  # k beams each
        attended = None if attended is None else attended[rows]
        fed = None if beams.fed is None else torch.cat([beams.fed[rows], next_tokens[:, None]], 1)
        state = state.index_select(rows)
        self.beams = _Beams(
            beams.sent, next_scores, done, next_tokens, state, enc, attended, fed, progress
        )

    def _allocate(
        self, log_probs: Tensor, top: tuple[Tensor, Tensor, Tensor], sent: Tensor, ending: tuple
    ) -> tuple[Tensor, Tensor, Tensor, PhraseProgress]:
        """The next beams under constraints: the ``top`` candidates (scores, rows, tokens
        [n, 2k]), each row's tokens that advance a constraint, its best token and its EOS, in
        the banks of their met counts. EOS among the k that `allocate` takes from all of them
        ends a hypothesis (``ending``: `_finish`'s step, penalty and short rows), as EOS among
        the k best does without constraints; the k it takes from the others go on. Rows and
        tokens [n * k], scores [n, k] and the chosen beams' progress."""
        beams, k, constraints = self.beams, self.k, self.constraints
        found = constraints.candidates(log_probs, top, sent, beams.scores, beams.progress)
        scores, rows, tokens, valid, banks, progress = found
        n, m = scores.shape
        first = allocate(scores, banks, valid, k, constraints.banks)  # [n, k] EOS here ends
        ends = torch.zeros_like(valid).scatter_(1, first, True) & (tokens == EOS) & valid
        self._finish((scores, rows), ends, *ending)
        valid = valid & (tokens != EOS)
        pick = allocate(scores, banks, valid, k, constraints.banks)  # [n, k]
        chosen = (pick + (torch.arange(n, device=pick.device) * m).unsqueeze(1)).view(-1)
        next_scores = scores.gather(1, pick).masked_fill(~valid.gather(1, pick), -math.inf)
        picked = rows.gather(1, pick).view(-1), tokens.gather(1, pick).view(-1)
        return *picked, next_scores, progress.index(chosen)

    def _coverage(self, weights: Tensor, width: int) -> tuple[Tensor | None, Tensor | None]:
        """With a coverage penalty: each row's attention including this step's weights
        [rows, heads, S], and the penalty [rows] a hypothesis ending there gets."""
        if self.beams.attended is None:
            return None, None
        attended = self.beams.attended + weights.float().mean(1)  # [rows, S]
        lengths = self.src_lengths[self.beams.sent].repeat_interleave(width)  # [rows]
        real = torch.arange(attended.size(1), device=attended.device) < lengths.unsqueeze(1)
        return attended, coverage_penalty(attended, real, self.beta)

    def _finish(
        self,
        top: tuple[Tensor, Tensor],
        ends: Tensor,
        t: int,
        penalty: Tensor | None,
        short: Tensor | None = None,
    ) -> None:
        """The candidates [n, m] (``top``: scores and rows) that ``ends`` marks (EOS at step
        ``t``) finish, their scores length-normalised, plus the coverage ``penalty`` [rows] of
        their row; with constraints, ``short`` [rows] marks the rows that end without every
        phrase."""
        scores, rows = top
        penalised = scores / length_penalty(t + 1, self.alpha)
        if penalty is not None:
            penalised = penalised + penalty[rows]
        found = penalised, rows, self.step_numbers[t]
        unmet = None if short is None else short[rows]
        self.ended.add(self.beams.sent, self.mine(self.ended.count), found, ends, unmet)

    def drop_done(self, t: int) -> None:
        """Leave out the sentences that are done: from the live beams and step ``t``'s rows."""
        k = self.k
        keep = (~self.beams.done).nonzero().squeeze(1)
        kept = (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).view(-1)
        self.beams = self.beams.select(keep, k)  # first: the beams' last tokens view step t's
        self.parents[t, : kept.numel()] = self.parents[t, kept].clone()
        self.fed[t, : kept.numel()] = self.fed[t, kept].clone()
        self.whole = False

    def results(self, src_lengths: Tensor) -> list[list[Hypothesis]]:
        """Each sentence's ``nbest`` best finished hypotheses, on the host."""
        return backtrack(*self.found(), src_lengths, self.nbest)

    def found(self, copy: bool = False, steps: int | None = None) -> tuple[Tensor | None, ...]:
        """What `results` reads: the finished slots [B, k] (scores, EOS steps, rows, and with
        constraints which lack a phrase), the back-pointers and the attention of the first
        ``steps`` (None: all). ``copy``: host copies, queued without waiting for the device
        (read them once it is through)."""
        k, ended, run = self.k, self.ended, slice(steps)
        short = ended.short[:, :k] if self.constraints is not None else None
        held = (ended.score[:, :k], ended.step[:, :k], ended.row[:, :k], short)
        held += (self.parents[run], self.fed[run], self.history[run])
        if not copy:
            return held
        return tuple(None if x is None else x.to(HOST, non_blocking=True, copy=True) for x in held)


@torch.inference_mode()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    cfg: DecodeConfig,
    *,
    check_every: int | None = None,
    steer: BatchSteering | None = None,
) -> list[list[Hypothesis]]:
    """Beam search for a batch src [B, S] with the settings of ``cfg``; per sentence the
    ``nbest`` best (at most ``beam_size``), sorted by score.

    Each step keeps the ``beam_size`` best unfinished continuations, the bans of ``cfg``
    applied (no_repeat_ngram, min_len_a and min_len_b: `user_bans`); EOS among the ``beam_size``
    best candidates finishes a hypothesis, and a sentence is done with ``beam_size`` of them, or
    as soon as no live beam can end above its ``nbest``-th finished score (an exact bound:
    log-probabilities only fall, and the length penalty is largest at the length limit), which
    leaves the returned n-best lists unchanged.
    A beam's history is a chain of back-pointers through the steps, followed back once at the end.
    The first step runs one row per sentence (all its beams would be the same); the k beams of
    each sentence start from its k best first tokens. The loop looks at the device every
    ``check_every`` steps (None: `check_interval` of the device). ``steer``: each sentence's
    target prefix, forced in all its beams first, and its constraints (`constraints`).
    """
    search = BeamSearch(model, src, src_lengths, cfg, steer)
    every = check_interval(src.device) if check_every is None else check_every
    for t in range(search.steps):
        look = looks_at(t, search.steps, every)
        search.step(t, look)
        if look:
            if bool(search.beams.done.all()):
                break
            if bool(search.beams.done.any()):
                search.drop_done(t)
    return search.results(src_lengths)


def backtrack(
    scores: Tensor,
    ends: Tensor,
    rows: Tensor,
    short: Tensor | None,
    parents: Tensor,
    fed: Tensor,
    history: Tensor,
    src_lengths: Tensor,
    nbest: int,
) -> list[list[Hypothesis]]:
    """Each sentence's ``nbest`` best finished hypotheses (`BeamSearch.found`'s tensors): chosen
    where the tensors are, their back-pointers followed on the host (`follow_back`), their
    attention gathered in one indexing, then copied to the host."""
    if short is not None:  # one that placed every phrase: none that did not
        complete = (~short & scores.isfinite()).any(1, keepdim=True)  # [B, 1]
        scores = scores.masked_fill(short & complete, float("-inf"))
    best = scores.argsort(dim=1, descending=True, stable=True)[:, :nbest]  # [B, nbest]
    best_scores = scores.gather(1, best).cpu()
    where = torch.stack([ends.gather(1, best), rows.gather(1, best)]).view(2, -1).cpu()  # [2, H]
    end, row = where.numpy()
    longest = int(end.max(initial=0))
    pointers = torch.stack([parents[:longest], fed[:longest]]).cpu().numpy()  # [2, longest, rows]
    tokens, at = follow_back(pointers[0], pointers[1], end, row, PAD)
    steps = torch.arange(longest + 1, device=history.device).expand(len(end), -1)
    attention = history[steps, torch.from_numpy(at).to(history.device)].cpu()  # [H, T, heads, S]
    per_hyp = [n for n in src_lengths.tolist() for _ in range(nbest)]
    hyps = make_hypotheses(tokens, best_scores.view(-1).tolist(), attention, end + 1, per_hyp)
    return [
        [h for h in hyps[b * nbest : (b + 1) * nbest] if math.isfinite(h.score)]
        for b in range(len(src_lengths))
    ]
