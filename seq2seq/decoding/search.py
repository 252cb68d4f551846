"""Greedy and beam search, batched, on the model's device, and decoding whole lists of sources.

Greedy search is here, beam search in ``beam.py``, what both share in ``hypothesis.py``. Call
``model.eval()`` first. The step loop looks at the device only every ``check_interval`` steps;
on the CPU, where looking costs nothing, it looks at every step and drops finished sentences at
once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.beam import beam_search
from seq2seq.decoding.hypothesis import (
    Hypothesis,
    check_interval,
    length_penalty,
    looks_at,
    make_hypothesis,
    max_lengths,
    restrict,
)
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.vocab import BOS, EOS, PAD

__all__ = [
    "Hypothesis",
    "beam_search",
    "decode",
    "decode_corpus",
    "decode_sources",
    "greedy_search",
    "length_penalty",
    "max_lengths",
]


@torch.inference_mode()
def greedy_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    cfg: DecodeConfig,
    *,
    check_every: int | None = None,
) -> list[Hypothesis]:
    """Most probable next token at every step, for a batch src [B, S] at once, within the length
    limit of ``cfg``; scores as beam search gives them (over ``cfg.alpha``'s length penalty); the
    loop looks at the device every ``check_every`` steps (None: `check_interval` of the device)."""
    enc = model.encode(src, src_lengths)
    state = model.decoder.init_state(enc)
    batch, src_len = src.shape
    device = src.device
    every = check_interval(device) if check_every is None else check_every
    limit_host = max_lengths(src_lengths, cfg.max_len_a, cfg.max_len_b)  # [B]
    steps = int(limit_host.max()) + 1
    limit = limit_host.to(device)
    heads = model.decoder.heads
    tokens = torch.full((batch, steps), PAD, dtype=torch.long, device=device)
    attention = torch.zeros(batch, steps, heads, src_len, device=device)
    scores = torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)  # steps taken, EOS included
    active = torch.arange(batch, device=device)  # batch rows still in the loop
    running = torch.ones(batch, dtype=torch.bool, device=device)  # of those, not yet ended
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    for t in range(steps):
        log_probs, state, weights = model.decoder.step(prev, state, enc)  # [b, V]
        look = looks_at(t, steps, every)
        log_probs = restrict(log_probs, limit[active] == t, look)
        best, prev = log_probs.max(dim=-1)  # [b]
        tokens[active, t] = prev  # rows that ended earlier write past their length: unread
        attention[active, t] = weights.float()
        scores[active] += torch.where(running, best.float(), 0.0)
        ended = running & (prev == EOS)
        lengths[active] = torch.where(ended, t + 1, lengths[active])
        running &= ~ended
        if look:
            if not running.any():
                break
            if not running.all():
                keep = running.nonzero().squeeze(1)
                active, prev, running = active[keep], prev[keep], running[keep]
                state, enc = state.index_select(keep), enc.index_select(keep)
    tokens, attention, scores, lengths = (x.cpu() for x in (tokens, attention, scores, lengths))
    return [
        make_hypothesis(
            tokens[i, : lengths[i] - 1],
            float(scores[i]) / length_penalty(int(lengths[i]), cfg.alpha),  # as beam search's
            attention[i, : lengths[i]],
            n,
        )
        for i, n in enumerate(src_lengths.tolist())
    ]


def decode(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig
) -> list[list[Hypothesis]]:
    """n-best lists for a padded batch; beam_size 1 is greedy search."""
    if cfg.beam_size == 1:
        return [[h] for h in greedy_search(model, src, src_lengths, cfg)]
    return beam_search(model, src, src_lengths, cfg)


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
