"""The fixed-shape training update (train.cuda_graphs) on the CPU: the same losses, gradients
and updates as the eager path, its buckets and captures, and nothing read back to the host inside
an update (a read raises here, as it would make a CUDA graph impossible)."""

from __future__ import annotations

import pytest
import torch
from capture_helpers import StandInCapture
from host_reads import HostRead, no_host_reads
from model_helpers import (
    SETUPS,
    hand_batch,
    tiny_model,
)

from seq2seq.config import TrainConfig
from seq2seq.data.batching import Batch
from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import Normalizer
from seq2seq.runtime.engine import Engine
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


def test_a_cuda_start_chooses_graphs_and_precision_together(monkeypatch) -> None:
    """On CUDA (the rule only: no GPU is touched) precision=auto takes bf16 for a graphed update
    and fp32 for an eager one; a resumed run's fp16 (which graphs refuse) runs eagerly."""
    from omegaconf import OmegaConf

    from seq2seq.model.config import BahdanauConfig, ModelConfig
    from seq2seq.model.seq2seq import build_model
    from seq2seq.training.record import choose_and_record

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
    model = build_model(ModelConfig(8, 12, attention=BahdanauConfig(size=10)), 30, 40)

    def start(setting: str, kept: dict) -> tuple[str, str]:
        engine = Engine.create("cpu", "auto")
        engine.device = torch.device("cuda")
        train = {"cuda_graphs": setting, "accumulate": 1, "batch_tokens": 64}
        cfg = OmegaConf.create({"model": {"attention": {}}, "train": train, "versions": None})
        choose_and_record(cfg, engine, model, kept, [30, 40])
        return cfg.precision, cfg.train.cuda_graphs

    assert start("auto", {}) == ("bf16", "true")
    assert start("false", {}) == ("fp32", "false")
    assert start("auto", {"precision": "fp16"}) == ("fp16", "false")
    with pytest.raises(Seq2SeqError, match="not fp16"):
        start("true", {"precision": "fp16"})


def test_when_the_static_update_runs() -> None:
    engine = Engine.create("cpu")
    assert not use_graphs("auto", engine, TRAIN)  # no CUDA here
    assert not use_graphs("false", engine, TRAIN)
    assert use_graphs("true", engine, TRAIN)  # the static update, eagerly on the CPU
    with pytest.raises(Seq2SeqError, match="train.accumulate=1"):
        use_graphs("true", engine, TrainConfig(accumulate=2))
    with pytest.raises(Seq2SeqError, match="other than sparsemax"):
        use_graphs("true", engine, TRAIN, Normalizer.sparsemax)
