"""The engine: device and precision choices, threads, prefetching, host copies, and the training
step's accumulation (the same update however a batch is split)."""

from __future__ import annotations

import pytest
import torch
from distributed_step import TGT_LENGTHS, batch_of, update
from model_helpers import assert_same_update

from seq2seq.config import Precision
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.checkpoint import to_host
from seq2seq.runtime.distributed import Topology
from seq2seq.runtime.engine import HOST, Engine, check_precision, default_threads, resolve_device

NO_CUDA = not torch.cuda.is_available()


def test_cpu_and_auto_devices() -> None:
    assert resolve_device("cpu", Topology()) == HOST
    assert resolve_device(" CPU ", Topology()) == HOST
    expected = torch.device("cuda", 0) if torch.cuda.is_available() else HOST
    assert resolve_device("auto", Topology()) == expected


@pytest.mark.skipif(not NO_CUDA, reason="checks the messages of a machine without CUDA")
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_a_gpu_is_refused(name: str) -> None:
    with pytest.raises(Seq2SeqError, match="no CUDA GPU.*device=cpu"):
        resolve_device(name, Topology())


@pytest.mark.parametrize("name", ["gpu", "tpu", "cuda0", ""])
def test_unknown_device_lists_the_choices(name: str) -> None:
    with pytest.raises(Seq2SeqError, match="auto, cpu, cuda, cuda:N or mps"):
        resolve_device(name, Topology())


def test_fp16_on_the_cpu_is_refused() -> None:
    with pytest.raises(Seq2SeqError, match="fp16 needs CUDA"):
        check_precision(Precision.fp16, HOST)
    check_precision(Precision.fp32, HOST)


def test_threads_default_to_omp_num_threads_else_a_share_of_the_cores(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_threads(local_world_size=2) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr("seq2seq.runtime.engine.available_cores", lambda: 16)
    assert default_threads(1) == 16 and default_threads(4) == 4 and default_threads(32) == 1


def test_topology_comes_from_torchrun_variables(monkeypatch) -> None:
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert Topology.from_env() == Topology(3, 8, 1, 2)
    for key in env:
        monkeypatch.delenv(key)
    assert Topology.from_env() == Topology(0, 1, 0, 1)


def test_prefetch_prepares_one_item_ahead_in_order() -> None:
    """The next item is prepared before the consumer gets the current one (on CUDA that starts
    its copy while the current update runs: the overlap itself is the GPU tests' to see)."""
    engine = Engine.create("cpu")
    prepared: list[int] = []

    def prepare(item: int) -> int:
        prepared.append(item)
        return item * 10

    stream = engine.prefetch(range(4), prepare)
    assert prepared == []  # nothing before the first item is asked for
    seen = []
    for value in stream:
        seen.append(value)
        assert prepared == list(range(min(len(seen) + 1, 4)))  # exactly one item ahead
    assert seen == [0, 10, 20, 30]
    assert list(engine.prefetch([], prepare)) == []


def test_to_host_copies_every_tensor_inside_when_asked() -> None:
    state = {"a": torch.ones(2), "b": [torch.zeros(1), (torch.arange(3), 4)], "c": "text"}
    tensors = [state["a"], state["b"][0], state["b"][1][0]]
    host = to_host(state)
    assert host["b"][1][1] == 4 and host["c"] == "text" and isinstance(host["b"][1], tuple)
    moved = [host["a"], host["b"][0], host["b"][1][0]]
    assert all(t.device == HOST for t in moved)
    # already on the host: the same storage, no needless copy
    assert all(m.data_ptr() == t.data_ptr() for m, t in zip(moved, tensors, strict=True))
    copied = to_host(state, copy=True)
    copies = [copied["a"], copied["b"][0], copied["b"][1][0]]
    assert all(c.data_ptr() != t.data_ptr() for c, t in zip(copies, tensors, strict=True))
    state["a"].add_(1)  # a later change to the original does not reach the copy
    assert torch.equal(copied["a"], torch.ones(2)) and torch.equal(host["a"], state["a"])


def test_process_group_calls_are_no_ops_for_one_process() -> None:
    engine = Engine.create("cpu")
    assert not engine.distributed and engine.is_main
    assert engine.broadcast("x") == "x" and engine.gather(5) == [5]
    assert engine.max_over_ranks(7) == 7 and engine.sum_over_ranks([1.5, 2]) == [1.5, 2]
    assert engine.from_main(lambda: 42) == 42
    engine.barrier()


def test_accumulated_update_equals_the_whole_batch() -> None:
    """accumulate=2 (two micro-batches, one update) == one batch of all four sentences."""
    engine = Engine.create("cpu")
    tokens = sum(TGT_LENGTHS)
    whole = update(engine, [batch_of([0, 1, 2, 3])], tokens)
    split = update(engine, [batch_of([0, 1]), batch_of([2, 3])], tokens)
    assert_same_update(whole, split)
    # Normalising each micro-batch by its own tokens would be a different update.
    wrong = update(engine, [batch_of([0, 1]), batch_of([2, 3])], tokens // 2)
    name = "decoder.bridge.bias"
    assert not torch.allclose(wrong["grads"][name], whole["grads"][name])


def test_fp32_products_are_set_kept_or_timed(monkeypatch) -> None:
    from seq2seq.model import linear as products
    from seq2seq.model.config import BahdanauConfig, ModelConfig
    from seq2seq.model.seq2seq import build_model
    from seq2seq.runtime import kernels

    model = build_model(ModelConfig(8, 12, attention=BahdanauConfig(size=10)), 30, 40)
    forced = Engine.create("cpu", "fp32", products="pytorch")
    assert forced.choose_products(model, training=True) == "pytorch"
    auto = Engine.create("cpu", "fp32")
    kept = auto.choose_products(model, training=True, kept="pytorch")  # a resumed run's choice
    assert kept == "pytorch"
    timed = []

    def timing(seconds: dict[str, float]):
        def time_products(m, rows=kernels.TRAINING_ROWS, repeats=3, backward=True):
            timed.append((rows, backward))
            return seconds

        return time_products

    if products.onednn_available():
        monkeypatch.setattr(kernels, "time_products", timing({"onednn": 2.0, "pytorch": 1.0}))
        assert auto.choose_products(model, training=True) == "pytorch"
        monkeypatch.setattr(kernels, "time_products", timing({"onednn": 1.0, "pytorch": 2.0}))
        assert auto.choose_products(model, training=False) == "onednn"
        # training times forward and backward; a search's choice, forward at a decoding step's rows
        assert timed == [(kernels.TRAINING_ROWS, True), (kernels.DECODING_ROWS, False)]
    else:
        assert auto.choose_products(model, training=True) == "pytorch"
    assert auto.products_in_use() == auto.kernels.fp32
    # other precisions multiply in PyTorch, whatever the fp32 choice, and leave it untouched
    assert Engine.create("cpu", "bf16").choose_products(model, training=True) == "pytorch"
    assert auto.products_in_use() == auto.kernels.fp32


def test_the_chosen_products_hold_inside_the_engines_scope_only(monkeypatch) -> None:
    """Two engines with different fp32 paths in one process: each multiplies through its own
    inside ``compute``, and nothing changes outside."""
    from seq2seq.model import linear as products

    if not products.onednn_available():
        pytest.skip("this torch has no oneDNN linear kernel")
    monkeypatch.setattr(products, "MIN_WORK", 1)
    seen = []
    op = products._ONEDNN_OP
    monkeypatch.setattr(products, "_ONEDNN_OP", lambda *a: seen.append(1) or op(*a))
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with Engine.create("cpu", "fp32", products="pytorch").compute():
        products.linear(x, w)
    assert seen == []
    with Engine.create("cpu", "fp32", products="onednn").compute():
        products.linear(x, w)
    assert seen == [1]
    products.linear(x, w)  # outside: PyTorch's, as nn.Linear multiplies
    assert seen == [1]


def test_precision_auto_is_set_kept_or_timed(monkeypatch) -> None:
    from seq2seq.model.config import BahdanauConfig, ModelConfig
    from seq2seq.model.seq2seq import build_model
    from seq2seq.runtime import precision as auto

    model = build_model(ModelConfig(8, 12, attention=BahdanauConfig(size=10)), 30, 40)
    vocab = (30, 40)
    assert Engine.create("cpu", "bf16").choose_precision(model, vocab, 64) == Precision.bf16
    kept = Engine.create("cpu", "auto").choose_precision(model, vocab, 64, kept="bf16")
    assert kept == Precision.bf16  # a resumed run's choice
    monkeypatch.setattr(auto, "native_bf16", lambda: False)
    assert auto.fastest_precision(model, vocab, 64) == (Precision.fp32, {})  # not timed
    monkeypatch.setattr(auto, "native_bf16", lambda: True)
    rng, mode = torch.get_rng_state(), model.eval()
    chosen, seconds = auto.fastest_precision(model, vocab, 64)  # really timed, on this CPU
    assert chosen in (Precision.fp32, Precision.bf16) and set(seconds) == {"fp32", "bf16"}
    assert all(s > 0 for s in seconds.values()) and not mode.training
    assert torch.equal(torch.get_rng_state(), rng) and all(
        p.grad is None for p in model.parameters()
    )
    steps = {None: 1.0, torch.bfloat16: 0.6}
    monkeypatch.setattr(auto, "time_training_step", lambda m, v, t, dtype, r, *_: steps[dtype])
    engine = Engine.create("cpu", "auto")
    assert engine.choose_precision(model, vocab, 64) == Precision.bf16 == engine.precision
    steps[torch.bfloat16] = 0.97  # a tie keeps fp32
    assert Engine.create("cpu", "auto").choose_precision(model, vocab, 64) == Precision.fp32


def test_precision_auto_on_cuda_takes_bf16_for_a_graphed_update(monkeypatch) -> None:
    """On CUDA nothing is timed: bf16 where the update is graphed on a GPU with bf16 tensor
    cores (measured faster there), fp32 where it runs eagerly or the GPU lacks them."""
    from seq2seq.model.config import BahdanauConfig, ModelConfig
    from seq2seq.model.seq2seq import build_model
    from seq2seq.runtime import precision as auto

    model = build_model(ModelConfig(8, 12, attention=BahdanauConfig(size=10)), 30, 40)
    timed = []
    monkeypatch.setattr(auto, "time_training_step", lambda *a: timed.append(a) or 1.0)
    capability = [(9, 0)]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: capability[0])

    def chosen(graphed: bool) -> Precision:
        engine = Engine.create("cpu", "auto")
        engine.device = torch.device("cuda")  # the rule only: no GPU is touched
        return engine.choose_precision(model, (30, 40), 64, graphed=graphed)

    assert chosen(graphed=True) == Precision.bf16
    assert chosen(graphed=False) == Precision.fp32
    capability[0] = (7, 5)  # no bf16 tensor cores
    assert chosen(graphed=True) == Precision.fp32
    assert not timed
    # on the CPU the flag changes nothing: the choice is timed there
    monkeypatch.setattr(auto, "native_bf16", lambda: False)
    assert Engine.create("cpu", "auto").choose_precision(model, (30, 40), 64, graphed=True) == (
        Precision.fp32
    )


def test_a_slow_warm_up_pass_ends_the_timing(monkeypatch) -> None:
    """bf16 emulated slowly is not timed for long: a warm-up pass past the limit is the answer."""
    from seq2seq.model.config import BahdanauConfig, ModelConfig
    from seq2seq.model.seq2seq import build_model
    from seq2seq.runtime import precision as auto

    model = build_model(ModelConfig(8, 12, attention=BahdanauConfig(size=10)), 30, 40)
    passes = []
    model.register_forward_hook(lambda *_: passes.append(1))
    auto.time_training_step(model, (30, 40), 64, torch.bfloat16, repeats=2, limit=0.0)
    assert len(passes) == 1
    auto.time_training_step(model, (30, 40), 64, torch.bfloat16, repeats=2)
    assert len(passes) == 1 + 3


def test_precision_auto_is_for_training_only() -> None:
    from hydra import compose, initialize_config_module

    from seq2seq.commands.rules import check_config

    with initialize_config_module("seq2seq.configs", version_base=None):
        check_config(compose("config", ["experiment=smoke", "precision=auto"]))  # training: fine
        evaluate = compose("evaluate", ["run_dir=x", "precision=auto"])
    with pytest.raises(Seq2SeqError, match="precision=auto is chosen when training"):
        check_config(evaluate)


def test_timing_the_products_draws_none_of_the_runs_random_numbers() -> None:
    """products=auto times at start-up: a run that times gives what the path given does (a
    rerun from its config.yaml reproduces it)."""
    from seq2seq.model.linear import Linear
    from seq2seq.runtime.kernels import time_products

    model = torch.nn.Sequential(Linear(8, 4))
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    time_products(model, rows=(4,), repeats=1)
    assert torch.equal(torch.rand(4), expected)
