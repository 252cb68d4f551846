"""Decoding speed of one release on the CPU: onnxruntime (the lite translator, fp32 and int8 graphs)
against torch (fp32, bf16 autocast, int8 dynamic quantization), greedy and beam 5, one sentence
at a time (latency: the serving and app case) and in evaluate's batches (throughput). Variants
run back to back in every repeat; each figure is the median over the repeats. From the checkout
root, on a quiet machine::

    PYTHONPATH=lite python scripts/deploy_speed.py releases/de-en --source test.de \\
        --threads 2 --repeats 3 --latency-sentences 100

prints a markdown table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from omegaconf import OmegaConf
from seq2seq_lite import Translator as LiteTranslator

from seq2seq.commands.configs import InferenceConfig
from seq2seq.config import DecodeConfig, Precision
from seq2seq.decoding.inference import Translator, open_model
from seq2seq.runtime.engine import inference_engine

VARIANTS = ["torch fp32", "torch bf16", "torch int8", "onnxruntime fp32", "onnxruntime int8"]


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def translator(release: str, variant: str, beam: int, batch: int, threads: int) -> Callable:
    """A function of a list of sentences that translates them with ``variant``."""
    runtime, precision = variant.split()
    if runtime == "onnxruntime":
        lite = LiteTranslator.load(
            release, int8=precision == "int8", threads=threads, beam_size=beam, batch_size=batch
        )
        return lite.translate
    cfg = OmegaConf.structured(
        InferenceConfig(run_dir=release, device="cpu", precision=Precision(precision))
    )
    engine = inference_engine(cfg)
    run = open_model(cfg, engine)
    torch.set_num_threads(threads)
    return Translator.from_run(
        run, DecodeConfig(beam_size=beam, batch_size=batch), engine
    ).translate


def timed(translate: Callable, lines: list[str], one_at_a_time: bool) -> float:
    """Sentences per second over ``lines``: all at once, or one call per sentence."""
    start = time.perf_counter()
    if one_at_a_time:
        for line in lines:
            translate([line])
    else:
        translate(lines)
    return len(lines) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release")
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-sentences", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)  # evaluate's default
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    lines = read_lines(args.source)
    variants = args.variants.split(",")
    cases = [(beam, one) for beam in (1, 5) for one in (True, False)]
    made = {
        (v, beam): translator(args.release, v, beam, args.batch_size, args.threads)
        for v in variants
        for beam in (1, 5)
    }
    for translate in made.values():  # warm-up: first calls allocate and pick kernels
        translate(lines[:8])
    speeds: dict[tuple, list[float]] = {}
    for _ in range(args.repeats):
        for beam, one in cases:
            for variant in variants:
                sample = lines[: args.latency_sentences] if one else lines
                speed = timed(made[variant, beam], sample, one)
                speeds.setdefault((variant, beam, one), []).append(speed)
    rows = {key: statistics.median(values) for key, values in speeds.items()}
    print(
        f"{platform.processor() or platform.machine()}, {args.threads} threads, torch "
        f"{torch.__version__}, medians of {args.repeats}"
    )
    print(
        "| variant | greedy, one at a time (ms/sentence) | greedy, batches (sent/s) "
        "| beam 5, one at a time (ms/sentence) | beam 5, batches (sent/s) |"
    )
    print("|---|---|---|---|---|")
    for variant in variants:
        cells = [
            f"{1000 / rows[variant, beam, one]:.1f}" if one else f"{rows[variant, beam, one]:.0f}"
            for beam, one in cases
        ]
        print(f"| {variant} | " + " | ".join(cells) + " |")
    print(
        json.dumps(
            {
                "threads": args.threads,
                "repeats": args.repeats,
                "latency_sentences": args.latency_sentences,
                "sentences": len(lines),
                "batch_size": args.batch_size,
                "sent_per_s": {
                    f"{v} beam{b} {'one' if o else 'batch'}": s for (v, b, o), s in rows.items()
                },
                "runs": {
                    f"{v} beam{b} {'one' if o else 'batch'}": s for (v, b, o), s in speeds.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
