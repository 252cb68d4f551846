"""What the speed benchmark measures: the models, attentions, batch sizes, searches and
precisions it can be asked for, and how much of each (``Sizes``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from seq2seq.config import DecodeConfig, Multi30kConfig
from seq2seq.data.batching import TokenBatchSampler
from seq2seq.data.dataset import TokenizedCorpus
from seq2seq.model.config import AttentionConfig, BahdanauConfig, LuongConfig, ModelConfig
from seq2seq.model.registry import ATTENTIONS as REGISTRY

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


# fp32 products on the CPU: oneDNN (seq2seq/model/linear.py) or PyTorch's BLAS, the engine's
PRODUCTS = ("onednn", "pytorch")


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


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
