"""Decoding speed: ``decode_corpus`` on the test split, greedy and beam, in batches."""

from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from scripts.speed.choices import (
    SEARCHES,
    Sizes,
    benchmarked_models,
    model_config,
    progress,
    shape_of,
)
from scripts.speed.machine import flop_counter, peak_rss_mib, reset_peaks
from seq2seq.config import DecodeConfig, Multi30kConfig, Precision, TrainConfig
from seq2seq.data.corpus import read_parallel, split_files
from seq2seq.data.dataset import TokenizedCorpus, encode_corpus
from seq2seq.data.stream import from_lists
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.graphed import SearchGraphs
from seq2seq.decoding.inference import score
from seq2seq.decoding.search import decode_corpus, max_lengths
from seq2seq.model.seq2seq import Seq2Seq, build_model
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.profiling import profile_ops
from seq2seq.runtime.run_folder import TrainedRun

RECORD_PASSES = 2  # at most, before the timed passes


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
    graphs: SearchGraphs | None = None,
) -> dict[str, Any]:
    """Sentences/s of ``decode_corpus`` under the engine's autocast (median over passes after a
    counted warm-up pass) in batches of ``batch_size`` (1: the latency of one sentence), FLOPs
    per sentence, output length in pieces and words, BLEU, peak RSS; with ``profile``, the
    operators of one more pass (per output piece). ``graphs``: the search's fixed-shape chunks,
    recorded in passes of their own (timed apart) and replayed in the passes, as a server does."""
    cfg = DecodeConfig(beam_size=beam_size, nbest=1, batch_size=batch_size)
    reset_peaks(engine)
    with flop_counter() as counter, engine.compute():  # also the warm-up, eager
        hyps = decode_corpus(model, test, cfg)
    record_s = _record(engine, model, test, cfg, graphs)
    rates = []
    for _ in range(sizes.passes):
        start = time.perf_counter()
        with engine.compute():
            decode_corpus(model, test, cfg, graphs)  # results on the host after
        rates.append(len(test) / (time.perf_counter() - start))
    max_memory = engine.max_memory_allocated()
    outputs = [nbest[0].tokens for nbest in hyps]
    ops = _profile(engine, model, test, cfg, graphs, outputs) if profile else None
    limits = max_lengths(torch.from_numpy(test.src_lengths), cfg.max_len_a, cfg.max_len_b)
    text = [tgt_tok.decode(tokens) for tokens in outputs]
    flops_per_sentence = counter.get_total_flops() / len(test)
    sentences_per_s = statistics.median(rates)
    return {
        "beam_size": beam_size,
        "batch_size": batch_size,
        "cuda_graphs": "false" if graphs is None else "true",
        "shapes": 0 if graphs is None else graphs.shapes,
        "graphs": 0 if graphs is None else graphs.captured,
        "record_s": record_s,
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


def _record(
    engine: Engine,
    model: Seq2Seq,
    test: TokenizedCorpus,
    cfg: DecodeConfig,
    graphs: SearchGraphs | None,
) -> float:
    """Seconds spent recording the search's graphs, in passes of their own. A chunk is captured
    at its second run, so two passes capture every chunk a pass runs (the longest batch's beam
    chunks run once a pass); a second only where the first captured."""
    start = time.perf_counter()
    for _ in range(RECORD_PASSES if graphs is not None else 0):
        before = graphs.captured
        with engine.compute():
            decode_corpus(model, test, cfg, graphs)
        if graphs.captured == before:
            break
    return time.perf_counter() - start


def _profile(
    engine: Engine,
    model: Seq2Seq,
    test: TokenizedCorpus,
    cfg: DecodeConfig,
    graphs: SearchGraphs | None,
    outputs: list[list[int]],
) -> Any:
    """The operators of one more pass, per output piece (the timed passes' units)."""

    def decode_pass() -> int:
        decode_corpus(model, test, cfg, graphs)
        return sum(map(len, outputs))

    with engine.compute():
        return profile_ops(decode_pass, cuda=engine.device.type == "cuda")


def encode_test_split(
    cfg: Multi30kConfig, src_tok: Tokenizer, tgt_tok: Tokenizer, limit: int | None
) -> tuple[TokenizedCorpus, list[str]]:
    """The configured test split encoded with these tokenizers, and its reference lines."""
    src, refs = read_parallel(*split_files(cfg, "test"), limit)
    pairs = from_lists(src, refs)
    corpus = encode_corpus(pairs, src_tok, tgt_tok, Path(cfg.cache_dir), None, False)
    return corpus, refs


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
    for (
        attention,
        model,
        settings,
    ), precision, search, products, size, graphed in itertools.product(
        models, args.precision, args.search, args.products, args.decode_batch, args.cuda_graphs
    ):
        name = f"decoding {attention} {precision} {search} (batches of {size}, graphs {graphed})"
        name += f" {products}" if len(args.products) > 1 else ""
        progress(f"{name} ...")
        at = Engine(engine.device, Precision(precision), engine.topology, products=products)
        beam = SEARCHES[search]
        decoder = at.for_inference(copy.deepcopy(model))  # as evaluate loads it in this precision
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
            SearchGraphs(at) if graphed == "true" else None,
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
