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
from seq2seq_lite.rules import length_penalty
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.constraints import Constraints, Progress, allocate
from seq2seq.decoding.hypothesis import (
    Bans,
    BatchSteering,
    Hypothesis,
    check_interval,
    looks_at,
    make_hypothesis,
    max_lengths,
    restrict,
    steering,
)
from seq2seq.model.decoder import DecoderState, EncoderOutput
from seq2seq.model.seq2seq import Seq2Seq
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
    progress: Progress | None = None  # [n * k] through the constraints (constraints only)

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
        self.limit = limit_host.to(device)
        # [B] the largest penalty a hypothesis of each sentence can get: EOS at its length limit
        self.best_penalty = length_penalty(limit_host.double() + 1, self.alpha).float().to(device)
        # a prefix leaves one finite beam per sentence (the others -inf) until it ends
        self.steering = steering(cfg, src_lengths, limit_host, device, steer)
        phrases = None if steer is None else steer.phrases
        self.constraints = None if phrases is None else Constraints(phrases.to(device))
        repeats = self.steering is not None and self.steering.n > 0
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
        self.src_lengths = src_lengths.to(device)
        # Row j of step t + 1 continues row parents[t, j] of step t with token fed[t, j]; the rows
        # of a step are those of its live sentences, so their number shrinks as sentences finish.
        self.parents = torch.zeros(self.steps, batch * k, dtype=torch.long, device=device)
        self.fed = torch.zeros(self.steps, batch * k, dtype=torch.long, device=device)
        self.history = torch.zeros(self.steps, batch * k, heads, src_len, device=device)
        # Finished hypotheses per batch sentence: k slots, and a last one where the others go.
        self.ended_score = torch.full((batch, k + 1), float("-inf"), device=device)
        self.ended_step = torch.zeros(batch, k + 1, dtype=torch.long, device=device)
        self.ended_row = torch.zeros(batch, k + 1, dtype=torch.long, device=device)
        self.ended = torch.zeros(batch, dtype=torch.long, device=device)  # finished so far
        self.ended_short = torch.zeros(batch, k + 1, dtype=torch.bool, device=device)  # unmet
        self.slots = torch.arange(2 * k, device=device)  # [2k]
        self.bans = Bans()  # its rows made at the first step, the vocabulary known

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
        at_limit = self.limit[beams.sent] == t  # [n]
        row_limit = at_limit.repeat_interleave(width)  # [rows]
        log_probs = restrict(log_probs, row_limit, look, t == 0, self.bans)
        sent = beams.sent.repeat_interleave(width) if self.steering or self.constraints else None
        if self.steering is not None:
            log_probs = self.steering.apply(log_probs, t, sent, beams.fed)
        short = None  # [rows] with constraints: rows that have not placed every phrase
        if self.constraints is not None:  # they cannot end before their limit
            short = ~self.constraints.complete(sent, beams.progress)
            log_probs[:, EOS].masked_fill_(short & ~row_limit, -math.inf)
        vocab = log_probs.size(1)
        candidates = beams.scores.unsqueeze(2) + log_probs.view(n, width, vocab)
        top_scores, top_idx = candidates.view(n, width * vocab).topk(2 * k, dim=1)  # [n, 2k]
        top_tokens = top_idx % vocab
        top_rows = top_idx // vocab + (torch.arange(n, device=top_idx.device) * width).unsqueeze(1)
        is_eos = top_tokens == EOS
        progress = None
        if self.constraints is None:  # EOS among the k best ends; the k best others go on
            self._finish(top_scores, top_rows, is_eos & (self.slots < k), t, penalty)
            order = (is_eos * 2 * k + self.slots).argsort(dim=1)[:, :k]  # [n, k]
            rows = top_rows.gather(1, order).view(-1)  # [n * k] rows of this step
            next_tokens = top_tokens.gather(1, order).view(-1)
            next_scores = top_scores.gather(1, order)  # [n, k], best first
        else:
            top = top_scores, top_rows, top_tokens
            ended = t, penalty, short
            rows, next_tokens, next_scores, progress = self._allocate(log_probs, top, sent, ended)
        # [n] the nbest-th finished score of each sentence
        kept = self.ended_score[beams.sent, :k].topk(self.nbest, dim=1).values[:, -1]
        best = next_scores.max(1).values / self.best_penalty[beams.sent]
        done = (
            beams.done
            | at_limit
            | (self.ended[beams.sent] >= k)
            | (kept.isfinite() & (kept >= best))
        )
        next_scores = next_scores.masked_fill(done.unsqueeze(1), float("-inf"))
        self.parents[t, : n * k], self.fed[t, : n * k] = rows, next_tokens
        enc = beams.enc if width == k else beams.enc.index_select(rows)  # k beams each
        attended = None if attended is None else attended[rows]
        fed = None if beams.fed is None else torch.cat([beams.fed[rows], next_tokens[:, None]], 1)
        state = state.index_select(rows)
        self.beams = _Beams(
            beams.sent, next_scores, done, next_tokens, state, enc, attended, fed, progress
        )

    def _allocate(
        self, log_probs: Tensor, top: tuple[Tensor, Tensor, Tensor], sent: Tensor, ended: tuple
    ) -> tuple[Tensor, Tensor, Tensor, Progress]:
        """The next beams under constraints: the ``top`` candidates (scores, rows, tokens
        [n, 2k]), each row's tokens that advance a constraint, its best token and its EOS, in
        the banks of their met counts. EOS among the k that `allocate` takes from all of them
        ends a hypothesis (``ended``: `_finish`'s step, penalty and short rows), as EOS among
        the k best does without constraints; the k it takes from the others go on. Rows and
        tokens [n * k], scores [n, k] and the chosen beams' progress."""
        beams, k, constraints = self.beams, self.k, self.constraints
        found = constraints.candidates(log_probs, top, sent, beams.scores, beams.progress)
        scores, rows, tokens, valid, banks, progress = found
        n, m = scores.shape
        first = allocate(scores, banks, valid, k, constraints.banks)  # [n, k] EOS here ends
        ends = torch.zeros_like(valid).scatter_(1, first, True) & (tokens == EOS) & valid
        self._finish(scores, rows, ends, *ended)
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
        top_scores: Tensor,
        top_rows: Tensor,
        ends: Tensor,
        t: int,
        penalty: Tensor | None,
        short: Tensor | None = None,
    ) -> None:
        """Write the candidates [n, m] that ``ends`` marks (EOS at step ``t``) into their
        sentences' slots while the sentence has room; a score is length-normalised, plus the
        coverage ``penalty`` [rows] of its row; with constraints, ``short`` [rows] marks the
        rows that end without every phrase."""
        sent, k = self.beams.sent, self.k
        ends = ends & top_scores.isfinite()  # [n, m]
        before = self.ended[sent].unsqueeze(1)  # [n, 1]
        rank = before + ends.cumsum(1)  # 1-based slot of each ending
        accepted = ends & (rank <= k)
        slot = torch.where(accepted, rank - 1, k)
        sentence = sent.unsqueeze(1).expand_as(ends)
        penalised = top_scores / length_penalty(t + 1, self.alpha)
        if penalty is not None:
            penalised = penalised + penalty[top_rows]
        score = torch.where(accepted, penalised, float("-inf"))
        self.ended_score.index_put_((sentence, slot), score)
        self.ended_step.index_put_((sentence, slot), torch.full_like(slot, t))
        self.ended_row.index_put_((sentence, slot), top_rows)
        self.ended.index_add_(0, sent, accepted.sum(1))
        if short is not None:
            self.ended_short.index_put_((sentence, slot), short[top_rows] & accepted)

    def drop_done(self, t: int) -> None:
        """Leave out the sentences that are done: from the live beams and step ``t``'s rows."""
        k = self.k
        keep = (~self.beams.done).nonzero().squeeze(1)
        kept = (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).view(-1)
        self.parents[t, : kept.numel()] = self.parents[t, kept].clone()
        self.fed[t, : kept.numel()] = self.fed[t, kept].clone()
        self.beams = self.beams.select(keep, k)

    def results(self, src_lengths: Tensor) -> list[list[Hypothesis]]:
        """Each sentence's ``nbest`` best finished hypotheses, on the host."""
        k = self.k
        ended = self.ended_score[:, :k], self.ended_step[:, :k], self.ended_row[:, :k]
        short = self.ended_short[:, :k] if self.constraints is not None else None
        return _backtrack(
            *ended, self.parents, self.fed, self.history, src_lengths, self.nbest, short
        )


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
    applied (no_repeat_ngram, min_len_a and min_len_b: `steering`); EOS among the ``beam_size``
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


def _backtrack(
    scores: Tensor,
    ends: Tensor,
    rows: Tensor,
    parents: Tensor,
    fed: Tensor,
    history: Tensor,
    src_lengths: Tensor,
    nbest: int,
    short: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Follow the back-pointers of each sentence's ``nbest`` best finished hypotheses (slots
    [B, k]: scores, the step of their EOS, its row) on the device; then one copy to the host."""
    if short is not None:  # one that placed every phrase: none that did not
        complete = (~short & scores.isfinite()).any(1, keepdim=True)  # [B, 1]
        scores = scores.masked_fill(short & complete, float("-inf"))
    best = scores.argsort(dim=1, descending=True, stable=True)[:, :nbest]  # [B, nbest]
    best_scores = scores.gather(1, best)
    end, row = ends.gather(1, best).view(-1), rows.gather(1, best).view(-1)  # [H]
    longest = int(end.max())
    tokens = torch.full((len(end), longest), PAD, dtype=torch.long, device=end.device)
    attention = torch.zeros(len(end), longest + 1, *history.shape[2:], device=end.device)
    attention[torch.arange(len(end), device=end.device), end] = history[end, row]  # EOS rows
    for t in range(longest - 1, -1, -1):
        back = t < end  # [H] hypotheses that are longer than t
        tokens[:, t] = torch.where(back, fed[t, row], PAD)
        row = torch.where(back, parents[t, row], row)
        attention[:, t] = torch.where(back[:, None, None], history[t, row], attention[:, t])
    best_scores, end, tokens, attention = (x.cpu() for x in (best_scores, end, tokens, attention))
    results = []
    for b, n in enumerate(src_lengths.tolist()):
        hyps = []
        for j, score in enumerate(best_scores[b].tolist()):
            if math.isfinite(score):
                h, length = b * nbest + j, int(end[b * nbest + j])
                hyps.append(
                    make_hypothesis(tokens[h, :length], score, attention[h, : length + 1], n)
                )
        results.append(hyps)
    return results
