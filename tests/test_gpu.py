"""On a CUDA GPU: smoke training in each precision, the same translations as on the CPU,
checkpoints that move between devices, the scores of given pairs, the fused GRU cell and the
decoder's gradients, training updates replayed from CUDA graphs (the eager updates' results, also
after a change of bucket), search steps that never synchronise, greedy and beam search replayed
from CUDA graphs, and captures that keep the allocator's caches. Marked ``gpu``; skipped where
torch finds no CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from model_helpers import SETUPS, hand_batch, peaky_model, settings, sources, tiny_model
from omegaconf import OmegaConf
from run_helpers import TRAIN_TIMEOUT, scalars

from seq2seq.config import DecodeConfig, TrainConfig
from seq2seq.data.corpus import read_parallel
from seq2seq.decoding import beam as beam_module
from seq2seq.decoding import graphed as graphed_module
from seq2seq.decoding import search as search_module
from seq2seq.decoding.forced import score_pairs
from seq2seq.decoding.graphed import SearchGraphs
from seq2seq.decoding.inference import Translator
from seq2seq.decoding.search import beam_search, decode, decode_sources, greedy_search
from seq2seq.model.autocast import run_gru
from seq2seq.model.config import LuongConfig
from seq2seq.model.recurrence import gru_update
from seq2seq.runtime.capture import Recorder
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import load_run
from seq2seq.training.graphed import StaticUpdater, resolve
from seq2seq.training.updater import Updater
from seq2seq.vocab import EOS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; torch finds none"),
]
SENTENCES = 200  # test_2016_flickr lines decoded on both devices


def train_on_gpu(run: Path, data_dirs: list[str], precision: str) -> None:
    cmd = [sys.executable, "-m", "seq2seq.commands.train", "experiment=smoke", "device=cuda"]
    cmd += [f"precision={precision}", f"hydra.run.dir={run}", "log.progress=false"]
    proc = subprocess.run([*cmd, *data_dirs], capture_output=True, text=True, timeout=TRAIN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def gpu_runs(tmp_path_factory, data_dirs: list[str]) -> dict[str, Path]:
    runs = {}
    for precision in ("fp32", "bf16", "fp16"):
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            continue
        runs[precision] = tmp_path_factory.mktemp(precision) / "run"
        train_on_gpu(runs[precision], data_dirs, precision)
    return runs


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_smoke_training_on_the_gpu(gpu_runs: dict[str, Path], precision: str) -> None:
    if precision not in gpu_runs:
        pytest.skip(f"{torch.cuda.get_device_name()} has no {precision}")
    run = gpu_runs[precision]
    losses = [loss for _, loss in scalars(run, "valid/loss")]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    state = torch.load(run / "best.pt", weights_only=True)
    assert all(t.device.type == "cpu" for t in state["model"].values())  # host tensors
    assert "cuda" in state["rng"][0]
    graphs = OmegaConf.load(run / "config.yaml").train.cuda_graphs  # auto: what ran
    assert graphs == ("false" if precision == "fp16" else "true")


def decode_test(run: Path, device: str, beam_size: int, multi30k_dir: Path) -> list:
    engine = Engine.create(device)
    trained = load_run(run, engine=engine)
    sources, _ = read_parallel(
        multi30k_dir / "test_2016_flickr.de.gz", multi30k_dir / "test_2016_flickr.en.gz", SENTENCES
    )
    search = DecodeConfig(beam_size=beam_size, nbest=1)
    translator = Translator.from_run(trained, search, engine=engine)
    return [t.hypotheses[0] for t in translator.translate(sources)]


@pytest.mark.parametrize("beam_size", [1, 5])
def test_gpu_translations_equal_the_cpus(
    no_tf32, smoke_run: Path, multi30k_dir: Path, beam_size: int
):
    """Tolerance: scores within 1e-3 where the tokens agree; at most 1% of the sentences may
    differ (cuDNN's GRU and the GPU's reductions round differently, which can flip a near-tie)."""
    cpu = decode_test(smoke_run, "cpu", beam_size, multi30k_dir)
    gpu = decode_test(smoke_run, "cuda", beam_size, multi30k_dir)
    same = [(c, g) for c, g in zip(cpu, gpu, strict=True) if c.tokens == g.tokens]
    assert len(same) >= 0.99 * SENTENCES
    for c, g in same:
        assert g.score == pytest.approx(c.score, abs=1e-3)


def evaluate(run: Path, device: str) -> dict:
    cmd = [sys.executable, "-m", "seq2seq.commands.evaluate", f"run_dir={run}", f"device={device}"]
    cmd += ["beam_size=1"]
    env = {**os.environ, "NVIDIA_TF32_OVERRIDE": "0"}  # cuDNN's GRU in fp32, as the CPU's
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_checkpoints_move_between_devices(smoke_run: Path, gpu_runs: dict[str, Path]) -> None:
    on_gpu = evaluate(smoke_run, "cuda")  # trained on the CPU
    assert on_gpu["device"].startswith("cuda")
    assert on_gpu["bleu"] == pytest.approx(evaluate(smoke_run, "cpu")["bleu"], abs=0.5)
    on_cpu = evaluate(gpu_runs["fp32"], "cpu")  # trained on the GPU
    assert on_cpu["device"] == "cpu"
    assert on_cpu["bleu"] == pytest.approx(evaluate(gpu_runs["fp32"], "cuda")["bleu"], abs=0.5)


def test_the_pairs_scores_on_the_gpu_are_the_cpus(no_tf32) -> None:
    """seq2seq-score's forced decoding: each pair's log-probability, on either device."""
    model, rng = tiny_model(**SETUPS["luong-feed"]), np.random.default_rng(1)
    sources = [list(rng.integers(4, 20, int(rng.integers(0, 12)))) for _ in range(40)]
    targets = [list(rng.integers(4, 25, int(rng.integers(0, 12)))) for _ in range(40)]
    on_cpu = score_pairs(model, sources, targets, Engine.create("cpu", "fp32"), 60)
    on_gpu = score_pairs(model.cuda(), sources, targets, Engine.create("cuda", "fp32"), 60)
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-4, atol=1e-4)


# rows of hand_batch per update: 3 and 2 rows share bucket (285, 8, 8) (7 target pieces), one
# row is bucket (400, 6, 6) (4 of them): a warm-up, a capture and replays of each, a replay
# after the other bucket's, and one of another row count
ROWS = [3, 3, 3, 1, 1, 1, 3, 2, 2, 2]


@pytest.fixture
def no_tf32(monkeypatch):
    """fp32 products (cuBLAS's, and cuDNN's GRU, TF32 by default) in full precision, so that two
    paths, devices or batch shapes differ by rounding only."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


@pytest.mark.parametrize("name", ["bahdanau", "luong-feed", "luong-nofeed", "multihead"])
def test_graphed_updates_equal_eager_updates(no_tf32, name: str) -> None:
    """Ten updates over two buckets: replayed graphs give the eager updates' losses, gradient
    norms and parameters; the replays read nothing back (CUDA's sync debug mode raises)."""
    engine = Engine.create("cuda")
    tcfg = TrainConfig(label_smoothing=0.1, lr=1e-2)
    batches = [engine.to_device(hand_batch(i, rows)) for i, rows in enumerate(ROWS)]
    eager = Updater(engine, tiny_model(**SETUPS[name]).train(), tcfg)
    graphed = StaticUpdater(engine, tiny_model(**SETUPS[name]).train(), tcfg)
    expected = [eager.step([b], b.ntokens) for b in batches]
    pending = []
    for i, batch in enumerate(batches):
        replay = i in (2, 5, 6, 7, 8, 9)  # each bucket's graph exists by then
        torch.cuda.set_sync_debug_mode("error" if replay else "default")
        try:
            pending.append(graphed.step([batch], batch.ntokens))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert len(graphed.graphs) == 2
    for got, want in zip(resolve(pending), expected, strict=True):
        assert float(got.loss_sum) == pytest.approx(float(want.loss_sum), rel=1e-4)
        assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-3)
    # Adam's first steps are about lr times the gradient's sign: rounding in a gradient near 0
    # (the padded shapes sum in another order) can move an element by up to lr: a tenth of it here
    for a, b in zip(graphed.module.parameters(), eager.module.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
    # its checkpoint state continues on the CPU, eagerly
    on_cpu = Updater(Engine.create("cpu"), tiny_model(**SETUPS[name]).train(), tcfg)
    on_cpu.load_state_dict(graphed.state_dict())
    assert on_cpu.step([hand_batch(0)], hand_batch(0).ntokens).applied


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_gru_cell_is_the_composed_one(no_tf32, dtype) -> None:
    """CUDA's fused GRU cell (`gru_update` on the GPU) against the same gates composed on the
    CPU: the next state and the gradients of both projections and the state."""
    gen = torch.Generator().manual_seed(0)
    gi, gh, h = (torch.randn(5, n, generator=gen) for n in (24, 24, 8))
    results = []
    for device in ("cpu", "cuda"):
        inputs = [x.detach().to(device, dtype).requires_grad_() for x in (gi, gh, h)]  # leaves
        out = gru_update(*inputs)
        out.float().pow(2).sum().backward()
        results.append([out.float().cpu(), *(x.grad.float().cpu() for x in inputs)])
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    for cpu, cuda in zip(*results, strict=True):
        torch.testing.assert_close(cuda, cpu, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("name", ["bahdanau-conditional", "luong-feed", "luong-concat"])
def test_the_decoders_gradients_on_the_gpu_are_the_cpus(no_tf32, name: str) -> None:
    """The teacher-forced loop on CUDA (the fused cell, one weight product per loop) gives the
    CPU's gradients."""
    grads = []
    for device in ("cpu", "cuda"):
        model = tiny_model(**SETUPS[name]).train().to(device)
        batch = hand_batch(0).to(torch.device(device))
        loss, _ = model(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, 0.1)
        loss.backward()
        grads.append({n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None})
    for key, grad in grads[0].items():
        torch.testing.assert_close(grads[1][key], grad, atol=1e-5, rtol=1e-4, msg=key)


def test_graphs_are_captured_again_when_the_parameters_move(no_tf32) -> None:
    """A parameter given new memory after capture (as ``.to()`` or cuDNN's flattening does) makes
    the graphs be captured again: the updates stay the eager ones."""
    engine = Engine.create("cuda")
    tcfg = TrainConfig(label_smoothing=0.1, lr=1e-2)
    batch = engine.to_device(hand_batch(0, 3))
    eager = Updater(engine, tiny_model(**SETUPS["bahdanau"]).train(), tcfg)
    graphed = StaticUpdater(engine, tiny_model(**SETUPS["bahdanau"]).train(), tcfg)
    expected = [eager.step([batch], batch.ntokens) for _ in range(6)]
    pending = []
    for i in range(6):
        if i == 3:  # a graph replays from step 2 on
            for p in graphed.module.parameters():
                p.data = p.data.clone()
        pending.append(graphed.step([batch], batch.ntokens))
    for got, want in zip(resolve(pending), expected, strict=True):
        assert float(got.loss_sum) == pytest.approx(float(want.loss_sum), rel=1e-4)
    # rounding near 0 can move an element by up to lr (as above); graphs left on the old memory
    # would leave three updates out: about 3 * lr
    for a, b in zip(graphed.module.parameters(), eager.module.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_a_recorder_keeps_the_caches_and_its_graphs_replay() -> None:
    """Captures keep the device's cached blocks (torch.cuda.graph empties them at each), share
    one pool, and replay what they recorded on the current stream; a graph of nothing is
    refused."""
    a, x = torch.zeros(64, device="cuda"), torch.ones(1 << 20, device="cuda")
    del x  # a cached block now, which emptying the cache would give back
    reserved, recorder = torch.cuda.memory_reserved(), Recorder(torch.device("cuda"))
    graphs, outputs = [], []
    for scale in (2.0, 3.0):
        graph = torch.cuda.CUDAGraph()
        with recorder.recording(graph):
            outputs.append(a * scale + 1)
        graphs.append(graph)
    assert torch.cuda.memory_reserved() >= reserved
    assert graphs[0].pool() == graphs[1].pool()
    a.fill_(5.0)
    for graph in graphs:
        graph.replay()
    torch.testing.assert_close(outputs[0], torch.full_like(a, 11.0))
    torch.testing.assert_close(outputs[1], torch.full_like(a, 16.0))
    empty = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="recorded nothing"), recorder.recording(empty):
        torch.ones(3).add_(1)  # work on the CPU only


def test_after_a_refused_capture_random_numbers_and_captures_go_on() -> None:
    """A capture CUDA refuses (a read of the device inside it) raises its own error; then eager
    dropout runs, and a new capture with dropout records and replays (the recorder's recovery:
    some torch versions leave the random generators capturing after a failed capture)."""
    recorder, x = Recorder(torch.device("cuda")), torch.ones(4096, device="cuda")
    with pytest.raises(RuntimeError), recorder.recording(torch.cuda.CUDAGraph()):
        float(x.sum())
    recorder.renew()
    assert 0 < int(torch.nn.functional.dropout(x, 0.5).count_nonzero()) < x.numel()
    graph = torch.cuda.CUDAGraph()
    with recorder.recording(graph):
        out = torch.nn.functional.dropout(x, 0.5)
    kept = []
    for _ in range(2):
        graph.replay()
        kept.append(out.clone())
    assert all(0 < int(k.count_nonzero()) < x.numel() for k in kept)
    assert not torch.equal(kept[0], kept[1])  # each replay draws anew


def test_the_grus_run_in_bf16_under_bf16_autocast() -> None:
    """CUDA's autocast runs cuDNN's GRU in fp16 whatever its dtype; under bf16 autocast the
    encoder's memory (packed and not) and the decoder's whole-sequence GRU are bf16."""
    model = tiny_model(attention=LuongConfig(size=12, input_feed=False)).cuda()
    batch = hand_batch(0)
    src, lengths = batch.src.cuda(), batch.src_lengths
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        assert model.encode(src, lengths).memory.dtype == torch.bfloat16
        assert model.encode(src, lengths.cuda(), packed=False).memory.dtype == torch.bfloat16
        emb, start = torch.randn(3, 5, 8, device="cuda"), torch.zeros(1, 3, 12, device="cuda")
        states, _ = run_gru(model.decoder.flow.rnn, torch.bfloat16, emb, start)
    assert states.dtype == torch.bfloat16


@pytest.fixture
def steps_never_synchronise(monkeypatch):
    """Greedy's and beam's steps between two looks run in CUDA's sync debug mode "error"."""
    for cls in (beam_module.BeamSearch, search_module._Greedy):
        original = cls.step

        def step(self, t: int, look: bool, original=original) -> None:
            torch.cuda.set_sync_debug_mode("default" if look else "error")
            try:
                return original(self, t, look)
            finally:
                torch.cuda.set_sync_debug_mode("default")

        monkeypatch.setattr(cls, "step", step)


def never_synchronising(function):
    """``function`` run in CUDA's sync debug mode "error": it raises where it would wait."""

    def run(*args, **kwargs):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return function(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    return run


@pytest.mark.parametrize("name", ["bahdanau", "luong", "multihead", "local_p"])
def test_search_steps_never_synchronise(no_tf32, steps_never_synchronise, name: str) -> None:
    """Looking every 8 steps (the GPU's default), greedy and beam search give the n-best lists
    of a search that looks at every step, and no step in between waits for the host."""
    model = peaky_model(name).cuda()
    src, lengths = sources()
    src = src.cuda()
    for search, cfg in ((greedy_search, settings()), (beam_search, settings(4, 0.6, 4))):
        rare = search(model, src, lengths, cfg, check_every=8)
        every = search(model, src, lengths, cfg, check_every=1)
        for a, b in zip(rare, every, strict=True):
            pairs = zip(a, b, strict=True) if isinstance(a, list) else [(a, b)]
            for x, y in pairs:
                assert x.tokens == y.tokens
                assert x.score == pytest.approx(y.score, abs=1e-5)


@pytest.mark.parametrize("name", ["bahdanau", "luong", "multihead", "local_p"])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_graphed_search_equals_the_search(no_tf32, name: str, beam_size: int) -> None:
    """The fixed-shape chunks of greedy and beam search, run eagerly once, then captured and
    replayed for later batches of the shape, give `decode`'s n-best lists."""
    model = peaky_model(name).cuda()
    src, lengths = sources()
    cfg = settings(beam_size, nbest=beam_size)
    graphs = SearchGraphs(Engine.create("cuda"))
    orders = [torch.arange(5), torch.tensor([4, 2, 0, 3, 1]), torch.tensor([1, 0, 4, 3, 2])]
    for rows in orders:
        want = decode(model, src[rows].cuda(), lengths[rows], cfg)
        got = graphs.search(model, src[rows].cuda(), lengths[rows], cfg)
        assert [len(n) for n in got] == [len(n) for n in want]
        for x, y in zip(sum(got, []), sum(want, []), strict=True):
            assert x.tokens == y.tokens
            assert x.score == pytest.approx(y.score, abs=1e-5)
            torch.testing.assert_close(x.attention, y.attention)
    (chunks,) = [*graphs.greedy.values(), *graphs.beam.values()]
    assert chunks.graphs  # captured and replayed


@pytest.mark.parametrize("beam_size", [1, 4])
def test_graphed_batches_one_after_another_equal_the_search(
    no_tf32, monkeypatch, beam_size: int
) -> None:
    """`decode_sources` with graphs on CUDA: each batch's results, copied to the host without
    waiting and made while the next batch runs, equal the search's, batch after batch of one
    shape (each refilling the buffers the last one's results were copied from); the next
    batch is collated, copied and started without waiting for the device (sync debug mode)."""
    # ... and a look's copy of its flag queued without waiting (it waits when read)
    started = (graphed_module._Started, "of")
    for owner, name in ((search_module, "_batch"), started, (graphed_module, "Flag")):
        monkeypatch.setattr(owner, name, never_synchronising(getattr(owner, name)))
    model = peaky_model("luong").cuda()
    gen = torch.Generator().manual_seed(2)
    lines = [torch.randint(4, 20, (n % 7,), generator=gen).tolist() + [EOS] for n in range(24)]
    cfg = replace(settings(beam_size, nbest=beam_size), batch_size=4)
    graphs = SearchGraphs(Engine.create("cuda"))
    want = decode_sources(model, lines, cfg)
    for _ in range(2):  # the second time replayed
        got = decode_sources(model, lines, cfg, graphs=graphs)
        assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in want]
        for x, y in zip(sum(got, []), sum(want, []), strict=True):
            assert x.score == pytest.approx(y.score, abs=1e-5)
            torch.testing.assert_close(x.attention, y.attention)
    assert any(chunks.graphs for chunks in [*graphs.greedy.values(), *graphs.beam.values()])
