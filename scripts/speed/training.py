"""Training speed: updates as seq2seq-train applies them (eager or graphed), timed in windows."""

from __future__ import annotations

import argparse
import copy
import functools
import itertools
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from scripts.speed.choices import (
    PEER_TOKENS,
    Sizes,
    benchmarked_models,
    model_config,
    peer_batch_tokens,
    progress,
    shape_of,
)
from scripts.speed.machine import flop_counter, peak_rss_mib, reset_peaks
from seq2seq.config import Precision, TrainConfig
from seq2seq.data.batching import Batch, TokenBatchSampler, collate
from seq2seq.data.dataset import TokenizedCorpus
from seq2seq.model.config import ModelConfig
from seq2seq.model.seq2seq import build_model
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.profiling import profile_ops
from seq2seq.training.graphed import Bucket, StaticUpdater, make_updater
from seq2seq.training.updater import Updater


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
    reset_peaks(engine)
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
    capture_s = _capture(engine, updater, train, epoch, tcfg.batch_tokens)
    run_updates(engine, updater, train, order[: sizes.warmup])
    windows = [order[i : i + sizes.window] for i in range(sizes.warmup, needed, sizes.window)]
    rates = []
    for batches in windows:
        start = time.perf_counter()
        tokens = run_updates(engine, updater, train, batches)
        rates.append(tokens / (time.perf_counter() - start))
    max_memory = engine.max_memory_allocated()
    flops_per_token = _flops_per_token(engine, updater, tcfg, train, windows[0])
    ops = None
    if profile:
        work = functools.partial(run_updates, engine, updater, train, windows[0])
        ops = profile_ops(work, cuda=engine.device.type == "cuda")
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


def _capture(
    engine: Engine,
    updater: Updater | StaticUpdater,
    train: TokenizedCorpus,
    epoch: Sequence[np.ndarray],
    budget: int,
) -> float:
    """Seconds to capture every bucket's graph before timing (0 for an eager updater)."""
    if not isinstance(updater, StaticUpdater):
        return 0.0
    captures = bucket_warmup(train, epoch, budget)
    start = time.perf_counter()
    run_updates(engine, updater, train, captures)
    return time.perf_counter() - start


def _flops_per_token(
    engine: Engine,
    updater: Updater | StaticUpdater,
    tcfg: TrainConfig,
    train: TokenizedCorpus,
    window: list[np.ndarray],
) -> float:
    """FLOPs per target token of the first window again, counted, not timed; a replayed graph
    dispatches no operator, so the eager update of the same weights is counted."""
    counting = updater
    if isinstance(updater, StaticUpdater) and updater.graphs:
        counting = Updater(engine, copy.deepcopy(updater.module), tcfg)
    with flop_counter() as counter:
        counted = run_updates(engine, counting, train, window)
    return counter.get_total_flops() / counted


def bucket_warmup(
    corpus: TokenizedCorpus, epoch: Sequence[np.ndarray], budget: int
) -> list[np.ndarray]:
    """Two batches of each bucket of ``epoch``: a warm-up and a capture for the graphed update."""
    seen: dict[Bucket, list[np.ndarray]] = {}
    for ids in epoch:
        taken = seen.setdefault(Bucket.of(collate(corpus, ids), budget), [])
        if len(taken) < 2:
            taken.append(ids)
    return [ids for taken in seen.values() for ids in taken]


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
        at = Engine(engine.device, Precision(precision), engine.topology, products=products)
        row = measure_training(at, model, tcfg, train, vocab, sizes, peaks[precision], args.profile)
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
