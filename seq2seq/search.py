"""Greedy and beam search, batched: finished sentences leave the active set as soon as they end.

Both stop a sentence at ``max_len = floor(a * src_len + b)`` target tokens (src_len counts the
source EOS) by forcing EOS there, so every hypothesis ends with EOS and its attention has one row
per output token plus the EOS row. They run on the model's device: every buffer is created there,
and results come back to the host once per batch. Call ``model.eval()`` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.vocab import BOS, EOS, PAD


@dataclass
class Hypothesis:
    """One translation: target ids without BOS/EOS, its score and where it attended."""

    tokens: list[int]
    score: float  # greedy: sum of log-probs; beam: that sum / GNMT length penalty
    attention: Tensor  # [len(tokens) + 1, src_len] mean over heads, last row = EOS
    head_attention: Tensor | None = None  # [heads, len(tokens) + 1, src_len] for multi-head


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; ``length`` counts the EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src_lengths: Tensor, a: float, b: int) -> Tensor:
    """Per-sentence limit on generated tokens before EOS is forced: [B] int64 (host lengths)."""
    return (src_lengths.cpu().double() * a + b).floor().long().clamp(min=0)


def _restrict(log_probs: Tensor, at_limit: Tensor) -> Tensor:
    """Forbid PAD and BOS everywhere, and anything but EOS in rows that reached their limit."""
    log_probs[:, [PAD, BOS]] = float("-inf")
    if at_limit.any():
        log_probs[at_limit, :EOS] = float("-inf")
        log_probs[at_limit, EOS + 1 :] = float("-inf")
    return log_probs


def _hypothesis(tokens: Tensor, score: float, attention: Tensor, src_len: int) -> Hypothesis:
    """Build a result from host ids [L] and attention [L + 1, heads, S] cut to the real source."""
    attention = attention[:, :, :src_len].float()  # [L + 1, heads, src_len]
    heads = attention.transpose(0, 1).clone() if attention.size(1) > 1 else None
    return Hypothesis(tokens.tolist(), score, attention.mean(1), heads)


@torch.inference_mode()
def greedy_search(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, max_len_a: float, max_len_b: int
) -> list[Hypothesis]:
    """Most probable next token at every step, for a batch src [B, S] at once."""
    enc = model.encode(src, src_lengths)
    state = model.decoder.init_state(enc)
    batch, src_len = src.shape
    device = src.device
    limit_host = max_lengths(src_lengths, max_len_a, max_len_b)  # [B]
    steps = int(limit_host.max()) + 1
    limit = limit_host.to(device)
    heads = model.decoder.attention.heads
    tokens = torch.full((batch, steps), PAD, dtype=torch.long, device=device)
    attention = torch.zeros(batch, steps, heads, src_len, device=device)
    scores = torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)  # steps taken, EOS included
    active = torch.arange(batch, device=device)  # original rows still decoding
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    for t in range(steps):
        log_probs, state, weights = model.decoder.step(prev, state, enc)  # [b, V]
        log_probs = _restrict(log_probs, limit[active] == t)
        best, prev = log_probs.max(dim=-1)  # [b]
        tokens[active, t] = prev
        attention[active, t] = weights.float()
        scores[active] += best.float()
        done = prev == EOS
        if done.any():
            lengths[active[done]] = t + 1
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            active, prev = active[keep], prev[keep]
            state, enc = state.index_select(keep), enc.index_select(keep)
    tokens, attention, scores, lengths = (x.cpu() for x in (tokens, attention, scores, lengths))
    return [
        _hypothesis(tokens[i, : lengths[i] - 1], float(scores[i]), attention[i, : lengths[i]], n)
        for i, n in enumerate(src_lengths.tolist())
    ]


@torch.inference_mode()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    beam_size: int,
    alpha: float,
    nbest: int,
    max_len_a: float,
    max_len_b: int,
) -> list[list[Hypothesis]]:
    """Beam search for a batch src [B, S]; per sentence the ``nbest`` best, sorted by score.

    Each step keeps the ``beam_size`` best unfinished continuations; EOS among the ``beam_size``
    best candidates finishes a hypothesis, and a sentence is done with ``beam_size`` of them.
    """
    k = beam_size
    batch, src_len = src.shape
    device = src.device
    beams = torch.arange(batch, device=device).repeat_interleave(k)
    enc = model.encode(src, src_lengths).index_select(beams)
    state = model.decoder.init_state(enc)  # rows: sentence-major, k beams each
    limit = max_lengths(src_lengths, max_len_a, max_len_b).to(device)  # [B]
    heads = model.decoder.attention.heads
    sent = torch.arange(batch, device=device)  # original sentence of each active sentence
    scores = torch.full((batch, k), float("-inf"), device=device)  # [n, k] log-prob sums
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    tokens = torch.zeros(batch * k, 0, dtype=torch.long, device=device)  # [n * k, t]
    history = torch.zeros(batch * k, 0, heads, src_len, device=device)  # [n * k, t, heads, S]
    prev = torch.full((batch * k,), BOS, dtype=torch.long, device=device)
    finished: list[list[tuple[float, Tensor, Tensor]]] = [[] for _ in range(batch)]
    slots = torch.arange(2 * k, device=device)  # [2k]
    first_k = slots < k
    for t in range(int(limit.max()) + 1):
        n = sent.numel()
        log_probs, state, weights = model.decoder.step(prev, state, enc)  # [n * k, V]
        at_limit = limit[sent] == t  # [n]
        log_probs = _restrict(log_probs, at_limit.repeat_interleave(k))
        vocab = log_probs.size(1)
        candidates = (scores.unsqueeze(2) + log_probs.view(n, k, vocab)).view(n, k * vocab)
        top_scores, top_idx = candidates.topk(2 * k, dim=1)  # [n, 2k]
        top_tokens = top_idx % vocab
        parents = top_idx // vocab + (torch.arange(n, device=device) * k).unsqueeze(1)
        is_eos = top_tokens == EOS
        ends = is_eos & first_k & top_scores.isfinite()  # [n, 2k]
        for i, j in ends.nonzero().tolist():
            hyps = finished[int(sent[i])]
            if len(hyps) < k:
                row = int(parents[i, j])
                attention = torch.cat([history[row], weights[row].unsqueeze(0).float()])
                score = float(top_scores[i, j]) / length_penalty(t + 1, alpha)
                hyps.append((score, tokens[row], attention))
        full = [len(finished[s]) >= k for s in sent.tolist()]
        done = at_limit | torch.tensor(full, device=device)
        if bool(done.all()):
            break
        # the k best continuations that are not EOS, in score order
        order = (is_eos * 2 * k + slots).argsort(dim=1)[:, :k]  # [n, k]
        keep = (~done).nonzero().squeeze(1)  # [n']
        rows = parents.gather(1, order)[keep].view(-1)  # [n' * k]
        next_tokens = top_tokens.gather(1, order)[keep].view(-1)  # [n' * k]
        scores = top_scores.gather(1, order)[keep]  # [n', k]
        tokens = torch.cat([tokens[rows], next_tokens.unsqueeze(1)], dim=1)  # [n' * k, t + 1]
        history = torch.cat([history[rows], weights[rows].unsqueeze(1).float()], dim=1)
        state, prev = state.index_select(rows), next_tokens
        if keep.numel() < n:
            enc = enc.index_select((keep.unsqueeze(1) * k + slots[:k]).view(-1))
            sent = sent[keep]
    results = []
    for hyps, n in zip(finished, src_lengths.tolist(), strict=True):
        best = sorted(hyps, key=lambda h: -h[0])[:nbest]
        results.append([_hypothesis(toks.cpu(), score, att.cpu(), n) for score, toks, att in best])
    return results


def decode(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig
) -> list[list[Hypothesis]]:
    """n-best lists for a padded batch; beam_size 1 is greedy search."""
    if cfg.beam_size == 1:
        hyps = greedy_search(model, src, src_lengths, cfg.max_len_a, cfg.max_len_b)
        return [[h] for h in hyps]
    return beam_search(
        model,
        src,
        src_lengths,
        cfg.beam_size,
        cfg.alpha,
        min(cfg.nbest, cfg.beam_size),
        cfg.max_len_a,
        cfg.max_len_b,
    )


def decode_sources(
    model: Seq2Seq, sources: Sequence[Sequence[int]], cfg: DecodeConfig
) -> list[list[Hypothesis]]:
    """Decode id sequences (each ending with EOS) in length-sorted batches; input order kept."""
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    device = next(model.parameters()).device
    for start in range(0, len(order), cfg.batch_size):
        chunk = order[start : start + cfg.batch_size]
        lengths = np.array([len(sources[i]) for i in chunk], dtype=np.int64)
        src = np.full((len(chunk), lengths.max()), PAD, dtype=np.int64)
        for row, i in enumerate(chunk):
            src[row, : lengths[row]] = sources[i]
        src_ids = torch.from_numpy(src).to(device)
        nbest = decode(model, src_ids, torch.from_numpy(lengths), cfg)
        for i, hyps in zip(chunk, nbest, strict=True):
            results[i] = hyps
    return results


def decode_corpus(model: Seq2Seq, corpus, cfg: DecodeConfig) -> list[list[Hypothesis]]:
    """Decode every source of a ``TokenizedCorpus`` (anything with len and ``src(i)``)."""
    return decode_sources(model, [corpus.src(i) for i in range(len(corpus))], cfg)
