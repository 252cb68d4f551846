"""The search steps between looks and the fixed-shape search on the CPU: the same translations
as the eager search, nothing read back to the host inside a search step (a read raises here, as it
would make the GPU wait), and when the graphs are recorded, kept or left out."""

from __future__ import annotations

import gzip
from dataclasses import replace

import pytest
import torch
from capture_helpers import StandInCapture
from host_reads import no_host_reads
from model_helpers import (
    ATTENTIONS,
    peaky_model,
    settings,
    sources,
)

from seq2seq.config import DecodeConfig
from seq2seq.decoding import beam as beam_module
from seq2seq.decoding import graphed as graphed_search
from seq2seq.decoding import search as search_module
from seq2seq.decoding import search_buffers, shapes
from seq2seq.decoding.graphed import SearchGraphs
from seq2seq.decoding.inference import Translator
from seq2seq.decoding.search import beam_search, decode, decode_sources, greedy_search
from seq2seq.decoding.shapes import Shape
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import load_run
from seq2seq.serving import backends
from seq2seq.vocab import EOS


@pytest.fixture
def guarded_steps(monkeypatch):
    """The search steps between two looks at the device run under `no_host_reads`."""
    for cls in (beam_module.BeamSearch, search_module._Greedy):
        original = cls.step

        def step(self, t: int, look: bool, original=original) -> None:
            if look:
                return original(self, t, look)
            with no_host_reads():
                return original(self, t, look)

        monkeypatch.setattr(cls, "step", step)


@pytest.mark.parametrize("name", ["bahdanau", "luong", "multihead", "local_p", "bahdanau-coverage"])
def test_search_steps_between_looks_read_nothing_back(guarded_steps, name: str) -> None:
    """Looking every 1,000 steps (only at the last): greedy and beam search read nothing back
    between looks, and give the n-best lists of a search that looks at every step; also with
    the bans of no_repeat_ngram and a minimum length."""
    model = peaky_model(name)
    src, lengths = sources()
    beam = settings(4, 0.6, 4, coverage_penalty=0.5 if "coverage" in name else 0.0)
    steer = dict(no_repeat_ngram=2, min_len_a=1.0, min_len_b=1)
    searches = [(greedy_search, settings()), (beam_search, beam)]
    for search, cfg in searches + [(search, replace(cfg, **steer)) for search, cfg in searches]:
        rare = search(model, src, lengths, cfg, check_every=1000)
        every = search(model, src, lengths, cfg, check_every=1)
        assert len(rare) == len(every)
        for a, b in zip(rare, every, strict=True):
            pairs = zip(a, b, strict=True) if isinstance(a, list) else [(a, b)]
            for x, y in pairs:
                assert x.tokens == y.tokens
                assert x.score == pytest.approx(y.score, abs=1e-5)
                torch.testing.assert_close(x.attention, y.attention)


@pytest.fixture
def guarded_chunks(monkeypatch):
    """The fixed-shape steps between two looks run under `no_host_reads`."""
    original = graphed_search.SearchGraphs._chunk

    def chunk(self, chunks, key, run):
        def guarded():
            with no_host_reads():
                run()

        return original(self, chunks, key, guarded)

    monkeypatch.setattr(graphed_search.SearchGraphs, "_chunk", chunk)


@pytest.mark.parametrize("name", ATTENTIONS)
@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("busy", [False, True])
def test_fixed_shape_search_equals_the_search(
    monkeypatch, guarded_chunks, name: str, beam_size: int, busy: bool
) -> None:
    """Padded to a fixed shape with every sentence kept in the loop, greedy and beam search give
    `decode`'s n-best lists (tokens, scores, attention), read nothing back between looks, and a
    second batch of the shape reuses the first one's buffers; also where each look finds the
    device busy, so that every batch runs a chunk past its end."""
    if busy:
        monkeypatch.setattr(graphed_search.Flag, "ready", lambda self: False)
    model = peaky_model(name)
    src, lengths = sources()
    cfg = settings(beam_size, nbest=beam_size)
    graphs = SearchGraphs(Engine.create("cpu"))
    for rows in (torch.arange(5), torch.tensor([4, 2, 0, 3, 1])):  # one shape, other contents
        want = decode(model, src[rows], lengths[rows], cfg)
        got = graphs.search(model, src[rows], lengths[rows], cfg)
        assert [len(n) for n in got] == [len(n) for n in want]
        for x, y in zip(sum(got, []), sum(want, []), strict=True):
            assert x.tokens == y.tokens
            assert x.score == pytest.approx(y.score, abs=1e-5)
            torch.testing.assert_close(x.attention, y.attention)
    assert graphs.shapes == 1
    assert sum(len(n[0].tokens) for n in want) > len(want)  # not all empty
    other = settings(beam_size + 1, alpha=1.0, nbest=2)  # the same batch, other settings
    got, want = graphs.search(model, src, lengths, other), decode(model, src, lengths, other)
    assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in want]
    assert graphs.shapes == 2


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_batch_results_are_made_while_the_next_batch_runs(monkeypatch, beam_size: int) -> None:
    """`decode_sources` with graphs: the same n-best lists as without, batch after batch of one
    shape (each refilling the buffers the last one's results were copied from); while a batch's
    first two chunks run, the host makes the last batch's results and starts the next batch."""
    model = peaky_model("bahdanau")
    gen = torch.Generator().manual_seed(2)
    lines = [torch.randint(4, 20, (int(n),), generator=gen).tolist() + [EOS] for n in range(11)]
    cfg = replace(settings(beam_size, nbest=beam_size), batch_size=3)
    want = decode_sources(model, lines, cfg)
    events: list[str] = []
    original_chunk = graphed_search.SearchGraphs._chunk

    def chunk(self, chunks, key, run):
        events.append("chunk")
        return original_chunk(self, chunks, key, run)

    def logged(function):
        def made(*args, **kwargs):
            events.append("results")
            return function(*args, **kwargs)

        return made

    padded = graphed_search.Padded.of

    def batch(*args):
        events.append("batch")
        return padded(*args)

    monkeypatch.setattr(graphed_search.Padded, "of", batch)
    monkeypatch.setattr(graphed_search.SearchGraphs, "_chunk", chunk)
    monkeypatch.setattr(graphed_search, "greedy_results", logged(graphed_search.greedy_results))
    monkeypatch.setattr(graphed_search, "backtrack", logged(graphed_search.backtrack))
    graphs = SearchGraphs(Engine.create("cpu"))
    got = decode_sources(model, lines, cfg, graphs=graphs)
    assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in want]
    for x, y in zip(sum(got, []), sum(want, []), strict=True):
        assert x.score == pytest.approx(y.score, abs=1e-5)
        torch.testing.assert_close(x.attention, y.attention)
    assert len(graphs.beam if beam_size > 1 else graphs.greedy) == 2  # 3 rows (4), then 2
    # each batch runs two chunks, the last one one (on the CPU a look never waits: none runs
    # past a batch's end); once two are queued, the host makes the last batch's results and
    # starts (pads, encodes) the next batch, whose chunks follow this batch's
    first, later, last = ["batch", "chunk", "chunk", "batch"], ["results", "batch"], ["results"]
    assert events == first + ["chunk", "chunk", *later] * 2 + ["chunk", *last, *last]


@pytest.mark.parametrize("busy", [True, False])
def test_the_host_works_while_the_device_runs_chunks_it_may_not_need(monkeypatch, busy) -> None:
    """A batch's chunks: the host's other work comes once two chunks are queued, or as many as
    the shape's last batch ran less one; until then, where the device still runs the last chunk
    queued, the next one is queued before the look at it (a batch may run past its end), and
    where the device is done the look comes first; after it each chunk waits for a look."""
    log: list[str] = []
    chunks_run = lambda: sum(e.startswith("chunk") for e in log)  # noqa: E731

    class Logged(graphed_search.Flag):
        def __init__(self, flag) -> None:
            super().__init__(flag)
            self.chunk = chunks_run() - 1

        def ready(self) -> bool:
            return not busy

        def __call__(self) -> bool:
            log.append(f"read {self.chunk}")
            return super().__call__()

    monkeypatch.setattr(graphed_search, "Flag", Logged)
    graphs = SearchGraphs(Engine.create("cpu"))

    def run(chunks: search_buffers.Chunks, count: int) -> int:
        log.clear()

        def work(c: int) -> None:
            log.append(f"chunk {c}")
            chunks.ended.fill_(chunks_run() >= 3)  # in the third chunk

        return graphs._chunks(
            chunks, count, lambda c: (c, lambda: work(c)), lambda: log.append("meanwhile")
        )

    cpu = torch.device("cpu")
    shape = search_buffers.Chunks(cpu)
    assert run(shape, 6) == 3 == shape.last  # a shape's first batch
    looked = [] if busy else ["read 0"]
    assert log == ["chunk 0", *looked, "chunk 1", "meanwhile", "read 1", "chunk 2", "read 2"]
    shape.last = 5  # its last batch ran 5 chunks: 4 queued before the host's work
    if busy:
        assert run(shape, 6) == 4  # one past the batch's end
        assert log == ["chunk 0", "chunk 1", "chunk 2", "chunk 3", "meanwhile", "read 3"]
    else:
        assert run(shape, 6) == 3
        assert log == [
            *("chunk 0", "read 0", "chunk 1", "read 1", "chunk 2", "read 2", "meanwhile"),
        ]
    assert run(search_buffers.Chunks(cpu), 1) == 1  # one chunk: the host's work after it
    assert log == ["chunk 0", "meanwhile"]


def test_decode_takes_the_fixed_shape_search_only_where_it_applies() -> None:
    model = peaky_model("luong")
    src, lengths = sources()
    for cfg, used in (
        (settings(), True),
        (settings(beam_size=2), True),
        (settings(beam_size=2, coverage_penalty=0.2), False),
        (replace(settings(), no_repeat_ngram=2), False),
        (replace(settings(), sampling=True), False),
    ):
        graphs = SearchGraphs(Engine.create("cpu"))
        decode(model, src, lengths, cfg, graphs=graphs)
        assert bool(graphs.shapes) == used


def test_a_search_whose_recording_fails_runs_without_graphs(monkeypatch, caplog) -> None:
    """Where CUDA refuses to record a chunk (made to here, also where a GPU is: recording CPU
    work there gives an empty graph), the search warns once and runs the chunk as it is: the
    same n-best lists, and no graph tried again."""

    StandInCapture(monkeypatch, refusal="operation not permitted when stream is capturing")
    model = peaky_model("bahdanau")
    src, lengths = sources()
    for cfg in (settings(), settings(3, nbest=3)):
        graphs = SearchGraphs(Engine.create("cpu"))
        graphs.capture = True  # as on CUDA: the first run of a chunk eager, the second recorded
        want = decode(model, src, lengths, cfg)
        with caplog.at_level("WARNING", logger="seq2seq.decoding"):
            for _ in range(2):
                got = graphs.search(model, src, lengths, cfg)
                assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in want]
        assert "runs without CUDA graphs" in caplog.text and not graphs.capture


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_batch_too_large_to_keep_runs_without_graphs(monkeypatch, beam_size: int) -> None:
    """A batch whose shape's attention record is over `MAX_HELD_BYTES` runs eagerly (a server's
    rare long inputs keep no buffers or graphs); the others from graphs, the same n-best lists."""
    model = peaky_model("bahdanau")
    src, lengths = sources()
    ids = [src[i, : lengths[i]].tolist() for i in range(len(lengths))]
    cfg = replace(settings(beam_size, nbest=beam_size), batch_size=2)  # batches of 2, 2 and 1
    one_row = Shape.of(1, int(lengths.max()), cfg, None).attention_bytes(model.decoder.heads)
    monkeypatch.setattr(shapes, "MAX_HELD_BYTES", one_row)  # the last batch's shape only
    graphs = SearchGraphs(Engine.create("cpu"))
    got = decode_sources(model, ids, cfg, graphs=graphs)
    want = decode_sources(model, ids, cfg)
    assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in want]
    assert [shape.rows for shape in [*graphs.greedy, *graphs.beam]] == [1]


def test_search_graphs_are_recorded_anew_for_parameters_elsewhere() -> None:
    """Weights changed in place keep a shape's buffers (and graphs), as a training's validations
    do; a model whose parameters moved (or another model) has its shapes recorded anew."""
    model = peaky_model("luong")
    src, lengths = sources()
    graphs = SearchGraphs(Engine.create("cpu"))
    graphs.search(model, src, lengths, settings())
    slots = graphs.greedy[next(iter(graphs.greedy))]
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.01)
    got = graphs.search(model, src, lengths, settings())
    assert graphs.greedy[next(iter(graphs.greedy))] is slots
    want = decode(model, src, lengths, settings())
    assert [n[0].tokens for n in got] == [n[0].tokens for n in want]
    for p in model.parameters():
        p.data = p.data.clone()
    graphs.search(model, src, lengths, settings())
    assert graphs.greedy[next(iter(graphs.greedy))] is not slots


def test_a_translator_replays_the_graphs_it_is_given(smoke_run, multi30k_dir) -> None:
    """A training's validations hand their `Translator` the graphs they keep (`Validator`)."""
    run = load_run(smoke_run)
    with gzip.open(multi30k_dir / "val.de.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).strip() for _ in range(9)]
    engine, cfg = Engine.create("cpu"), DecodeConfig(beam_size=1, batch_size=4)
    graphs = SearchGraphs(engine)
    kept = Translator(run.model, run.src_tok, run.tgt_tok, cfg, engine, graphs).translate(lines)
    plain = Translator.from_run(run, cfg, engine).translate(lines)
    assert graphs.shapes >= 1
    assert [t.hypotheses[0].tokens for t in kept] == [t.hypotheses[0].tokens for t in plain]


def test_a_served_model_shares_one_set_of_graphs(monkeypatch, smoke_run) -> None:
    """Where graphs run (a GPU, stood in for), a served model's translators of every search
    setting share one set: each shape holds its settings, and one memory pool serves them all."""
    monkeypatch.setattr(SearchGraphs, "where_they_run", classmethod(lambda cls, e: cls(e)))
    engine = Engine.create("cpu")
    served = backends._torch_model(load_run(smoke_run, engine=engine), engine)
    greedy, beam = (served.make_translator(DecodeConfig(beam_size=k)) for k in (1, 5))
    assert greedy.graphs is not None and greedy.graphs is beam.graphs
