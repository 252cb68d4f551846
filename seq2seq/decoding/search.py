"""Greedy and beam search, batched, on the model's device, and decoding whole lists of sources.

Greedy search is here, beam search in ``beam.py``, what both share in ``hypothesis.py``. Call
``model.eval()`` first. The step loop looks at the device only every ``check_interval`` steps;
on the CPU, where looking costs nothing, it looks at every step and drops finished sentences at
once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from seq2seq_lite.rules import length_penalty
from seq2seq_lite.steering import SteeringIds, constraints_problem
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import to_device
from seq2seq.data.dataset import TokenizedCorpus
from seq2seq.decoding.beam import beam_search
from seq2seq.decoding.graphed import SearchGraphs
from seq2seq.decoding.hypothesis import (
    Bans,
    BatchSteering,
    Hypothesis,
    check_interval,
    greedy_results,
    looks_at,
    max_lengths,
    restrict,
    user_bans,
)
from seq2seq.errors import Seq2SeqError
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
    "sample",
]


Pick = Callable[[Tensor], tuple[Tensor, Tensor]]  # log-probs [b, V] -> (their log-prob, token)


def most_probable(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """Greedy search's choice: the most probable token."""
    return log_probs.max(dim=-1)


def sampler(cfg: DecodeConfig, generator: torch.Generator) -> Pick:
    """A token drawn from the model's distribution at ``cfg.temperature``, among the ``top_k``
    most probable (0: all) and the smallest set of them whose probability reaches ``top_p``."""

    def pick(log_probs: Tensor) -> tuple[Tensor, Tensor]:
        logits = log_probs.float() / cfg.temperature  # [b, V]
        if 0 < cfg.top_k < logits.size(1):
            kth = logits.topk(cfg.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if cfg.top_p < 1:
            ordered, order = logits.sort(dim=-1, descending=True)
            probs = ordered.softmax(-1)
            beyond = probs.cumsum(-1) - probs >= cfg.top_p  # the mass before them is enough
            logits = logits.scatter(1, order, ordered.masked_fill(beyond, float("-inf")))
        tokens = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)
        return log_probs.gather(1, tokens[:, None]).squeeze(1), tokens

    return pick


@torch.inference_mode()
def greedy_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    cfg: DecodeConfig,
    *,
    check_every: int | None = None,
    pick: Pick = most_probable,
    steer: BatchSteering | None = None,
) -> list[Hypothesis]:
    """One token at every step (the most probable, or what ``pick`` chooses), for a batch src
    [B, S] at once, within the length limits of ``cfg`` and its bans (no_repeat_ngram, min_len_a
    and min_len_b: `user_bans`), each sentence's target prefix (in ``steer``) forced
    first; scores as beam search gives them (over
    ``cfg.alpha``'s length penalty); the loop looks at the device every ``check_every`` steps
    (None: `check_interval` of the device)."""
    search = _Greedy(model, src, src_lengths, cfg, pick, steer)
    every = check_interval(src.device) if check_every is None else check_every
    for t in range(search.steps):
        look = looks_at(t, search.steps, every)
        search.step(t, look)
        if look and search.drop_ended():
            break
    return search.results(src_lengths, cfg.alpha)


class _Greedy:
    """The device state of one batch's greedy search: the rows still in the loop, and every
    row's tokens, attention, score and length so far."""

    def __init__(
        self,
        model: Seq2Seq,
        src: Tensor,
        src_lengths: Tensor,
        cfg: DecodeConfig,
        pick: Pick,
        steer: BatchSteering | None,
    ) -> None:
        self.model, self.pick = model, pick
        self.enc = model.encode(src, src_lengths)
        self.state = model.decoder.init_state(self.enc)
        batch, src_len = src.shape
        device = src.device
        limit_host = max_lengths(src_lengths, cfg.max_len_a, cfg.max_len_b)  # [B]
        limit_host = limit_host if steer is None else steer.limits(limit_host)
        self.steps = int(limit_host.max()) + 1
        self.limit = to_device(limit_host, device)
        self.user_bans = user_bans(cfg, src_lengths, limit_host, device, steer)
        heads = model.decoder.heads
        self.tokens = torch.full((batch, self.steps), PAD, dtype=torch.long, device=device)
        self.attention = torch.zeros(batch, self.steps, heads, src_len, device=device)
        self.scores = torch.zeros(batch, device=device)
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)  # EOS included
        self.active = torch.arange(batch, device=device)  # batch rows still in the loop
        self.running = torch.ones(batch, dtype=torch.bool, device=device)  # of those, not ended
        self.prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
        self.bans = Bans()  # its rows made at the first step, the vocabulary known

    def step(self, t: int, look: bool) -> None:
        """Step ``t`` of every row in the loop; only device work, nothing read back."""
        active, running = self.active, self.running
        log_probs, self.state, weights = self.model.decoder.step(self.prev, self.state, self.enc)
        log_probs = restrict(log_probs, self.limit[active] == t, look, t == 0, self.bans)  # [b, V]
        if self.user_bans is not None:
            history = self.tokens[active, :t] if self.user_bans.n else None
            log_probs = self.user_bans.apply(log_probs, t, active, history)
        best, self.prev = self.pick(log_probs)  # [b]
        self.tokens[active, t] = self.prev  # rows that ended earlier write past their length
        self.attention[active, t] = weights.float()
        self.scores[active] += torch.where(running, best.float(), 0.0)
        ended = running & (self.prev == EOS)
        self.lengths[active] = torch.where(ended, t + 1, self.lengths[active])
        running &= ~ended

    def drop_ended(self) -> bool:
        """Leave out the rows that have ended (a look at the device); True when none is left."""
        running = self.running
        if not running.any():
            return True
        if not running.all():
            keep = running.nonzero().squeeze(1)
            self.active, self.prev, self.running = self.active[keep], self.prev[keep], running[keep]
            self.state, self.enc = self.state.index_select(keep), self.enc.index_select(keep)
        return False

    def results(self, src_lengths: Tensor, alpha: float) -> list[Hypothesis]:
        """Every sentence's translation, on the host, scored as beam search scores."""
        tokens, attention, scores, lengths = (
            x.cpu() for x in (self.tokens, self.attention, self.scores, self.lengths)
        )
        return greedy_results(tokens, attention, scores, lengths, src_lengths, alpha)


def decode(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    cfg: DecodeConfig,
    steer: BatchSteering | None = None,
    graphs: SearchGraphs | None = None,
) -> list[list[Hypothesis]]:
    """n-best lists for a padded batch; beam_size 1 is greedy search; sampling draws ``nbest``
    translations of each sentence, best first; ``steer``: the sentences' prefixes and
    constraints (constraints: beam search only); ``graphs``: where a plain search replays
    (CUDA) or records its fixed-shape chunks."""
    phrases = steer is not None and steer.phrases is not None
    if problem := constraints_problem(phrases, cfg.beam_size, cfg.sampling):
        raise Seq2SeqError(problem)
    if graphs is not None and graphs.takes(model, cfg, steer is not None, *src.shape):
        return graphs.search(model, src, src_lengths, cfg)
    if cfg.sampling:
        return sample(model, src, src_lengths, cfg, steer=steer)
    if cfg.beam_size == 1:
        return [[h] for h in greedy_search(model, src, src_lengths, cfg, steer=steer)]
    return beam_search(model, src, src_lengths, cfg, steer=steer)


def sample(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    cfg: DecodeConfig,
    seed: int | None = None,
    steer: BatchSteering | None = None,
) -> list[list[Hypothesis]]:
    """``cfg.nbest`` translations of each sentence drawn by `sampler`, by score; the same
    ``seed`` (default ``cfg.seed``) draws the same ones."""
    n = cfg.nbest
    generator = torch.Generator(device=src.device).manual_seed(cfg.seed if seed is None else seed)
    rows = torch.arange(len(src)).repeat_interleave(n)
    drawn = greedy_search(
        model,
        src[rows.to(src.device)],
        src_lengths[rows],
        cfg,
        pick=sampler(cfg, generator),
        steer=None if steer is None else steer.rows(rows),  # each draw as its sentence
    )
    groups = [drawn[i * n : (i + 1) * n] for i in range(len(src))]
    return [sorted(group, key=lambda h: -h.score) for group in groups]


def decode_sources(
    model: Seq2Seq,
    sources: Sequence[Sequence[int]],
    cfg: DecodeConfig,
    seed: int | None = None,
    steer: Sequence[SteeringIds] | None = None,
    graphs: SearchGraphs | None = None,
    joins: np.ndarray | None = None,
) -> list[list[Hypothesis]]:
    """Decode id sequences (each ending with EOS) in length-sorted batches; input order kept.
    Sampling draws batch ``b`` with seed ``seed + b`` (default ``cfg.seed + b``). ``steer``:
    each source's target prefix and constraints (one per source; None: none), a placed phrase
    ending a word by ``joins`` (`word_continuations`; None: any); ``graphs``: see `decode`
    (unsteered, they run the batches one after another: `SearchGraphs.searches`)."""
    first_seed = cfg.seed if seed is None else seed
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    chunks = [
        order[start : start + cfg.batch_size] for start in range(0, len(order), cfg.batch_size)
    ]
    device = next(model.parameters()).device
    kept = [
        graphs is not None
        and graphs.takes(model, cfg, steer is not None, len(c), len(sources[c[0]]))
        for c in chunks
    ]
    found = {
        b: _decode_batch(
            model,
            *_batch(sources, chunk, device),
            cfg,
            first_seed + b,
            BatchSteering.of(steer, chunk, joins),
            graphs,
        )
        for b, chunk in enumerate(chunks)
        if not kept[b]
    }
    if graphed := [b for b in range(len(chunks)) if kept[b]]:  # one after another, from graphs
        batches = (_batch(sources, chunks[b], device) for b in graphed)
        found.update(zip(graphed, graphs.searches(model, batches, cfg), strict=True))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    for b, chunk in enumerate(chunks):
        for i, hyps in zip(chunk, found[b], strict=True):
            results[i] = hyps
    return results


def _batch(
    sources: Sequence[Sequence[int]], chunk: Sequence[int], device: torch.device
) -> tuple[Tensor, Tensor]:
    """Sources ``chunk`` as a padded batch: ids [B, S] on ``device``, lengths [B] on the host."""
    lengths = np.array([len(sources[i]) for i in chunk], dtype=np.int64)
    src = np.full((len(chunk), lengths.max()), PAD, dtype=np.int64)
    for row, i in enumerate(chunk):
        src[row, : lengths[row]] = sources[i]
    return to_device(torch.from_numpy(src), device), torch.from_numpy(lengths)


def _decode_batch(
    model: Seq2Seq,
    src: Tensor,
    lengths: Tensor,
    cfg: DecodeConfig,
    seed: int,
    steered: BatchSteering | None,
    graphs: SearchGraphs | None,
) -> list[list[Hypothesis]]:
    """One batch's n-best lists; sampling draws from ``seed``, each batch its own stream (the
    same input, the same draws)."""
    if cfg.sampling:
        return sample(model, src, lengths, cfg, seed, steered)
    return decode(model, src, lengths, cfg, steered, graphs)


def decode_corpus(
    model: Seq2Seq, corpus: TokenizedCorpus, cfg: DecodeConfig, graphs: SearchGraphs | None = None
) -> list[list[Hypothesis]]:
    """Decode every source of a ``TokenizedCorpus`` (anything with len and ``src(i)``)."""
    sources = [corpus.src(i) for i in range(len(corpus))]
    return decode_sources(model, sources, cfg, graphs=graphs)
