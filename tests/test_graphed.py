"""The fixed-shape training update (train.cuda_graphs) and the search steps between looks, on
the CPU: the same losses, gradients, updates and translations as the eager paths, and nothing
read back to the host inside an update or a search step (a read raises here, as it would make
a CUDA graph impossible or the GPU wait)."""

from __future__ import annotations

import gzip
from dataclasses import replace

import pytest
import torch
from capture_helpers import StandInCapture
from host_reads import HostRead, no_host_reads
from model_helpers import (
    ATTENTIONS,
    SETUPS,
    hand_batch,
    peaky_model,
    settings,
    sources,
    tiny_model,
)

from seq2seq.config import DecodeConfig, TrainConfig
from seq2seq.data.batching import Batch
from seq2seq.decoding import beam as beam_module
from seq2seq.decoding import graphed as graphed_search
from seq2seq.decoding import search as search_module
from seq2seq.decoding import shapes
from seq2seq.decoding.graphed import SearchGraphs
from seq2seq.decoding.inference import Translator
from seq2seq.decoding.search import beam_search, decode, decode_sources, greedy_search
from seq2seq.decoding.shapes import Shape
from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import Normalizer
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import load_run
from seq2seq.serving import backends
from seq2seq.training.graphed import (
    Bucket,
    StaticBatch,
    StaticUpdater,
    bucket_size,
    resolve,
    use_graphs,
)
from seq2seq.training.updater import Updater
from seq2seq.vocab import EOS

TRAIN = TrainConfig(label_smoothing=0.1, clip_grad_norm=1.0, lr=1e-2, coverage_weight=0.5)


def padded(batch: Batch, rows: int, src_len: int, tgt_len: int) -> tuple[torch.Tensor, ...]:
    """``batch`` padded as the static update pads it: extra rows hold one EOS and no target."""
    b, s = batch.src.shape
    src = torch.zeros(rows, src_len, dtype=torch.long)
    src[:b, :s], src[b:, 0] = batch.src, EOS
    tgt_in, tgt_out = (torch.zeros(rows, tgt_len, dtype=torch.long) for _ in range(2))
    tgt_in[:b, : batch.tgt_in.size(1)] = batch.tgt_in
    tgt_out[:b, : batch.tgt_out.size(1)] = batch.tgt_out
    lengths = torch.ones(rows, dtype=torch.long)
    lengths[:b] = batch.src_lengths
    return src, lengths, tgt_in, tgt_out


@pytest.mark.parametrize("name", SETUPS)
def test_padded_loss_and_gradients_equal_eager(name: str) -> None:
    """Every attention setup: the static loss of a batch padded further equals the eager loss
    of the batch as it is, and so do the gradients (fp32, within rounding)."""
    model = tiny_model(**SETUPS[name]).train()
    batch = hand_batch(0)
    params = list(model.parameters())
    eager = model(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, 0.1, None, 0, 0.5)
    eager_grads = torch.autograd.grad(eager[0], params, allow_unused=True)
    inputs = padded(batch, 5, 9, 10)
    static = model(*inputs, 0.1, None, 0, 0.5, static=True)
    static_grads = torch.autograd.grad(static[0], params, allow_unused=True)
    torch.testing.assert_close(static, eager, rtol=1e-5, atol=1e-5)
    for a, b in zip(static_grads, eager_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_bucket_sizes_are_few_and_tight() -> None:
    sizes = [bucket_size(n) for n in range(1, 257)]
    assert all(n <= s <= max(n + 1, n * 1.125 + 1) for n, s in enumerate(sizes, start=1))
    assert len(set(sizes)) <= 45  # shapes to capture for every length up to 256
    # the longer side (7 target pieces) rounds up to 8; 8 is the bucket of lengths 7 and 8, and
    # a 2,000-token budget gives length 7 at most 285 rows: row counts share the bucket
    assert Bucket.of(hand_batch(0), 2000) == Bucket(285, 8, 8)
    assert Bucket.of(hand_batch(0, rows=2), 2000) == Bucket(285, 8, 8)
    assert Bucket.of(hand_batch(0), 10) == Bucket(3, 8, 8)  # never fewer rows than the batch


def updates(updater, batches: list[Batch]) -> list:
    return [updater.step([b], b.ntokens) for b in batches]


def test_static_updates_equal_eager_updates() -> None:
    """Three updates over batches of three shapes (two buckets): the same losses, gradient
    norms and parameters as the eager updater's."""
    engine = Engine.create("cpu")
    batches = [hand_batch(0), hand_batch(1, rows=2), hand_batch(2)]
    eager, static = Updater(engine, tiny_model(**SETUPS["bahdanau-coverage"]), TRAIN), None
    static = StaticUpdater(engine, tiny_model(**SETUPS["bahdanau-coverage"]), TRAIN)
    expected, got = updates(eager, batches), resolve(updates(static, batches))
    for a, b in zip(got, expected, strict=True):
        assert a.applied and b.applied
        assert float(a.loss_sum) == pytest.approx(float(b.loss_sum), rel=1e-5)
        assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-4)
    for a, b in zip(static.module.parameters(), eager.module.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # each takes up the other's state, as a resumed run does
    state = static.state_dict()
    assert isinstance(state["optimizer"]["param_groups"][0]["lr"], float)
    eager.load_state_dict(state)
    static.load_state_dict(eager.state_dict())
    assert (
        resolve(updates(static, batches[:1]))[0].applied and updates(eager, batches[:1])[0].applied
    )


class _Replay:
    """A stand-in for a captured graph: counts its replays."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def replay(self) -> None:
        self.calls.append("replay")


@pytest.mark.parametrize("refused", [0, 1, 2])
def test_only_the_first_bucket_warms_up_before_its_capture(monkeypatch, refused: int) -> None:
    """On CUDA (stood in for here): the first bucket runs an eager warm-up, then is captured;
    later buckets are captured at once, unless CUDA refuses, when they warm up first; a bucket
    refused twice runs eagerly from then on."""
    engine = Engine.create("cpu")
    updater = StaticUpdater(engine, tiny_model(**SETUPS["bahdanau"]), TRAIN)
    updater.capture, calls = True, []
    refuse = [Bucket(400, 6, 6)] * refused  # the one-row batches' bucket

    def warm_up(inputs):
        calls.append("warm-up")
        updater.optimizer.zero_grad(set_to_none=True)
        return updater.update(inputs)

    def capture(bucket, inputs):
        calls.append("capture")
        if bucket in refuse:
            refuse.remove(bucket)
            raise RuntimeError("operation not permitted when stream is capturing")
        updater.graphs[bucket] = (_Replay(calls), warm_up(inputs))
        calls.pop()  # the stand-in's update is not a warm-up
        return updater.graphs[bucket][1]

    monkeypatch.setattr(updater, "_warm_up", warm_up)
    monkeypatch.setattr(updater, "_capture", capture)
    monkeypatch.setattr(updater, "_addresses", lambda: ())
    batches = [hand_batch(i, rows) for i, rows in enumerate([3, 3, 3, 1, 1, 1])]  # 2 buckets
    assert resolve(updates(updater, batches))[-1].applied
    second = {
        0: ["capture", "replay", "replay"],
        1: ["capture", "warm-up", "capture", "replay"],
        2: ["capture", "warm-up", "capture", "warm-up", "warm-up"],
    }[refused]
    assert calls == ["warm-up", "capture", "replay", *second]


def static_inputs(updater: StaticUpdater, batch: Batch) -> tuple[Bucket, StaticBatch]:
    bucket = Bucket.of(batch, updater.tcfg.batch_tokens)
    inputs = StaticBatch(bucket, updater.engine.device, guided=False)
    inputs.fill(batch, 1 / batch.ntokens)
    return bucket, inputs


def test_a_capture_that_makes_adams_state_is_refused(monkeypatch) -> None:
    """Adam's state made inside a capture would be zeroed at every replay: the capture is
    refused, the state unmade and the pool renewed; after an eager update it is captured."""
    capturing = StandInCapture(monkeypatch)
    updater = StaticUpdater(Engine.create("cpu"), tiny_model(**SETUPS["bahdanau"]), TRAIN)
    updater.capture = True
    bucket, inputs = static_inputs(updater, hand_batch(0))
    with pytest.raises(RuntimeError, match="made while capturing"):
        updater._capture(bucket, inputs)
    assert not updater.optimizer.state and not updater.graphs
    updater.optimizer.zero_grad(set_to_none=True)
    updater.update(inputs)  # the warm-up's eager update
    state = dict(updater.optimizer.state)
    updater._capture(bucket, inputs)
    assert bucket in updater.graphs and dict(updater.optimizer.state) == state
    assert capturing.pools_used == [1, 2]  # the refused capture's pool is not used again


def test_the_run_says_what_capturing_cost(monkeypatch) -> None:
    """The first bucket warms up eagerly, then both are captured: the summary a graphed run
    logs at its end (none without CUDA)."""
    StandInCapture(monkeypatch)
    updater = StaticUpdater(Engine.create("cpu"), tiny_model(**SETUPS["bahdanau"]), TRAIN)
    assert updater.summary() is None
    updater.capture = True
    updates(updater, [hand_batch(i, rows) for i, rows in enumerate([3, 3, 3, 1, 1, 1])])
    summary = updater.summary()
    assert summary.startswith("CUDA graphs: 2 buckets captured, 1 eager update (")
    assert updater.recording_s > 0


def test_the_graphs_rate_stays_the_tensor_they_read(monkeypatch) -> None:
    """A rate set as a number (a scheduler) reaches the graphs' tensor before a replay, and a
    loaded optimizer state keeps the tensor and has every bucket captured again."""
    StandInCapture(monkeypatch)
    updater = StaticUpdater(Engine.create("cpu"), tiny_model(**SETUPS["bahdanau"]), TRAIN)
    updater.capture, updater.lr = True, torch.tensor(TRAIN.lr)
    group = updater.optimizer.param_groups[0]
    group["lr"] = updater.lr
    bucket, inputs = static_inputs(updater, hand_batch(0))
    updater.update(inputs)
    updater._capture(bucket, inputs)
    group["lr"] = 0.5
    updater.step([hand_batch(0)], hand_batch(0).ntokens)  # a replay
    assert group["lr"] is updater.lr and float(updater.lr) == 0.5
    state = updater.state_dict()
    state["optimizer"]["param_groups"][0]["lr"] = 0.25
    updater.load_state_dict(state)
    assert group["lr"] is updater.lr and float(updater.lr) == 0.25 and not updater.graphs


@pytest.mark.parametrize("name", SETUPS)
def test_static_update_reads_nothing_back(name: str) -> None:
    """Inside a static update no tensor is read by the host; the eager update does read (its
    check of the gradient norm), which shows that the guard sees reads."""
    engine = Engine.create("cpu")
    batch = hand_batch(0)
    static = StaticUpdater(engine, tiny_model(**SETUPS[name]), TRAIN)
    eager = Updater(engine, tiny_model(**SETUPS[name]), TRAIN)
    if "sparsemax" in name:  # entmax's backward indexes by a mask: use_graphs refuses it
        with no_host_reads(), pytest.raises(HostRead):
            static.step([batch], batch.ntokens)
        return
    with no_host_reads():
        pending = static.step([batch], batch.ntokens)
        with pytest.raises(HostRead):
            eager.step([batch], batch.ntokens)
    assert resolve([pending])[0].applied


def test_non_finite_update_is_skipped_on_the_device() -> None:
    """A non-finite gradient norm leaves every parameter as it was, without a host read, and
    the resolved result says it was skipped."""
    engine = Engine.create("cpu")
    static = StaticUpdater(engine, tiny_model(**SETUPS["bahdanau"]), TRAIN)
    with torch.no_grad():
        static.module.decoder.bridge.weight[0, 0] = float("nan")
    before = [p.detach().clone() for p in static.module.parameters()]
    batch = hand_batch(0)
    with no_host_reads():
        pending = static.step([batch], batch.ntokens)
    (result,) = resolve([pending])
    assert not result.applied and not result.finite_loss
    for a, b in zip(static.module.parameters(), before, strict=True):
        torch.testing.assert_close(a, b, equal_nan=True)


def test_when_the_static_update_runs() -> None:
    engine = Engine.create("cpu")
    assert not use_graphs("auto", engine, TRAIN)  # no CUDA here
    assert not use_graphs("false", engine, TRAIN)
    assert use_graphs("true", engine, TRAIN)  # the static update, eagerly on the CPU
    with pytest.raises(Seq2SeqError, match="train.accumulate=1"):
        use_graphs("true", engine, TrainConfig(accumulate=2))
    with pytest.raises(Seq2SeqError, match="other than sparsemax"):
        use_graphs("true", engine, TRAIN, Normalizer.sparsemax)


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
def test_fixed_shape_search_equals_the_search(guarded_chunks, name: str, beam_size: int) -> None:
    """Padded to a fixed shape with every sentence kept in the loop, greedy and beam search give
    `decode`'s n-best lists (tokens, scores, attention), read nothing back between looks, and a
    second batch of the shape reuses the first one's buffers."""
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
    first chunk runs, the host makes the last batch's results and starts the next batch."""
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
    # each batch runs two chunks; after its first, the host makes the last batch's results and
    # starts (pads, encodes) the next batch, whose chunks follow this batch's second
    first, later, last = ["batch", "chunk", "batch"], ["results", "batch"], ["results"]
    assert events == first + ["chunk", "chunk", *later] * 2 + ["chunk", "chunk", *last, *last]


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
