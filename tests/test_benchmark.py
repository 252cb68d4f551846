"""scripts/benchmark.py --quick end to end: every figure is reported, positive and finite.

No timing is asserted (timings are noisy); the script and module forms both run.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from seq2seq.config import Config, Multi30kConfig
from seq2seq.data.corpus import file_stream, split_files
from seq2seq.data.tokenizer import train_tokenizers
from seq2seq.model.config import LuongConfig, ModelConfig
from seq2seq.model.seq2seq import build_model
from seq2seq.runtime.checkpoint import save_checkpoint
from seq2seq.runtime.profiling import is_operator

REPO = Path(__file__).resolve().parents[1]
# one attention of each data flow: the benchmark measures every one the same way
ATTENTIONS = ("bahdanau", "multihead")
TRAINING_FIGURES = (
    "batch_tokens",
    "mean_target_tokens",
    "mean_sentences",
    "real_share",
    "tokens_per_s",
    "tokens_per_s_min",
    "tokens_per_s_max",
    "flops_per_token",
    "peak_share",
    "peak_rss_mib",
)
DECODING_FIGURES = (
    "sentences_per_s",
    "words_per_s",
    "sentences_per_s_min",
    "sentences_per_s_max",
    "mean_output_len",
    "mean_max_len",
    "flops_per_sentence",
    "peak_share",
    "peak_rss_mib",
)


def benchmark(*args: str, module: bool = False) -> subprocess.CompletedProcess:
    """Run the benchmark from the checkout root, as the README says."""
    entry = ["-m", "scripts.benchmark"] if module else ["scripts/benchmark.py"]
    return subprocess.run(
        [sys.executable, *entry, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


def report_of(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_positive(row: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        value = row[key]
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (key, row)


def assert_profiled(profile: dict) -> None:
    """A profile of real work: operators with time and calls, some of it in matrix products."""
    assert 0 < profile["matrix_share"] < 1 and profile["self_ms"] > 0
    assert profile["calls"] >= profile["outer_calls"] > 0 and profile["units"] > 0
    # operators are counted; ranges around them (autograd, the optimizer step) are not
    top = profile["top"]
    assert top and all((row["calls"] > 0) == is_operator(row["name"]) for row in top)
    assert any(is_operator(row["name"]) for row in top)
    assert sum(row["share"] for row in profile["top"]) <= 1 + 1e-9


@pytest.fixture(scope="module")
def data_args(tmp_path_factory, multi30k_url: str) -> list[str]:
    base = tmp_path_factory.mktemp("benchmark-data")
    root, cache = base / "multi30k", base / "cache"
    return ["--data-source", multi30k_url, "--data-root", str(root), "--cache-dir", str(cache)]


@pytest.mark.slow
def test_quick_benchmark_reports_every_figure(data_args: list[str]) -> None:
    attentions = ["--attention", ",".join(ATTENTIONS)]
    quick = ["--quick", "--threads", "1", "--test-limit", "32"]  # 1 thread: tiny products
    proc = benchmark(*quick, *attentions, *data_args)
    report = report_of(proc)
    assert report["quick"] is True
    assert report["torch"] == torch.__version__
    assert report["threads"] == 1 and report["cpu"]
    assert isinstance(report["native_bf16"], bool) and isinstance(report["amx"], bool)
    assert_positive(report["matmul_peak_gflops"], ("fp32", "bf16"))
    assert_positive(report, ("train_pairs", "train_target_tokens", "peak_rss_mib"))

    rows = report["training"]
    expected = itertools.product(ATTENTIONS, ("fp32", "bf16"), ("peer", "recipe"))
    assert [(r["attention"], r["precision"], r["batch"]) for r in rows] == list(expected)
    for row in rows:
        assert_positive(row, TRAINING_FIGURES)
        assert row["real_share"] <= 1
        assert len(row["windows"]) == report["timing"]["windows"]
    for row in rows:
        if row["batch"] == "peer":  # the budget holding ~1000 real target tokens per batch
            assert row["mean_target_tokens"] <= 1000 < row["batch_tokens"]

    rows = report["decoding"]
    expected = itertools.product(ATTENTIONS, ("fp32", "bf16"), ("greedy", "beam"))
    assert [(r["attention"], r["precision"], r["search"]) for r in rows] == list(expected)
    for row in rows:
        assert row["model"] == "random"
        assert_positive(row, DECODING_FIGURES)
        assert len(row["passes"]) == report["timing"]["passes"]
        assert row["mean_output_len"] <= row["mean_max_len"]
        assert 0 <= row["bleu"] <= 100
    assert "RANDOM models" in proc.stdout  # the table says the models are untrained


def make_run(run_dir: Path, data: Multi30kConfig) -> None:
    """A run folder as training leaves it (config, tokenizers, best.pt), with an untrained model."""
    model_cfg = ModelConfig(
        emb_size=16, hidden_size=16, attention=LuongConfig(size=16, input_feed=False)
    )
    src_tok, tgt_tok = train_tokenizers(
        data, file_stream(*split_files(data, "train"), data.train_limit), run_dir
    )
    model = build_model(OmegaConf.structured(model_cfg), src_tok.vocab_size, tgt_tok.vocab_size)
    save_checkpoint(run_dir / "best.pt", {"model": model.state_dict(), "step": 0})
    config = OmegaConf.structured(Config(data=data, model=model_cfg))
    OmegaConf.save(config, run_dir / "config.yaml")


@pytest.mark.slow
def test_decoding_a_trained_run_as_a_module(tmp_path: Path, data_args: list[str]) -> None:
    source, root, cache = data_args[1::2]
    data = Multi30kConfig(source=source, root=root, cache_dir=cache, train_limit=1000)
    data.tokenizer.vocab_size = 500  # as --quick: the tokenizers come from the cache
    make_run(tmp_path, data)
    args = ["--quick", "--measure", "decoding", "--search", "greedy", "--precision", "fp32"]
    proc = benchmark(*args, "--run-dir", str(tmp_path), "--profile", *data_args, module=True)
    report = report_of(proc)
    assert "training" not in report
    assert list(report["matmul_peak_gflops"]) == ["fp32"]
    rows = report["decoding"]
    assert [(r["attention"], r["search"]) for r in rows] == [("luong", "greedy")]
    for row in rows:
        assert row["model"] == "trained" and row["run_dir"] == str(tmp_path)
        assert row["settings"]["attention"]["input_feed"] is False
        assert_positive(row, DECODING_FIGURES)
        assert_profiled(row["profile"])
    assert f"the trained run {tmp_path}" in proc.stdout
    assert "profile of decoding luong greedy fp32" in proc.stdout


@pytest.mark.slow
def test_bad_input_fails_fast_with_a_clear_message(tmp_path: Path) -> None:
    proc = benchmark("--attention", "bahdanau,luong-nofeed,transformer")
    assert proc.returncode == 2
    assert "transformer" in proc.stderr and "luong-nofeed" in proc.stderr
    proc = benchmark("--quick", "--run-dir", str(tmp_path))  # no config.yaml: not a run folder
    assert proc.returncode == 1
    assert "not a training run or release folder" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_peer_shape_and_impossible_precision(data_args: list[str]) -> None:
    args = ["--quick", "--model", "peer", "--measure", "training", "--batch", "peer"]
    proc = benchmark(*args, "--precision", "fp32", "--profile", *data_args)
    [row] = report_of(proc)["training"]
    assert_profiled(row["profile"])
    assert "profile of training peer fp32 peer" in proc.stdout
    assert row["attention"] == "peer" and row["shape"].startswith(
        "emb 32, encoder 2x32, decoder 64"
    )
    assert_positive(row, TRAINING_FIGURES)
    if not torch.cuda.is_available():
        proc = benchmark(*args, "--precision", "fp16", *data_args)
        assert proc.returncode == 1 and "fp16 needs CUDA" in proc.stderr


@pytest.mark.slow
def test_quick_benchmark_times_graphed_updates_and_decoding_batches(data_args: list[str]) -> None:
    """--cuda-graphs false,true: a row each (on the CPU the fixed-shape update and greedy search
    run eagerly, and no graph is captured), the same translations; --decode-batch 64,1: a
    decoding row per batch size."""
    options = ["--attention", "bahdanau", "--precision", "fp32", "--batch", "peer"]
    options += ["--cuda-graphs", "false,true", "--decode-batch", "64,1", "--search", "greedy"]
    options += ["--test-limit", "16"]  # batch-1 rows decode one sentence at a time
    report = report_of(benchmark("--quick", "--threads", "1", *options, *data_args))
    rows = report["training"]
    assert [r["cuda_graphs"] for r in rows] == ["false", "true"]
    for row in rows:
        assert_positive(row, TRAINING_FIGURES)
        assert row["graphs"] == 0  # no CUDA here
    rows = report["decoding"]
    assert [(r["batch_size"], r["cuda_graphs"]) for r in rows] == [
        (64, "false"),
        (64, "true"),
        (1, "false"),
        (1, "true"),
    ]
    assert rows[0]["bleu"] == rows[1]["bleu"] and rows[2]["bleu"] == rows[3]["bleu"]
    assert [r["shapes"] > 0 for r in rows] == [False, True, False, True]
    for row in rows:
        assert_positive(row, (*DECODING_FIGURES, "ms_per_batch"))


def test_step_kernels_counts_the_graphed_steps() -> None:
    """scripts/step_kernels.py: kernels per time step of the update and of both searches, the
    GRU's gates counted as CUDA's fused cell (once forward, once backward), and no operator
    that launches nothing."""
    cmd = [sys.executable, "scripts/step_kernels.py", "--model", "peer", "--rows", "4"]
    proc = subprocess.run([*cmd, "--source", "6"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout.splitlines()[-1])["models"]
    assert row["update_at_20"] > 20 * row["per_target_step"] > 0
    assert 0 < row["greedy_per_step"] < row["beam5_per_step"]
    for ops in (row["greedy_ops"], row["beam5_ops"]):  # by operator, per step
        assert "linear" in ops and "log_softmax" in ops
        # dropout in eval mode and a cast to a tensor's own dtype hand back their input
        assert "dropout" not in ops and "to" not in ops


def test_search_host_work_times_the_results_of_each_batch(smoke_run: Path, multi30k_dir) -> None:
    """scripts/search_host_work.py: the host's work on each batch's results in the graphed
    searches, timed for greedy and beam search over the test split, and the operators a batch
    dispatches outside the chunks."""
    cmd = [sys.executable, "scripts/search_host_work.py", str(smoke_run), str(multi30k_dir)]
    proc = subprocess.run([*cmd, "--beams", "1,2"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["beam 1", "beam 2"]
    for line in lines:
        assert "16 batches of 64" in line
        assert float(line.split("work ")[1].split(" ms")[0]) > 0
        (counts,) = re.findall(r"chunks (\d+), the results' (\d+)", line)
        outside, results = map(int, counts)
        assert outside > results > 0  # the batch's start, its results among them


@pytest.mark.parametrize("packed", [False, True])
def test_cudnn_rnn_flops_count_the_products_of_the_cpus_gru(packed: bool) -> None:
    """On CUDA the GRU is one cuDNN operator the FLOP counter would count as 0; its count is the
    products the CPU's GRU decomposes into, for the same shapes (a bidirectional 2-layer GRU)."""
    from torch.nn.utils.rnn import pack_padded_sequence
    from torch.utils.flop_counter import FlopCounterMode

    from scripts.speed.machine import cudnn_rnn_backward_flops, cudnn_rnn_flops

    gru = torch.nn.GRU(12, 16, num_layers=2, bidirectional=True)
    x, lengths = torch.randn(7, 5, 12), torch.tensor([7, 7, 6, 3, 2])
    batch_sizes: list[int] = []
    data = x
    if packed:
        data = pack_padded_sequence(x, lengths)
        batch_sizes = data.batch_sizes.tolist()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        gru(data)
    shape = [int(lengths.sum()), 12] if packed else list(x.shape)
    weights = [list(w.shape) for w in gru.all_weights for w in w]
    rest = [3, None, None, None, 3, 16, 0, 2, False, 0.0, True, True, batch_sizes, None]
    forward = cudnn_rnn_flops(shape, weights, *rest)
    assert forward == counter.get_total_flops() > 0
    backward = [None] * 14 + [True, True, batch_sizes, None, None]
    data_only = [True, True, False, False]  # the output mask: no weights' gradients
    assert cudnn_rnn_backward_flops(shape, weights, *backward, [True] * 4) == 2 * forward
    assert cudnn_rnn_backward_flops(shape, weights, *backward, data_only) == forward
