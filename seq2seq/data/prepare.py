"""The corpus a training run reads: both splits, read, validated, subworded and encoded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from seq2seq.config import DataConfig
from seq2seq.data.corpus import read_parallel, split_files
from seq2seq.data.dataset import TokenizedCorpus, encode_corpus
from seq2seq.data.tokenizer import Tokenizer, train_tokenizers
from seq2seq.rundir import SRC_TOKENIZER, TGT_TOKENIZER

TokenizerSource = Callable[[list[str], list[str]], tuple[Tokenizer, Tokenizer]]


@dataclass
class TrainingData:
    """Tokenizers, the encoded training pairs, and the validation split as text and as ids."""

    src_tok: Tokenizer
    tgt_tok: Tokenizer
    train: TokenizedCorpus  # empty, over-long pairs dropped
    valid: TokenizedCorpus  # every line kept
    valid_src: list[str]
    valid_refs: list[str]
    train_text: tuple[list[str], list[str]]  # the training split as read (source, target)


def training_data(cfg: DataConfig, tokenizers: TokenizerSource) -> TrainingData:
    """Read both splits, get the tokenizers from ``tokenizers(train_src, train_tgt)`` (trained,
    cached or handed over) and encode both splits (cached in ``cfg.cache_dir``)."""
    train_src, train_tgt = read_parallel(*split_files(cfg, "train"), cfg.train_limit)
    src_tok, tgt_tok = tokenizers(train_src, train_tgt)
    cache = Path(cfg.cache_dir)
    train = encode_corpus(train_src, train_tgt, src_tok, tgt_tok, cache, cfg.max_len, True)
    valid_src, valid_refs = read_parallel(*split_files(cfg, "valid"), cfg.valid_limit)
    valid = encode_corpus(valid_src, valid_refs, src_tok, tgt_tok, cache, None, False)
    return TrainingData(
        src_tok, tgt_tok, train, valid, valid_src, valid_refs, (train_src, train_tgt)
    )


def run_tokenizers(
    cfg: DataConfig, run_dir: Path, resuming: bool, src: list[str], tgt: list[str]
) -> tuple[Tokenizer, Tokenizer]:
    """The run folder's own tokenizers when resuming, else trained (or taken from the cache) and
    written into it."""
    src_model, tgt_model = run_dir / SRC_TOKENIZER, run_dir / TGT_TOKENIZER
    if resuming and src_model.exists() and tgt_model.exists():
        return Tokenizer.load(src_model), Tokenizer.load(tgt_model)
    return train_tokenizers(cfg, src, tgt, run_dir)
