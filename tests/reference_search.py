"""The search as it was before it became sync-free (commit fa9b8d8, host only): the oracle that
tests/test_search.py holds today's search against. The rules every search shares (the length
limit and penalty, no EOS at the first step) it takes from seq2seq_lite.rules. Not used by the
package."""

from __future__ import annotations

import torch
from seq2seq_lite.rules import eos_banned
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.search import Hypothesis, length_penalty, max_lengths
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.vocab import BOS, EOS, PAD


def _restrict(log_probs: Tensor, at_limit: Tensor, first: bool) -> Tensor:
    """Forbid PAD and BOS everywhere, EOS at the first step unless at the limit, and anything
    but EOS in rows that reached their limit."""
    log_probs[:, [PAD, BOS]] = float("-inf")
    if (banned := eos_banned(first, at_limit)) is not None:
        log_probs[banned, EOS] = float("-inf")
    if at_limit.any():
        log_probs[at_limit, :EOS] = float("-inf")
        log_probs[at_limit, EOS + 1 :] = float("-inf")
    return log_probs


def _hypothesis(tokens: Tensor, score: float, attention: Tensor, src_len: int) -> Hypothesis:
    """Build a result from ids [L] and attention [L + 1, heads, S] cut to the real source."""
    attention = attention[:, :, :src_len].float()  # [L + 1, heads, src_len]
    heads = attention.transpose(0, 1).clone() if attention.size(1) > 1 else None
    return Hypothesis(tokens.tolist(), score, attention.mean(1), heads)


@torch.inference_mode()
def greedy_search(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig
) -> list[Hypothesis]:
    """Most probable next token at every step, for a batch src [B, S] at once."""
    enc = model.encode(src, src_lengths)
    state = model.decoder.init_state(enc)
    batch, src_len = src.shape
    limit = max_lengths(src_lengths, cfg.max_len_a, cfg.max_len_b)  # [B]
    steps = int(limit.max()) + 1
    heads = model.decoder.heads
    tokens = torch.full((batch, steps), PAD, dtype=torch.long)
    attention = torch.zeros(batch, steps, heads, src_len)
    scores = torch.zeros(batch, dtype=torch.float64)
    lengths = torch.zeros(batch, dtype=torch.long)  # steps taken, EOS included
    active = torch.arange(batch)  # original rows still decoding
    prev = torch.full((batch,), BOS, dtype=torch.long)
    for t in range(steps):
        log_probs, state, weights = model.decoder.step(prev, state, enc)  # [b, V]
        log_probs = _restrict(log_probs, limit[active] == t, t == 0)
        best, prev = log_probs.max(dim=-1)  # [b]
        tokens[active, t] = prev
        attention[active, t] = weights.float()
        scores[active] += best.double()
        done = prev == EOS
        if done.any():
            lengths[active[done]] = t + 1
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            active, prev = active[keep], prev[keep]
            state, enc = state.index_select(keep), enc.index_select(keep)
    return [
        _hypothesis(
            tokens[i, : lengths[i] - 1],
            float(scores[i]) / length_penalty(int(lengths[i]), cfg.alpha),
            attention[i, : lengths[i]],
            n,
        )
        for i, n in enumerate(src_lengths.tolist())
    ]


@torch.inference_mode()
def beam_search(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig
) -> list[list[Hypothesis]]:
    """Beam search for a batch src [B, S]; per sentence the ``nbest`` best, sorted by score.

    Each step keeps the ``beam_size`` best unfinished continuations; EOS among the ``beam_size``
    best candidates finishes a hypothesis, and a sentence is done with ``beam_size`` of them.
    """
    k = cfg.beam_size
    batch, src_len = src.shape
    enc = model.encode(src, src_lengths).index_select(torch.arange(batch).repeat_interleave(k))
    state = model.decoder.init_state(enc)  # rows: sentence-major, k beams each
    limit = max_lengths(src_lengths, cfg.max_len_a, cfg.max_len_b)  # [B]
    heads = model.decoder.heads
    sent = torch.arange(batch)  # original sentence of each active sentence
    scores = torch.full((batch, k), float("-inf"))  # [n, k] log-prob sums
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    tokens = torch.zeros(batch * k, 0, dtype=torch.long)  # [n * k, t]
    history = torch.zeros(batch * k, 0, heads, src_len)  # [n * k, t, heads, S]
    prev = torch.full((batch * k,), BOS, dtype=torch.long)
    finished: list[list[tuple[float, Tensor, Tensor]]] = [[] for _ in range(batch)]
    first_k = torch.arange(2 * k) < k  # [2k]
    for t in range(int(limit.max()) + 1):
        n = sent.numel()
        log_probs, state, weights = model.decoder.step(prev, state, enc)  # [n * k, V]
        at_limit = limit[sent] == t  # [n]
        log_probs = _restrict(log_probs, at_limit.repeat_interleave(k), t == 0)
        vocab = log_probs.size(1)
        candidates = (scores.unsqueeze(2) + log_probs.view(n, k, vocab)).view(n, k * vocab)
        top_scores, top_idx = candidates.topk(2 * k, dim=1)  # [n, 2k]
        top_tokens = top_idx % vocab
        parents = top_idx // vocab + (torch.arange(n) * k).unsqueeze(1)  # rows of this step
        is_eos = top_tokens == EOS
        ends = is_eos & first_k & top_scores.isfinite()  # [n, 2k]
        for i, j in ends.nonzero().tolist():
            hyps = finished[int(sent[i])]
            if len(hyps) < k:
                row = int(parents[i, j])
                attention = torch.cat([history[row], weights[row].unsqueeze(0).float()])
                source_len = int(src_lengths[sent[i]])
                score = _finished_score(float(top_scores[i, j]), t + 1, attention, source_len, cfg)
                hyps.append((score, tokens[row], attention))
        done = at_limit | torch.tensor([len(finished[s]) >= k for s in sent.tolist()])
        if bool(done.all()):
            break
        # the k best continuations that are not EOS, in score order
        order = (is_eos * 2 * k + torch.arange(2 * k)).argsort(dim=1)[:, :k]  # [n, k]
        keep = (~done).nonzero().squeeze(1)  # [n']
        rows = parents.gather(1, order)[keep].view(-1)  # [n' * k]
        next_tokens = top_tokens.gather(1, order)[keep].view(-1)  # [n' * k]
        scores = top_scores.gather(1, order)[keep]  # [n', k]
        tokens = torch.cat([tokens[rows], next_tokens.unsqueeze(1)], dim=1)  # [n' * k, t + 1]
        history = torch.cat([history[rows], weights[rows].unsqueeze(1).float()], dim=1)
        state, prev = state.index_select(rows), next_tokens
        if keep.numel() < n:
            enc = enc.index_select((keep.unsqueeze(1) * k + torch.arange(k)).view(-1))
            sent = sent[keep]
    return _nbest(finished, src_lengths, cfg.nbest)


def _finished_score(
    log_prob: float, length: int, attention: Tensor, source_len: int, cfg: DecodeConfig
) -> float:
    """A finished hypothesis's score: length-penalised, plus Wu et al.'s coverage penalty where
    asked (never-attended words count as 1e-6)."""
    score = log_prob / length_penalty(length, cfg.alpha)
    if cfg.coverage_penalty:
        covered = attention.mean(1).sum(0)[:source_len]
        score += cfg.coverage_penalty * float(covered.clamp(1e-6, 1.0).log().sum())
    return score


def _nbest(
    finished: list[list[tuple[float, Tensor, Tensor]]], src_lengths: Tensor, nbest: int
) -> list[list[Hypothesis]]:
    """Each sentence's ``nbest`` best finished hypotheses, best first."""
    results = []
    for hyps, n in zip(finished, src_lengths.tolist(), strict=True):
        best = sorted(hyps, key=lambda h: -h[0])[:nbest]
        results.append([_hypothesis(toks, score, att, n) for score, toks, att in best])
    return results
