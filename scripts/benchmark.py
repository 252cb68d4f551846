"""Benchmark of the reference model: training and decoding speed, memory and FLOPs.

It measures whatever the code currently does, through the project's own functions: data from
``read_parallel``/``train_tokenizers``/``encode_corpus``, batches from ``TokenBatchSampler`` and
``collate``, the model from ``build_model``, the training step (``Updater.step``, what
seq2seq-train runs) and ``decode_corpus`` on test_2016_flickr. From the checkout root::

    python scripts/benchmark.py --data-source /path/to/multi30k   # or: python -m scripts.benchmark
    python scripts/benchmark.py --device cuda --precision fp32,bf16,fp16 ...

prints a table, then one JSON line with every figure. ``--quick`` (tiny model and data) is for CI.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import itertools
import json
import math
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from torch.utils.flop_counter import FlopCounterMode

from seq2seq.config import DecodeConfig, Multi30kConfig, Precision, TrainConfig
from seq2seq.data.batching import Batch, TokenBatchSampler, collate
from seq2seq.data.corpus import file_stream, read_parallel, split_files
from seq2seq.data.dataset import TokenizedCorpus, encode_corpus
from seq2seq.data.stream import from_lists
from seq2seq.data.tokenizer import Tokenizer, train_tokenizers
from seq2seq.decoding.inference import TrainedRun, load_run, score
from seq2seq.decoding.search import decode_corpus, max_lengths
from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import AttentionConfig, BahdanauConfig, LuongConfig, ModelConfig
from seq2seq.model.linear import linear, pytorch_products
from seq2seq.model.registry import ATTENTIONS as REGISTRY
from seq2seq.model.seq2seq import Seq2Seq, build_model
from seq2seq.runtime.engine import DEVICES, Engine, check_precision
from seq2seq.runtime.heap import allocator_setting
from seq2seq.runtime.precision import cpu_flags, native_bf16
from seq2seq.runtime.profiling import describe, profile_ops
from seq2seq.training.graphed import Bucket, StaticUpdater, make_updater
from seq2seq.training.updater import Updater

# The reference model (ModelConfig's defaults) with each attention of the registry, and Luong
# without input feeding: its attention config; score, heads and sizes are defaults.
ATTENTIONS: dict[str, Callable[[], AttentionConfig]] = {}
for _name, _kind in REGISTRY.items():
    ATTENTIONS[_name] = _kind.config
    if _kind.config is LuongConfig:
        ATTENTIONS["luong-nofeed"] = partial(LuongConfig, input_feed=False)
# measured unless --attention names others: the global attentions of the three families
MEASURED_BY_DEFAULT = ("bahdanau", "luong", "luong-nofeed", "multihead")
# the attention comparison's other rows (configs/compare/; local_m and local_p above), when named
ATTENTIONS.update(
    {
        "bahdanau-conditional": partial(BahdanauConfig, conditional=True),
        "luong-unscaled": partial(LuongConfig, scale=False),
        "luong-concat": partial(LuongConfig, score="concat"),
        "sparsemax": partial(BahdanauConfig, normalizer="sparsemax"),
        "entmax15": partial(BahdanauConfig, normalizer="entmax15"),
        "coverage": partial(BahdanauConfig, coverage=True),
    }
)
# OpenNMT-py's model in ../shared/peers/opennmt: a 2x256 BiGRU encoder, a 512 GRU decoder,
# embeddings of 256, MLP (additive: Luong concat here) attention with input feeding, a bridge.
PEER = "peer"
MODELS = ("reference", PEER)
MEASURES = ("training", "decoding")
# ~1000 target tokens like the peers' 64 sentences; TrainConfig's; OpenNMT-py's large batches
# (batch_type tokens, batch_size 8192); twice that
BATCHES = ("peer", "recipe", "8192", "16000")
PEER_TOKENS = 1000  # the peers' batches of 64 sentences hold about 967 target tokens
SEARCHES = {"greedy": 1, "beam": DecodeConfig.beam_size}
# fp32 products on the CPU: oneDNN (what the model uses, seq2seq/model/linear.py) or PyTorch's BLAS
PRODUCTS = {"onednn": contextlib.nullcontext, "pytorch": pytorch_products}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# what the benchmark trains and decodes in; int8 is a conversion for inference only, measured
# with seq2seq-evaluate precision=int8 (docs/serving.md)
PRECISIONS = tuple(DTYPES)


@dataclass(frozen=True)
class Sizes:
    """How much is measured: the reference benchmark, or ``--quick`` (tiny model, for CI)."""

    warmup: int  # training batches before timing
    window: int  # training batches per timed window
    windows: int  # timed training windows; the figures are medians over them
    passes: int  # timed decoding passes over the test set; medians too
    train_limit: int | None  # training pairs (None: all 29,000)
    test_limit: int | None  # test sentences decoded (None: all 1,000)
    vocab_size: int | None  # sentencepiece vocabulary (None: the TokenizerConfig default)
    dims: tuple[int, int, int] | None  # (emb, hidden, attention) sizes; None: ModelConfig's
    gemm_seconds: float  # time spent on each matrix shape when measuring the peak


FULL = Sizes(5, 10, 5, 3, None, None, None, None, 1.0)
QUICK = Sizes(1, 1, 2, 1, 1000, 64, 500, (32, 64, 64), 0.05)


# -- configuration -------------------------------------------------------------------------------


def data_config(args: argparse.Namespace, sizes: Sizes) -> Multi30kConfig:
    """Multi30k de->en from ``--data-source`` into ``--data-root``/``--cache-dir``."""
    cfg = Multi30kConfig(source=args.data_source, root=args.data_root, cache_dir=args.cache_dir)
    cfg.train_limit = sizes.train_limit
    if sizes.vocab_size is not None:
        cfg.tokenizer.vocab_size = sizes.vocab_size
    return cfg


def model_config(attention: str, sizes: Sizes) -> ModelConfig:
    """The reference model with one benchmarked attention, or (``peer``) OpenNMT-py's shape."""
    if attention == PEER:
        cfg = ModelConfig(
            emb_size=256,
            hidden_size=512,
            encoder_size=256,
            attention=LuongConfig(size=512, score="concat", input_feed=True),
        )
    else:
        cfg = ModelConfig(attention=ATTENTIONS[attention]())
    if sizes.dims is not None:
        cfg.emb_size, cfg.hidden_size, cfg.attention.size = sizes.dims
        cfg.encoder_size = cfg.encoder_size and cfg.hidden_size // 2
    return cfg


def shape_of(cfg: Any) -> str:
    """The sizes of a model config, in words."""
    encoder = getattr(cfg, "encoder_size", None) or cfg.hidden_size
    return (
        f"emb {cfg.emb_size}, encoder 2x{encoder}, decoder {cfg.hidden_size}, "
        f"{cfg.attention.name} attention {cfg.attention.size}"
    )


def benchmarked_models(args: argparse.Namespace) -> list[str]:
    """The reference model with each ``--attention``, then OpenNMT-py's shape, as ``--model``
    asks."""
    return [
        *(args.attention if "reference" in args.model else []),
        *([PEER] if PEER in args.model else []),
    ]


def peer_batch_tokens(corpus: TokenizedCorpus, target: int, seed: int) -> int:
    """Largest ``batch_tokens`` whose epoch-0 batches hold at most ``target`` target tokens each,
    on average (the budget counts padding and the longer side, so it exceeds ``target``)."""

    def mean_tokens(budget: int) -> float:
        sampler = TokenBatchSampler(corpus.src_lengths, corpus.tgt_lengths, budget, True, seed)
        return corpus.tgt_lengths.sum() / len(sampler.batches(0))

    low, high = target, 4 * target  # a batch never holds more real tokens than its budget
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if mean_tokens(middle) <= target else (low, middle - 1)
    return low


# -- machine ---------------------------------------------------------------------------------------


def machine_info(engine: Engine) -> dict[str, Any]:
    """torch version, threads, CPU model and whether it multiplies bf16 natively; the device."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": cpu,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": native_bf16(),
        "amx": "amx_tile" in cpu_flags(),
        "device": engine.describe().split(",")[0],
        "memory": allocator_setting(),  # what Engine.create did with the allocator
    }


def reset_peak_rss() -> bool:
    """Restart the kernel's peak-RSS mark at the current RSS (Linux); False where impossible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mib() -> float:
    """Peak resident memory since the last reset (VmHWM), else of the whole process."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024


def matmul_peak(
    engine: Engine, dtype: torch.dtype, model: ModelConfig, vocab: int, seconds: float
) -> float:
    """The device's matrix-multiply limit in GFLOP/s: the best product of the model's own kind
    (``seq2seq.model.linear``) over its own shapes (64 rows: one decoder step; 1000 rows: a
    batch's tokens at once)."""
    h, a = model.hidden_size, model.attention.size
    best = 0.0
    for m, (k, n) in itertools.product((64, 1000), ((h, 3 * h), (2 * h, a), (h, vocab))):
        x = torch.randn(m, k).to(engine.device, dtype)
        w = torch.randn(n, k).to(engine.device, dtype)
        linear(x, w)  # warm-up
        times: list[float] = []
        while len(times) < 2 or (sum(times) < seconds and len(times) < 200):
            engine.synchronize()
            start = time.perf_counter()
            linear(x, w)
            engine.synchronize()
            times.append(time.perf_counter() - start)
        best = max(best, 2 * m * k * n / min(times) / 1e9)
    return best


def gru_flops(x: Sequence[int], *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """FLOPs of ``aten.gru``, which runs as one op under inference mode (FlopCounterMode does not
    know it): 2 x positions x weight-matrix entries. Shapes: ``gru.input`` [B, T, in] (then hx,
    params), ``gru.data`` packed [positions, in] (then batch_sizes, hx, params)."""
    packed = len(x) == 2
    positions, params = (x[0], args[2]) if packed else (x[0] * x[1], args[1])
    return 2 * positions * sum(math.prod(p) for p in params if len(p) == 2)


def onednn_linear_flops(x: Sequence[int], weight: Sequence[int], *args: Any, **kwargs: Any) -> int:
    """FLOPs of oneDNN's linear: 2 x rows x in x out (x [..., in], weight [out, in])."""
    return 2 * math.prod(x) * weight[0]


def flop_counter() -> FlopCounterMode:
    """torch's FLOP counter (matrix products), taught the fused inference GRU and oneDNN's
    linear."""
    mapping = {torch.ops.aten.gru: gru_flops}
    if hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        mapping[torch.ops.mkldnn._linear_pointwise] = onednn_linear_flops
    return FlopCounterMode(display=False, custom_mapping=mapping)


# -- measurements ----------------------------------------------------------------------------------


def run_updates(
    engine: Engine,
    updater: Updater | StaticUpdater,
    corpus: TokenizedCorpus,
    batches: Sequence[np.ndarray],
) -> int:
    """Collate and apply each batch as the training loop does (one batch per update, prepared
    one ahead); returns the target tokens, after the device has finished."""

    def prepare(ids: np.ndarray) -> Batch:
        return engine.to_device(collate(corpus, ids))

    tokens = 0
    for batch in engine.prefetch(batches, prepare):
        updater.step([batch], batch.ntokens)
        tokens += batch.ntokens
    engine.synchronize()
    return tokens


def measure_training(
    engine: Engine,
    model_cfg: ModelConfig,
    tcfg: TrainConfig,
    train: TokenizedCorpus,
    vocab: tuple[int, int],
    sizes: Sizes,
    peak_gflops: float,
    profile: bool = False,
) -> dict[str, Any]:
    """Target tokens/s of forward + backward + clipping + Adam, median over timed windows of
    epoch-0 batches after a warm-up; FLOPs per target token, batch make-up, peak RSS and (on
    CUDA) peak device memory; with ``profile``, the operators of one more window."""
    gc.collect()
    reset_peak_rss()
    engine.reset_peak_memory()
    torch.manual_seed(tcfg.seed)
    model = build_model(OmegaConf.structured(model_cfg), *vocab)
    updater = make_updater(engine, model, tcfg)
    updater.model.train()
    sampler = TokenBatchSampler(
        train.src_lengths, train.tgt_lengths, tcfg.batch_tokens, shuffle=True, seed=tcfg.seed
    )
    epoch = sampler.batches(0)
    needed = sizes.warmup + sizes.windows * sizes.window
    order = list(itertools.islice(itertools.cycle(epoch), needed))
    start = time.perf_counter()
    if isinstance(updater, StaticUpdater):  # every bucket's graph captured before timing
        run_updates(engine, updater, train, bucket_warmup(train, epoch))
    capture_s = time.perf_counter() - start
    run_updates(engine, updater, train, order[: sizes.warmup])
    windows = [order[i : i + sizes.window] for i in range(sizes.warmup, needed, sizes.window)]
    rates = []
    for batches in windows:
        start = time.perf_counter()
        tokens = run_updates(engine, updater, train, batches)
        rates.append(tokens / (time.perf_counter() - start))
    max_memory = engine.max_memory_allocated()
    counting = updater  # a replayed graph dispatches no operator: count the eager update
    if isinstance(updater, StaticUpdater) and updater.graphs:
        counting = Updater(engine, copy.deepcopy(updater.module), tcfg)
    with flop_counter() as counter:  # the first window again, counted, not timed
        counted = run_updates(engine, counting, train, windows[0])
    flops_per_token = counter.get_total_flops() / counted
    ops = profile_ops(lambda: run_updates(engine, updater, train, windows[0])) if profile else None
    tokens_per_s = statistics.median(rates)
    lengths = train.tgt_lengths
    slots = sum(len(ids) * int(lengths[ids].max()) for ids in epoch)  # padded target positions
    return {
        "batch_tokens": tcfg.batch_tokens,
        "cuda_graphs": tcfg.cuda_graphs,
        "graphs": len(getattr(updater, "graphs", {})),
        "capture_s": capture_s,
        "batches_per_epoch": len(epoch),
        "mean_target_tokens": float(lengths.sum() / len(epoch)),
        "mean_sentences": len(lengths) / len(epoch),
        "real_share": float(lengths.sum() / slots),
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_min": min(rates),
        "tokens_per_s_max": max(rates),
        "windows": rates,
        "flops_per_token": flops_per_token,
        "peak_share": flops_per_token * tokens_per_s / (peak_gflops * 1e9),
        "peak_rss_mib": peak_rss_mib(),
        **({"max_memory_allocated_mib": max_memory / 2**20} if max_memory is not None else {}),
        **({"profile": ops.to_dict()} if ops is not None else {}),
    }


def bucket_warmup(corpus: TokenizedCorpus, epoch: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Two batches of each bucket of ``epoch``: a warm-up and a capture for the graphed update."""
    seen: dict[Bucket, list[np.ndarray]] = {}
    for ids in epoch:
        taken = seen.setdefault(Bucket.of(collate(corpus, ids)), [])
        if len(taken) < 2:
            taken.append(ids)
    return [ids for taken in seen.values() for ids in taken]


def measure_decoding(
    engine: Engine,
    model: Seq2Seq,
    test: TokenizedCorpus,
    refs: list[str],
    tgt_tok: Tokenizer,
    beam_size: int,
    sizes: Sizes,
    peak_gflops: float,
    profile: bool = False,
    batch_size: int = DecodeConfig.batch_size,
) -> dict[str, Any]:
    """Sentences/s of ``decode_corpus`` under the engine's autocast (median over passes after a
    counted warm-up pass) in batches of ``batch_size`` (1: the latency of one sentence), FLOPs
    per sentence, output length in pieces and words, BLEU, peak RSS; with ``profile``, the
    operators of one more pass (per output piece)."""
    cfg = DecodeConfig(beam_size=beam_size, nbest=1, batch_size=batch_size)
    gc.collect()
    reset_peak_rss()
    engine.reset_peak_memory()
    with flop_counter() as counter, engine.autocast():  # also the warm-up
        hyps = decode_corpus(model, test, cfg)
    rates = []
    for _ in range(sizes.passes):
        start = time.perf_counter()
        with engine.autocast():
            decode_corpus(model, test, cfg)  # results on the host after
        rates.append(len(test) / (time.perf_counter() - start))
    max_memory = engine.max_memory_allocated()
    outputs = [nbest[0].tokens for nbest in hyps]

    def decode_pass() -> int:
        """One more pass; its units are the output pieces (the same as the timed passes')."""
        decode_corpus(model, test, cfg)
        return sum(map(len, outputs))

    ops = None
    if profile:
        with engine.autocast():
            ops = profile_ops(decode_pass)
    limits = max_lengths(torch.from_numpy(test.src_lengths), cfg.max_len_a, cfg.max_len_b)
    text = [tgt_tok.decode(tokens) for tokens in outputs]
    flops_per_sentence = counter.get_total_flops() / len(test)
    sentences_per_s = statistics.median(rates)
    return {
        "beam_size": beam_size,
        "batch_size": batch_size,
        "ms_per_batch": 1e3 * batch_size / sentences_per_s,
        "sentences": len(test),
        "sentences_per_s": sentences_per_s,
        "sentences_per_s_min": min(rates),
        "sentences_per_s_max": max(rates),
        "passes": rates,
        "mean_output_len": statistics.mean(map(len, outputs)),
        "mean_output_words": sum(len(line.split()) for line in text) / len(test),
        "words_per_s": sum(len(line.split()) for line in text) / len(test) * sentences_per_s,
        "mean_max_len": float(limits.double().mean()),
        "bleu": score(text, refs).bleu,
        "flops_per_sentence": flops_per_sentence,
        "peak_share": flops_per_sentence * sentences_per_s / (peak_gflops * 1e9),
        "peak_rss_mib": peak_rss_mib(),
        **({"max_memory_allocated_mib": max_memory / 2**20} if max_memory is not None else {}),
        **({"profile": ops.to_dict()} if ops is not None else {}),
    }


def encode_test_split(
    cfg: Multi30kConfig, src_tok: Tokenizer, tgt_tok: Tokenizer, limit: int | None
) -> tuple[TokenizedCorpus, list[str]]:
    """The configured test split encoded with these tokenizers, and its reference lines."""
    src, refs = read_parallel(*split_files(cfg, "test"), limit)
    pairs = from_lists(src, refs)
    corpus = encode_corpus(pairs, src_tok, tgt_tok, Path(cfg.cache_dir), None, False)
    return corpus, refs


# -- the run -------------------------------------------------------------------------------------


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def model_facts(
    reference: ModelConfig, data: Multi30kConfig, src_tok: Tokenizer, tgt_tok: Tokenizer
) -> dict[str, Any]:
    """The measured model's shape, as the report gives it."""
    return {
        "emb_size": reference.emb_size,
        "hidden_size": reference.hidden_size,
        "encoder_size": reference.encoder_size or reference.hidden_size,
        "encoder_layers": reference.encoder_layers,
        "attention_size": reference.attention.size,
        "dropout": reference.dropout,
        "tokenizer": data.tokenizer.model_type.value,
        "src_vocab": src_tok.vocab_size,
        "tgt_vocab": tgt_tok.vocab_size,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every selected measurement; returns the report (the JSON line)."""
    sizes = QUICK if args.quick else FULL
    if args.dims is not None:
        sizes = replace(sizes, dims=args.dims)
    if args.repeats:
        sizes = replace(sizes, windows=args.repeats, passes=args.repeats)
    if args.test_limit:
        sizes = replace(sizes, test_limit=args.test_limit)
    engine = Engine.create(args.device, Precision.fp32, args.threads, TrainConfig.seed)
    engine.keep_freed_memory()  # as training does
    if args.precision is None:  # what this device can run
        args.precision = [p for p in PRECISIONS if p != "fp16" or engine.device.type == "cuda"]
    for precision in args.precision:  # an impossible precision fails before any work
        check_precision(Precision(precision), engine.device)
    trained = load_run(args.run_dir, engine=engine) if args.run_dir else None  # fails first
    per_phase = reset_peak_rss()
    data = data_config(args, sizes)
    with tempfile.TemporaryDirectory(prefix="seq2seq-benchmark-") as workdir:
        pairs = file_stream(*split_files(data, "train"), data.train_limit)
        src_tok, tgt_tok = train_tokenizers(data, pairs, Path(workdir))
        train = encode_corpus(pairs, src_tok, tgt_tok, Path(data.cache_dir), data.max_len, True)
        reference = model_config(benchmarked_models(args)[0], sizes)
        report: dict[str, Any] = {
            **machine_info(engine),
            "quick": args.quick,
            "peak_rss_scope": "phase" if per_phase else "process",
            "model": model_facts(reference, data, src_tok, tgt_tok),
            "train_pairs": len(train),
            "train_target_tokens": int(train.tgt_lengths.sum()),
            "timing": {k: getattr(sizes, k) for k in ("warmup", "window", "windows", "passes")},
        }
        needed = set(args.precision)
        peaks = {
            p: matmul_peak(engine, DTYPES[p], reference, tgt_tok.vocab_size, sizes.gemm_seconds)
            for p in PRECISIONS
            if p in needed
        }
        report["matmul_peak_gflops"] = peaks
        progress(f"matmul peak GFLOP/s: {peaks}")
        if "training" in args.measure:
            vocab = (src_tok.vocab_size, tgt_tok.vocab_size)
            report["training"] = training_rows(engine, args, sizes, train, vocab, peaks)
        if "decoding" in args.measure:
            tokenizers = (src_tok, tgt_tok)
            report["decoding"] = decoding_rows(
                engine, args, trained, data, sizes, tokenizers, peaks
            )
    phases = [*report.get("training", []), *report.get("decoding", [])]
    report["peak_rss_mib"] = max((row["peak_rss_mib"] for row in phases), default=peak_rss_mib())
    return report


def training_rows(
    engine: Engine,
    args: argparse.Namespace,
    sizes: Sizes,
    train: TokenizedCorpus,
    vocab: tuple[int, int],
    peaks: dict[str, float],
) -> list[dict[str, Any]]:
    """One row per attention x precision x batch size (the peers' ~1000 tokens, the recipe's,
    large ones) x products x CUDA graphs (false, true)."""
    budgets = {
        "peer": peer_batch_tokens(train, PEER_TOKENS, TrainConfig.seed),
        "recipe": TrainConfig.batch_tokens,
        "8192": 8192,
        "16000": 16000,
    }
    rows = []
    for attention, precision, batch, products, graphs in itertools.product(
        benchmarked_models(args), args.precision, args.batch, args.products, args.cuda_graphs
    ):
        model = model_config(attention, sizes)
        tcfg = TrainConfig(batch_tokens=budgets[batch], threads=args.threads, cuda_graphs=graphs)
        name = f"training {attention} {precision} {batch} (batch_tokens {tcfg.batch_tokens})"
        name += f" {products}" if len(args.products) > 1 else ""
        name += " graphed" if graphs == "true" else ""
        progress(f"{name} ...")
        at = Engine(engine.device, Precision(precision), engine.topology)
        with PRODUCTS[products]():
            row = measure_training(
                at, model, tcfg, train, vocab, sizes, peaks[precision], args.profile
            )
        rows.append(
            {
                "attention": attention,
                "precision": precision,
                "batch": batch,
                "products": products,
                "shape": shape_of(model),
                **row,
            }
        )
        progress(f"{name}: {row['tokens_per_s']:,.0f} target tokens/s")
    return rows


def decoding_models(
    engine: Engine,
    args: argparse.Namespace,
    trained: TrainedRun | None,
    data: Multi30kConfig,
    sizes: Sizes,
    tokenizers: tuple[Tokenizer, Tokenizer],
) -> tuple[list[tuple[str, Any, dict[str, Any]]], list, list[str], Tokenizer]:
    """The models to decode with (the ``trained`` run, else a random one per attention), the
    encoded test split, its references and the target tokenizer."""
    if trained is not None:
        langs = {"src_lang": trained.cfg.data.src_lang, "tgt_lang": trained.cfg.data.tgt_lang}
        run_data = replace(data, **langs)
        test, refs = encode_test_split(run_data, trained.src_tok, trained.tgt_tok, sizes.test_limit)
        settings = {
            "model": "trained",
            "run_dir": str(trained.run_dir),
            "checkpoint": str(trained.checkpoint),
            "settings": OmegaConf.to_container(trained.cfg.model),
            "trained_precision": trained.cfg.precision,
            "shape": shape_of(trained.cfg.model),
        }
        return (
            [(trained.cfg.model.attention.name, trained.model, settings)],
            test,
            refs,
            trained.tgt_tok,
        )
    src_tok, tgt_tok = tokenizers
    test, refs = encode_test_split(data, src_tok, tgt_tok, sizes.test_limit)
    models = []
    for attention in benchmarked_models(args):
        torch.manual_seed(TrainConfig.seed)
        cfg = OmegaConf.structured(model_config(attention, sizes))
        model = build_model(cfg, src_tok.vocab_size, tgt_tok.vocab_size)
        model.to(engine.device).eval()
        models.append((attention, model, {"model": "random", "shape": shape_of(cfg)}))
    return models, test, refs, tgt_tok


def decoding_rows(
    engine: Engine,
    args: argparse.Namespace,
    trained: TrainedRun | None,
    data: Multi30kConfig,
    sizes: Sizes,
    tokenizers: tuple[Tokenizer, Tokenizer],
    peaks: dict[str, float],
) -> list[dict[str, Any]]:
    """Greedy and beam rows in each precision for the ``trained`` run, else for each random
    model."""
    models, test, refs, tokenizer = decoding_models(engine, args, trained, data, sizes, tokenizers)
    rows = []
    for (attention, model, settings), precision, search, products, size in itertools.product(
        models, args.precision, args.search, args.products, args.decode_batch
    ):
        name = f"decoding {attention} {precision} {search} (batches of {size})"
        name += f" {products}" if len(args.products) > 1 else ""
        progress(f"{name} ...")
        at = Engine(engine.device, Precision(precision), engine.topology)
        beam = SEARCHES[search]
        decoder = at.for_inference(copy.deepcopy(model))  # as evaluate loads it in this precision
        with PRODUCTS[products]():
            row = measure_decoding(
                at,
                decoder,
                test,
                refs,
                tokenizer,
                beam,
                sizes,
                peaks[precision],
                args.profile,
                size,
            )
        rows.append(
            {
                "attention": attention,
                "precision": precision,
                "search": search,
                "products": products,
                **settings,
                **row,
            }
        )
        progress(f"{name}: {row['sentences_per_s']:,.1f} sentences/s")
    return rows


# -- output --------------------------------------------------------------------------------------


TRAINING_COLUMNS = (
    ("attention", "<13", lambda r: r["attention"]),
    ("prec", "<5", lambda r: r["precision"]),
    ("products", "<9", lambda r: r["products"]),
    ("batch", "<7", lambda r: r["batch"]),
    ("graphs", "<6", lambda r: r.get("cuda_graphs", "false")),
    ("budget", ">7", lambda r: f"{r['batch_tokens']}"),
    ("tok/b", ">7", lambda r: f"{r['mean_target_tokens']:.0f}"),
    ("sent/b", ">7", lambda r: f"{r['mean_sentences']:.1f}"),
    ("real", ">5", lambda r: f"{r['real_share']:.0%}"),
    ("tok/s", ">9", lambda r: f"{r['tokens_per_s']:,.0f}"),
    ("min", ">8", lambda r: f"{r['tokens_per_s_min']:,.0f}"),
    ("max", ">8", lambda r: f"{r['tokens_per_s_max']:,.0f}"),
    ("MFLOP/tok", ">10", lambda r: f"{r['flops_per_token'] / 1e6:.1f}"),
    ("%peak", ">7", lambda r: f"{r['peak_share']:.1%}"),
    ("RSS MiB", ">9", lambda r: f"{r['peak_rss_mib']:,.0f}"),
)
DECODING_COLUMNS = (
    ("attention", "<19", lambda r: r["attention"]),
    ("search", "<7", lambda r: r["search"]),
    ("batch", ">5", lambda r: r.get("batch_size", DecodeConfig.batch_size)),
    ("ms/batch", ">9", lambda r: f"{r.get('ms_per_batch', float('nan')):.1f}"),
    ("prec", "<5", lambda r: r["precision"]),
    ("products", "<9", lambda r: r["products"]),
    ("sent/s", ">8", lambda r: f"{r['sentences_per_s']:,.1f}"),
    ("min", ">8", lambda r: f"{r['sentences_per_s_min']:,.1f}"),
    ("max", ">8", lambda r: f"{r['sentences_per_s_max']:,.1f}"),
    ("out len", ">8", lambda r: f"{r['mean_output_len']:.1f}"),
    ("words", ">6", lambda r: f"{r['mean_output_words']:.1f}"),
    ("words/s", ">8", lambda r: f"{r['words_per_s']:,.0f}"),
    ("max len", ">8", lambda r: f"{r['mean_max_len']:.1f}"),
    ("BLEU", ">6", lambda r: f"{r['bleu']:.1f}"),
    ("GFLOP/sent", ">11", lambda r: f"{r['flops_per_sentence'] / 1e9:.3f}"),
    ("%peak", ">7", lambda r: f"{r['peak_share']:.1%}"),
    ("RSS MiB", ">9", lambda r: f"{r['peak_rss_mib']:,.0f}"),
)


def print_rows(columns: Sequence[tuple[str, str, Any]], rows: list[dict[str, Any]]) -> None:
    """A header and one line per row; a column is (header, alignment and width, cell text)."""
    print("".join(f"{header:{spec}}" for header, spec, _ in columns))
    for row in rows:
        print("".join(f"{cell(row):{spec}}" for _, spec, cell in columns))


def print_table(report: dict[str, Any]) -> None:
    """The human-readable summary of the report."""
    peaks = ", ".join(f"{p} {g:,.1f}" for p, g in report["matmul_peak_gflops"].items())
    model, timing = report["model"], report["timing"]
    print(
        f"torch {report['torch']}, {report['threads']} threads, {report['cpu']} "
        f"({report['cpu_capability']}; native bf16: {report['native_bf16']}, "
        f"AMX: {report['amx']})"
    )
    print(f"matmul peak (best product over the model's shapes), GFLOP/s: {peaks}")
    print(f"memory: {report['memory']}")
    print(
        f"model: emb {model['emb_size']}, BiGRU {model['hidden_size']}/direction x "
        f"{model['encoder_layers']}, attention {model['attention_size']}, dropout "
        f"{model['dropout']}; {model['tokenizer']} vocab {model['src_vocab']}/"
        f"{model['tgt_vocab']}; {report['train_pairs']:,} training pairs, "
        f"{report['train_target_tokens']:,} target tokens; RSS: peak per "
        f"{report['peak_rss_scope']}"
    )
    if "training" in report:
        print(
            f"\ntraining: target tokens (incl. EOS) per second of forward + backward + clip + "
            f"Adam, median of {timing['windows']} windows of {timing['window']} batches after "
            f"{timing['warmup']} warm-up batches; tok/b, sent/b, real: per batch over an epoch"
        )
        print_rows(TRAINING_COLUMNS, report["training"])
    if "decoding" in report:
        rows = report["decoding"]
        if rows[0]["model"] == "trained":
            what = f"the trained run {rows[0]['run_dir']}"
        else:
            what = "RANDOM models (max-length output: pessimistic; --run-dir for a trained one)"
        print(
            f"\ndecoding {rows[0]['sentences']} test sentences (each precision's autocast, "
            f"batches of "
            f"{DecodeConfig.batch_size}, max length {DecodeConfig.max_len_a} x source + "
            f"{DecodeConfig.max_len_b}), median of {timing['passes']} passes: {what}"
        )
        print_rows(DECODING_COLUMNS, rows)
    print_profiles(report)


def print_profiles(report: dict[str, Any]) -> None:
    """Each profiled row's operators (``--profile``)."""
    for kind, unit, keys in (
        ("training", "target tokens", ("attention", "precision", "batch", "products")),
        ("decoding", "output pieces", ("attention", "search", "precision", "products")),
    ):
        for row in report.get(kind, []):
            if "profile" in row:
                what = " ".join([kind, *(str(row[key]) for key in keys)])
                print("\n" + "\n".join(describe(row["profile"], what, unit)))


def comma_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """argparse type: a comma-separated subset of ``choices``, in the given order."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in choices]
        if unknown or not items:
            raise argparse.ArgumentTypeError(
                f"{text!r}: choose from {', '.join(choices)} (comma-separated)"
            )
        return list(dict.fromkeys(items))

    return parse


def at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        if not text.strip().lstrip("-").isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= {minimum}")
        return int(text)

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Multi30kConfig()
    parser.add_argument("--data-source", default=defaults.source, help="URL or local Multi30k")
    parser.add_argument("--data-root", default=defaults.root, help="download folder")
    parser.add_argument("--cache-dir", default=defaults.cache_dir, help="tokenizer/ids cache")
    lists = {  # option: (choices, help); every choice is measured unless a subset is given
        "--model": (
            MODELS,
            "reference: the default model with each --attention; peer: "
            "OpenNMT-py's shape (2x256 encoder, mlp attention, input feeding)",
        ),
        "--attention": (tuple(ATTENTIONS), "luong: general score with input feeding"),
        "--precision": (
            PRECISIONS,
            "training and decoding under its autocast (default: what the device runs)",
        ),
        "--measure": (MEASURES, "what to measure"),
        "--batch": (BATCHES, f"peer: ~{PEER_TOKENS} target tokens; recipe: train.batch_tokens"),
        "--search": (tuple(SEARCHES), f"greedy, beam {DecodeConfig.beam_size}"),
        "--products": (
            tuple(PRODUCTS),
            "fp32 products on the CPU: oneDNN (the model's) or PyTorch's BLAS, to compare",
        ),
    }
    for option, (choices, text) in lists.items():
        help_text = f"comma-separated subset of {','.join(choices)}; {text}"
        default = {
            "--precision": None,
            "--model": ["reference"],
            "--batch": ["peer", "recipe"],
            "--products": ["onednn"],
            "--attention": list(MEASURED_BY_DEFAULT),
        }.get(option, list(choices))
        parser.add_argument(option, type=comma_list(choices), default=default, help=help_text)
    parser.add_argument(
        "--cuda-graphs",
        type=comma_list(("false", "true")),
        default=["false"],
        help="training updates eager (false) or fixed-shape and, on CUDA, graphed (true)",
    )
    parser.add_argument(
        "--decode-batch",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[DecodeConfig.batch_size],
        help="sentences per decoding batch, comma-separated (1: one sentence's latency)",
    )
    parser.add_argument("--device", default="auto", help=f"{DEVICES} (default auto)")
    parser.add_argument("--run-dir", help="decode with this trained run (best.pt), not random")
    parser.add_argument(
        "--threads", type=at_least(0), default=TrainConfig.threads, help="0: the cores available"
    )
    parser.add_argument(
        "--repeats", type=at_least(1), help="timed windows and passes (default 5 and 3)"
    )
    parser.add_argument(
        "--test-limit", type=at_least(1), help="decode only the first N test sentences"
    )
    parser.add_argument("--quick", action="store_true", help="tiny model and data, for CI")
    parser.add_argument(
        "--dims",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        help="EMB,HIDDEN,ATTENTION sizes of the reference model (the attention comparison's: "
        "256,256,256)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile each row's operators (torch.profiler): top by self time, the share "
        "in matrix products, operator calls per token",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        report = run(args)
    except Seq2SeqError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print_table(report)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
