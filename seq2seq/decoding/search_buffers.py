"""What a graphed search keeps per batch shape (`seq2seq.decoding.graphed`): the buffers its
CUDA graphs read and write in place, refilled for each batch of the shape, and the graphs by
chunk."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import fields, replace
from typing import Any

import torch
from torch import Tensor

from seq2seq.decoding.beam import BeamSearch
from seq2seq.decoding.hypothesis import Bans
from seq2seq.decoding.shapes import CHUNK, Shape
from seq2seq.vocab import BOS, EOS, PAD

# what a beam search holds per batch besides its beams, refilled for each batch of a shape
BEAM_BUFFERS = (
    "limit",
    "best_penalty",
    "src_lengths",
    "parents",
    "fed",
    "history",
    "ended",
)


def cloned(tensors: Any) -> Any:
    """A copy of a dataclass of tensors (`EncoderOutput`, `DecoderState`) in new memory."""
    return replace(tensors, **{f.name: clone(getattr(tensors, f.name)) for f in fields(tensors)})


def clone(x: Tensor | None) -> Tensor | None:
    return None if x is None else x.clone()


def copy_into(mine: Any, theirs: Any) -> None:
    """Every tensor of dataclass ``theirs`` (nested ones too) copied into ``mine``'s, in place."""
    for f in fields(mine):
        a, b = getattr(mine, f.name), getattr(theirs, f.name)
        if dataclasses.is_dataclass(a):
            copy_into(a, b)
        elif a is not None and a is not b:
            a.copy_(b)


class Chunks:
    """A shape's graphs by chunk key, how often each chunk ran before it was captured, how
    many chunks its last batch ran (how many the next one likely needs), and the flag each chunk
    sets on the device: has the batch ended?"""

    def __init__(self, device: torch.device) -> None:
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.runs: Counter[int] = Counter()
        self.last = 0
        self.ended = torch.zeros((), dtype=torch.bool, device=device)


class GreedySlots(Chunks):
    """One shape's greedy search state on the device; its graphs read and write it in place (the
    first chunk starts it from the encoder's output: `start`)."""

    def __init__(self, shape: Shape, enc: Any, state: Any, heads: int) -> None:
        rows, device = shape.rows, enc.memory.device
        super().__init__(device)
        self.enc, self.state = cloned(enc), cloned(state)
        self.prev = torch.full((rows,), BOS, dtype=torch.long, device=device)
        self.limit = torch.zeros(rows, dtype=torch.long, device=device)
        self.tokens = torch.full((rows, shape.width), PAD, dtype=torch.long, device=device)
        self.attention = torch.zeros(rows, shape.width, heads, shape.src_len, device=device)
        self.best = torch.zeros(rows, shape.width, device=device)  # each step's log-prob
        self.running = torch.ones(rows, dtype=torch.bool, device=device)
        self.t = torch.zeros((), dtype=torch.long, device=device)  # the next step
        self.offsets = torch.arange(CHUNK, device=device)  # a chunk's steps from t
        self.bans = Bans()  # its rows made at the eager first run

    def fill(self, enc: Any, limit: Tensor) -> None:
        """A new batch's encoder output and limits copied in (device work only)."""
        copy_into(self.enc, enc)
        self.limit.copy_(limit)

    def record(self, tokens: Tensor, attention: Tensor, best: Tensor) -> None:
        """A chunk's tokens [R, CHUNK], attention [R, CHUNK, heads, S] and log-probs [R, CHUNK]
        written at steps t.., once a chunk (fewer kernels than a step at a time); which rows
        still run, and whether none does (device work only)."""
        columns = self.t + self.offsets
        self.tokens.index_copy_(1, columns, tokens)
        self.attention.index_copy_(1, columns, attention.float())
        self.best.index_copy_(1, columns, best.float())
        self.t.add_(CHUNK)
        self.running.logical_and_(tokens.ne(EOS).all(1))
        torch.logical_not(self.running.any(), out=self.ended)

    def start(self) -> None:
        """Step 0 next, from BOS, nothing ended; the steps a batch runs overwrite the tokens,
        attention and log-probs it leaves (device work only, part of the first chunk's graph)."""
        self.prev.fill_(BOS)
        self.running.fill_(True)
        self.t.zero_()


class BeamShape(Chunks):
    """One shape's beam search: the first batch's `BeamSearch`, whose tensors the graphs read
    and write, refilled for each later batch after its eager first step."""

    def __init__(self, search: BeamSearch) -> None:
        super().__init__(search.beams.done.device)
        # the beams' last tokens in memory of their own: the search's view its step's tokens
        self.search, self.beams = search, replace(search.beams, prev=search.beams.prev.clone())

    def load(self, fresh: BeamSearch) -> None:
        """A new batch, after its first step, copied in (device work only)."""
        if fresh is self.search:
            return
        for name in BEAM_BUFFERS:
            mine, theirs = getattr(self.search, name), getattr(fresh, name)
            if dataclasses.is_dataclass(mine):
                copy_into(mine, theirs)
            else:
                mine.copy_(theirs)
        copy_into(self.beams, fresh.beams)
        self.search.beams = self.beams

    def steps(self, first: int) -> None:
        """`CHUNK` steps from ``first``, from and back into the static beams."""
        self.search.beams = self.beams
        for t in range(first, first + CHUNK):
            self.search.step(t, False)
        copy_into(self.beams, self.search.beams)
        self.search.beams = self.beams
        torch.all(self.beams.done, out=self.ended)  # every sentence done
