"""Greedy search replayed from CUDA graphs: the batch is padded to a fixed shape (rows to a
power of two, the source to a multiple of `SOURCE_STEP`), every row stays in the loop until the
last one ends, the step number lives on the device, and the `CHUNK` steps between two looks are
recorded once per shape and replayed for every later chunk and batch of that shape. The first
chunk of a shape runs eagerly, as on the CPU, where nothing is captured (how the tests run it).

It gives `greedy_search`'s translations for the plain search: no sampling, bans or prefixes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from seq2seq_lite import rules
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.hypothesis import Hypothesis, greedy_results, max_lengths, restrict
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.vocab import BOS, EOS, PAD

CHUNK = 8  # steps per graph, and between two looks at the device (as `check_interval` on a GPU)
SOURCE_STEP = 16  # source lengths are padded up to a multiple of this: few shapes


@dataclass(frozen=True)
class Shape:
    """A padded batch: rows, source length, steps the buffers hold, autocast dtype (None: off)."""

    rows: int
    src_len: int
    width: int
    dtype: torch.dtype | None


def _cloned(tensors: Any) -> Any:
    """A copy of a dataclass of tensors (`EncoderOutput`, `DecoderState`) in new memory."""
    return replace(tensors, **{f.name: _clone(getattr(tensors, f.name)) for f in fields(tensors)})


def _clone(x: Tensor | None) -> Tensor | None:
    return None if x is None else x.clone()


def _copy_into(mine: Any, theirs: Any) -> None:
    """Every tensor of dataclass ``theirs`` copied into ``mine``'s, in place."""
    for f in fields(mine):
        if (tensor := getattr(mine, f.name)) is not None:
            tensor.copy_(getattr(theirs, f.name))


class _Slots:
    """One shape's search state on the device; a captured chunk reads and writes it in place."""

    def __init__(self, shape: Shape, enc: Any, state: Any, heads: int) -> None:
        rows, device = shape.rows, enc.memory.device
        self.enc, self.state = _cloned(enc), _cloned(state)
        self.prev = torch.full((rows,), BOS, dtype=torch.long, device=device)
        self.limit = torch.zeros(rows, dtype=torch.long, device=device)
        self.tokens = torch.full((rows, shape.width), PAD, dtype=torch.long, device=device)
        self.attention = torch.zeros(rows, shape.width, heads, shape.src_len, device=device)
        self.scores = torch.zeros(rows, device=device)
        self.lengths = torch.zeros(rows, dtype=torch.long, device=device)  # EOS included
        self.running = torch.ones(rows, dtype=torch.bool, device=device)
        self.t = torch.zeros((), dtype=torch.long, device=device)  # the next step
        self.graph: torch.cuda.CUDAGraph | None = None
        self.chunks = 0  # chunks run before the graph was captured

    def fill(self, enc: Any, state: Any, limit: Tensor) -> None:
        """A new batch's start, copied in (device work only)."""
        _copy_into(self.enc, enc)
        _copy_into(self.state, state)
        self.limit.copy_(limit, non_blocking=True)
        self.prev.fill_(BOS)
        self.tokens.fill_(PAD)
        for x in (self.attention, self.scores, self.lengths, self.t):
            x.zero_()
        self.running.fill_(True)


class GreedyGraphs:
    """Captured greedy chunks by batch shape, kept by their owner (a `Translator`, a benchmark)
    so that later batches replay them; on the CPU the same fixed-shape steps run eagerly."""

    def __init__(self, device: torch.device) -> None:
        self.capture = device.type == "cuda"
        self.slots: dict[Shape, _Slots] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None  # shared memory

    @staticmethod
    def applies(model: Any, cfg: DecodeConfig) -> bool:
        """Whether this search is the plain greedy one these graphs run."""
        bans = cfg.no_repeat_ngram or cfg.min_len_a or cfg.min_len_b
        return isinstance(model, Seq2Seq) and cfg.beam_size == 1 and not cfg.sampling and not bans

    @torch.inference_mode()
    def search(
        self, model: Seq2Seq, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig
    ) -> list[Hypothesis]:
        """`greedy_search`'s translations of src [B, S] (src_lengths [B] on the host)."""
        rows, src_len = src.shape
        padded_len = -(-src_len // SOURCE_STEP) * SOURCE_STEP
        longest = int(max_lengths(torch.tensor([padded_len]), cfg.max_len_a, cfg.max_len_b)[0])
        shape = Shape(
            1 << (rows - 1).bit_length(),
            padded_len,
            -(-(longest + 1) // CHUNK) * CHUNK,
            torch.get_autocast_dtype(src.device.type)
            if torch.is_autocast_enabled(src.device.type)
            else None,
        )
        padded = torch.full((shape.rows, padded_len), PAD, dtype=torch.long, device=src.device)
        padded[:rows, :src_len] = src
        padded[rows:, 0] = EOS  # extra rows: a one-token source, ended at their first step
        lengths = torch.ones(shape.rows, dtype=torch.long)
        lengths[:rows] = src_lengths
        limit = torch.zeros(shape.rows, dtype=torch.long)
        limit[:rows] = max_lengths(src_lengths, cfg.max_len_a, cfg.max_len_b)
        enc = model.encode(padded, lengths)
        state = model.decoder.init_state(enc)
        if shape not in self.slots:
            self.slots[shape] = _Slots(shape, enc, state, model.decoder.heads)
        slots = self.slots[shape]
        slots.fill(enc, state, limit.to(src.device))
        for _ in range(shape.width // CHUNK):
            self._chunk(model, slots)
            if not slots.running.any():  # the look: one read per chunk
                break
        tokens, attention, scores, lengths = (
            x[:rows].cpu() for x in (slots.tokens, slots.attention, slots.scores, slots.lengths)
        )
        return greedy_results(tokens, attention, scores, lengths, src_lengths, cfg.alpha)

    def _chunk(self, model: Seq2Seq, slots: _Slots) -> None:
        """`CHUNK` steps: replayed where captured; eagerly on the CPU and for a shape's first
        chunk (a warm-up); captured, then replayed, at its second."""
        if slots.graph is not None:
            slots.graph.replay()
            return
        slots.chunks += 1
        if not self.capture or slots.chunks == 1:
            _steps(model, slots)
            return
        graph = torch.cuda.CUDAGraph()
        with (
            _uncached_autocast(slots),
            torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"),
        ):
            _steps(model, slots)
        slots.graph = graph
        graph.replay()


@contextlib.contextmanager
def _uncached_autocast(slots: _Slots) -> Iterator[None]:
    """Autocast as it is, without its cache of cast weights: a graph must cast them itself,
    since a cached copy is freed when the caller's autocast ends."""
    device = slots.t.device.type
    if not torch.is_autocast_enabled(device):
        yield
        return
    dtype = torch.get_autocast_dtype(device)
    with torch.autocast(device, dtype=dtype, cache_enabled=False):
        yield


def _steps(model: Seq2Seq, s: _Slots) -> None:
    """`CHUNK` greedy steps of every row, as `greedy_search`'s; only device work, in place."""
    state, prev = s.state, s.prev
    for _ in range(CHUNK):
        log_probs, state, weights = model.decoder.step(prev, state, s.enc)
        at_limit = s.limit == s.t
        log_probs = restrict(log_probs, at_limit, False, False)
        first = rules.eos_banned(True, at_limit) & (s.t == 0)  # the rule's first step, on device
        log_probs[:, EOS].masked_fill_(first, float("-inf"))
        best, prev = log_probs.max(dim=-1)
        column = s.t.view(1)
        s.tokens.index_copy_(1, column, prev.unsqueeze(1))
        s.attention.index_copy_(1, column, weights.float().unsqueeze(1))
        s.scores.add_(torch.where(s.running, best.float(), 0.0))
        ended = s.running & (prev == EOS)
        s.lengths.copy_(torch.where(ended, s.t + 1, s.lengths))
        s.running.logical_and_(~ended)
        s.t.add_(1)
    _copy_into(s.state, state)
    s.prev.copy_(prev)
