"""Greedy and beam search replayed from CUDA graphs. Each batch is padded to a fixed shape (rows
to a power of two, the source to a multiple of `SOURCE_STEP`), every sentence stays in the loop
until the last one ends, and the `CHUNK` steps between two looks at the device are recorded once
per shape and replayed for every later batch of that shape (their buffers: `search_buffers`).
Greedy search has two graphs: the first chunk (the decoder's start, and step 0, the one that bans
EOS) and every later one (the step number on the device). Beam search has one per chunk; its
first step, with a row per sentence before k, runs eagerly as its batch starts. A batch's first
chunks are queued before the host's work between batches (`SearchGraphs._chunks`), so that the
device has work meanwhile. A chunk's first run is eager, its second is captured; on the CPU every
chunk runs eagerly (how the tests run them).

They give `greedy_search`'s and `beam_search`'s n-best lists for the plain searches: no
sampling, bans, prefixes, constraints or coverage penalty (`SearchGraphs.takes`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import to_device
from seq2seq.decoding.beam import BeamSearch, backtrack
from seq2seq.decoding.hypothesis import (
    Hypothesis,
    bans_on,
    greedy_results,
    restrict,
)
from seq2seq.decoding.search_buffers import BeamShape, Chunks, GreedySlots, copy_into
from seq2seq.decoding.shapes import CHUNK, Padded, Shape
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.runtime.capture import Recorder
from seq2seq.runtime.engine import HOST, Engine
from seq2seq.vocab import EOS

log = logging.getLogger("seq2seq.decoding")
Work = Callable[[], None]  # host work to do while the device runs a chunk


@dataclass
class _Started:
    """A batch started, in memory of its own: padded and encoded (greedy search), or with its
    first step taken (beam search)."""

    padded: Padded
    limit: Tensor  # [R] on the device
    enc: Any = None  # greedy search: the encoder's output
    search: BeamSearch | None = None

    @classmethod
    def of(cls, model: Seq2Seq, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig) -> _Started:
        """Nothing here waits for the device (copies from pinned memory): it can run while the
        device runs another batch's chunk."""
        p = Padded.of(src, src_lengths, cfg)
        limit = to_device(p.limit, src.device)
        if cfg.beam_size == 1:
            return cls(p, limit, model.encode(p.src, p.lengths))
        search = BeamSearch(model, p.src, p.lengths, cfg, steps=p.shape.width)
        search.limit.copy_(limit)  # the extra rows end at once
        search.step(0, False)
        return cls(p, limit, search=search)


class SearchGraphs:
    """Captured search chunks by batch shape, kept by their owner (a `Translator`, a benchmark)
    so that later batches replay them; on the CPU the same fixed-shape steps run eagerly."""

    def __init__(self, engine: Engine) -> None:
        self.engine, self.capture = engine, engine.device.type == "cuda"
        self.greedy: dict[Shape, GreedySlots] = {}
        self.beam: dict[Shape, BeamShape] = {}
        self.recorder: Recorder | None = None  # the graphs' memory pool, from the first capture
        self.addresses: tuple[int, ...] = ()  # the parameters' memory the graphs read

    @classmethod
    def where_they_run(cls, engine: Engine | None) -> SearchGraphs | None:
        """A new set where plain searches replay CUDA graphs (on a GPU, not with compile=true),
        else None."""
        on_gpu = engine is not None and engine.device.type == "cuda" and not engine.compiled
        return cls(engine) if on_gpu else None

    @property
    def shapes(self) -> int:
        return len(self.greedy) + len(self.beam)

    @property
    def captured(self) -> int:
        """Chunks captured as graphs, all shapes together."""
        return sum(len(chunks.graphs) for chunks in (*self.greedy.values(), *self.beam.values()))

    @staticmethod
    def takes(model: Any, cfg: DecodeConfig, steered: bool, rows: int, src_len: int) -> bool:
        """Whether these graphs run a batch of ``rows`` sources, the longest ``src_len`` long: a
        plain search (no sampling, bans, coverage penalty or steering) of a `Seq2Seq`, in a shape
        small enough to keep buffers and graphs for (`Shape.kept`; a larger one runs eagerly)."""
        plain = not (steered or cfg.sampling or bans_on(cfg) or cfg.coverage_penalty)
        if not (plain and isinstance(model, Seq2Seq)):
            return False
        return Shape.of(rows, src_len, cfg, None).kept(model.decoder.heads)

    def search(
        self, model: Seq2Seq, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig
    ) -> list[list[Hypothesis]]:
        """`decode`'s n-best lists of src [B, S] (src_lengths [B] on the host)."""
        (found,) = self.searches(model, [(src, src_lengths)], cfg)
        return found

    @torch.inference_mode()
    def searches(
        self, model: Seq2Seq, batches: Iterable[tuple[Tensor, Tensor]], cfg: DecodeConfig
    ) -> Iterator[list[list[Hypothesis]]]:
        """`search` of each batch in turn. While the device runs a batch's first chunks, the host
        makes the last batch's results and starts the next batch (pads it, queues its encoder
        and, for beam search, its first step), so that the device waits for neither."""
        batches = iter(batches)
        pending: list[Callable[[], list[list[Hypothesis]]]] = []  # the last batch's results
        done: list[list[list[Hypothesis]]] = []
        ahead: list[_Started] = []  # the next batch, started

        def meanwhile() -> None:
            done.extend(finish() for finish in pending)
            pending.clear()
            if not ahead and (batch := next(batches, None)) is not None:
                ahead.append(_Started.of(model, *batch, cfg))

        meanwhile()
        while ahead:
            self._forget_moved(model)
            run = self._greedy if cfg.beam_size == 1 else self._beam
            finish = run(model, ahead.pop(), cfg, meanwhile)
            meanwhile()  # where the batch had no chunk to wait for
            yield from done
            done.clear()
            pending.append(finish)
        meanwhile()
        yield from done

    def _forget_moved(self, model: Seq2Seq) -> None:
        """A model whose parameters are elsewhere in memory (another one, or moved) has its
        shapes recorded anew; weights changed in place (training between validations) are read
        by the same graphs."""
        addresses = tuple(p.data_ptr() for p in model.parameters())
        if addresses != self.addresses:
            self.greedy.clear()
            self.beam.clear()
            self.addresses = addresses
            if self.recorder is not None:
                self.recorder.renew()

    def _greedy(
        self, model: Seq2Seq, b: _Started, cfg: DecodeConfig, meanwhile: Work
    ) -> Callable[[], list[list[Hypothesis]]]:
        p, enc = b.padded, b.enc
        if p.shape not in self.greedy:
            state = model.decoder.init_state(enc)  # its buffers' shapes
            self.greedy[p.shape] = GreedySlots(p.shape, enc, state, model.decoder.heads)
        slots = self.greedy[p.shape]
        slots.fill(enc, b.limit)
        chunks = self._chunks(
            slots,
            p.shape.chunks,
            lambda c: (min(c, 1), lambda: _greedy_steps(model, slots, c == 0)),  # first, later
            meanwhile,
        )
        steps = p.shape.eager + chunks * CHUNK
        found = (slots.tokens, slots.attention, slots.best)
        held = [x[: p.rows, :steps].to(HOST, non_blocking=True, copy=True) for x in found]
        copied, lengths = _queued(p.src.device), p.lengths[: p.rows]

        def results() -> list[list[Hypothesis]]:
            copied()
            return [[h] for h in _greedy_found(*held, lengths, cfg.alpha)]

        return results

    def _beam(
        self, model: Seq2Seq, b: _Started, cfg: DecodeConfig, meanwhile: Work
    ) -> Callable[[], list[list[Hypothesis]]]:
        p, fresh = b.padded, b.search
        assert fresh is not None
        if p.shape not in self.beam:
            self.beam[p.shape] = BeamShape(fresh)
        entry = self.beam[p.shape]
        entry.load(fresh)
        chunks = self._chunks(
            entry,
            p.shape.chunks,
            lambda c: (c, lambda: entry.steps(p.shape.eager + c * CHUNK)),  # a graph per chunk
            meanwhile,
        )
        steps = p.shape.eager + chunks * CHUNK
        held, copied = entry.search.found(copy=True, steps=steps), _queued(p.src.device)
        # the shape's search holds the first batch's lengths, which later batches refill
        lengths, nbest = p.lengths.clone(), entry.search.nbest

        def results() -> list[list[Hypothesis]]:
            copied()
            return backtrack(*held, lengths, nbest)[: p.rows]

        return results

    def _chunks(
        self,
        chunks: Chunks,
        count: int,
        chunk: Callable[[int], tuple[int, Work]],
        meanwhile: Work,
    ) -> int:
        """A batch's chunks (``chunk(c)``: chunk c's graph key and work), until one sets
        ``chunks.ended`` or ``count`` ran; how many ran. The host does ``meanwhile`` once as many
        chunks are queued as the shape's last batch ran, less one (at least two). Until then a
        chunk is queued before the look at the one before it where the device still runs that
        one, so that it has work while the host works (a batch may run past its end); after,
        each chunk waits for the look at the one before."""
        ahead = min(count, max(2, chunks.last - 1))  # chunks queued before ``meanwhile``
        looks: list[Flag] = []
        for c in range(count):
            speculate = 0 < c < ahead and not looks[-1].ready()
            if c and not speculate and looks[-1]():
                break
            self._chunk(chunks, *chunk(c))
            looks.append(Flag(chunks.ended))
            if c == ahead - 1:
                meanwhile()
        if len(looks) < ahead:  # ended before: the host's work after the last chunk
            meanwhile()
        chunks.last = len(looks)
        return len(looks)

    def _chunk(self, chunks: Chunks, key: int, run: Callable[[], None]) -> None:
        """One chunk: replayed where captured; eagerly on the CPU and at its first run (a
        warm-up); captured, then replayed, at its second."""
        if (graph := chunks.graphs.get(key)) is not None:
            graph.replay()
            return
        chunks.runs[key] += 1
        if not self.capture or chunks.runs[key] == 1:
            run()
            return
        try:
            recorder = self.recorder = self.recorder or Recorder(self.engine.device)
            graph = torch.cuda.CUDAGraph()
            with (
                self.engine.compute(cache=False),  # the graph casts the weights itself
                recorder.recording(graph),
            ):
                run()
        except RuntimeError as error:  # nothing ran while recording: run the chunk as it is
            log.warning("the search runs without CUDA graphs: recording failed (%s)", error)
            self.capture = False
            run()
            return
        chunks.graphs[key] = graph
        graph.replay()


def _greedy_steps(model: Seq2Seq, s: GreedySlots, first: bool) -> None:
    """`CHUNK` greedy steps of every row, as `greedy_search`'s, the ``first`` chunk's from the
    encoder's output; only device work, in place. The chunk's tokens, attention and log-probs are
    recorded once it ends (`GreedySlots.record`; the host sums a row's log-probs to its EOS)."""
    state, prev = s.state, s.prev
    if first:
        s.start()
        state = model.decoder.init_state(s.enc)
    left = s.limit - s.t  # [R] steps before each row's limit
    found: list[tuple[Tensor, Tensor, Tensor]] = []
    for i in range(CHUNK):
        log_probs, state, weights = model.decoder.step(prev, state, s.enc)
        log_probs = restrict(log_probs, left == i, False, first and i == 0, s.bans)
        best, prev = log_probs.max(dim=-1)
        found.append((prev, weights, best))
    s.record(*(torch.stack(x, 1) for x in zip(*found, strict=True)))
    copy_into(s.state, state)
    s.prev.copy_(prev)


def _greedy_found(
    tokens: Tensor, attention: Tensor, best: Tensor, src_lengths: Tensor, alpha: float
) -> list[Hypothesis]:
    """`greedy_results` from a batch's host copies (tokens, attention, log-probs [R, W, ...]):
    each row ends at its first EOS, its score the sum of its log-probs to there, added in fp32
    one after another as the eager search adds them on the device (torch's CPU cumsum would add
    in fp64)."""
    ended = (tokens == EOS).int().argmax(1) + 1
    sums = np.cumsum(best.numpy(), axis=1, dtype=np.float32)
    scores = torch.from_numpy(sums[np.arange(len(sums)), ended.numpy() - 1])
    return greedy_results(tokens, attention, scores, ended, src_lengths, alpha)


class Flag:
    """A device flag read on the host: its copy is queued at once (on a GPU to pinned memory,
    behind the work that makes it); `ready` says without waiting whether it has arrived, a call
    waits for it."""

    def __init__(self, flag: Tensor) -> None:
        on_gpu = flag.device.type == "cuda"  # a copy: later chunks write the flag's buffer again
        self.host = torch.empty((), dtype=torch.bool, pin_memory=on_gpu)
        self.host.copy_(flag, non_blocking=on_gpu)
        self.event = _recorded(flag.device)

    def ready(self) -> bool:
        return self.event is None or self.event.query()

    def __call__(self) -> bool:
        if self.event is not None:
            self.event.synchronize()
        return bool(self.host)


def _recorded(device: torch.device) -> torch.cuda.Event | None:
    """An event behind the work queued on ``device`` so far; None on the CPU (nothing queued)."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record()
    return event


def _queued(device: torch.device) -> Callable[[], None]:
    """A wait for the work queued on ``device`` so far (copies to the host): none on the CPU."""
    event = _recorded(device)
    return (lambda: None) if event is None else event.synchronize
