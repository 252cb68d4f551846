"""The benchmark's command line: what to measure, the run, the table and the JSON line."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from scripts.speed.choices import (
    ATTENTIONS,
    BATCHES,
    DTYPES,
    FULL,
    MEASURED_BY_DEFAULT,
    MEASURES,
    MODELS,
    PEER_TOKENS,
    PRECISIONS,
    PRODUCTS,
    QUICK,
    SEARCHES,
    benchmarked_models,
    data_config,
    model_config,
    progress,
)
from scripts.speed.decoding import decoding_rows
from scripts.speed.machine import machine_info, matmul_peak, peak_rss_mib, reset_peak_rss
from scripts.speed.table import print_table
from scripts.speed.training import training_rows
from seq2seq.config import DecodeConfig, Multi30kConfig, Precision, TrainConfig
from seq2seq.data.corpus import file_stream, split_files
from seq2seq.data.dataset import encode_corpus
from seq2seq.data.tokenizer import Tokenizer, train_tokenizers
from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import ModelConfig
from seq2seq.runtime.engine import DEVICES, Engine, check_precision
from seq2seq.runtime.profiling import ready_for_graphs
from seq2seq.runtime.run_folder import load_run


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
    if args.profile and engine.device.type == "cuda":
        ready_for_graphs()  # before any row captures a graph
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


def _add_choices(parser: argparse.ArgumentParser) -> None:
    """The options that each take a comma-separated subset of their choices."""
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
            PRODUCTS,
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="The reference model's training and decoding speed, memory and FLOPs."
    )
    defaults = Multi30kConfig()
    parser.add_argument("--data-source", default=defaults.source, help="URL or local Multi30k")
    parser.add_argument("--data-root", default=defaults.root, help="download folder")
    parser.add_argument("--cache-dir", default=defaults.cache_dir, help="tokenizer/ids cache")
    _add_choices(parser)
    parser.add_argument(
        "--cuda-graphs",
        type=comma_list(("false", "true")),
        default=["false"],
        help="training updates and searches eager (false) or fixed-shape and, on CUDA, graphed",
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
