"""The corpus a training run reads: both splits streamed, subworded and encoded into caches."""

from __future__ import annotations

import functools
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.dataset import TokenizedCorpus, encode_corpus
from seq2seq.data.readers import CarvingReader, open_reader
from seq2seq.data.stream import PairStream, available_cores, from_lists
from seq2seq.data.textstore import SideText, text_store
from seq2seq.data.tokenizer import Tokenizer, train_tokenizers
from seq2seq.errors import require_file
from seq2seq.storage.rundir import (
    CONFIG_FILE,
    SPLITS_DIR,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    split_file,
)

log = logging.getLogger(__name__)

TokenizerSource = Callable[[PairStream], tuple[Tokenizer, Tokenizer]]


@dataclass
class TrainingData:
    """Tokenizers, the encoded training pairs, and the validation split as text and as ids."""

    src_tok: Tokenizer
    tgt_tok: Tokenizer
    train: TokenizedCorpus  # empty, over-long pairs dropped
    valid: TokenizedCorpus  # every line kept
    valid_src: list[str]
    valid_refs: list[str]
    train_text: tuple[SideText, SideText] | None  # the training text by line (subword sampling)
    valid_record: str  # the validation split as a checkpoint records it: size and digest


def training_data(cfg: DataConfig, tokenizers: TokenizerSource) -> TrainingData:
    """Stream the training split, get the tokenizers from ``tokenizers(train)`` (trained, cached
    or handed over) and encode both splits (cached in ``cfg.cache_dir``)."""
    reader = open_reader(cfg)
    train = reader.stream("train", cfg.train_limit)
    src_tok, tgt_tok = tokenizers(train)
    cache, workers = Path(cfg.cache_dir), cfg.workers or available_cores()
    train_ids = encode_corpus(train, src_tok, tgt_tok, cache, cfg.max_len, True, workers)
    valid_src, valid_refs = reader.stream("valid", cfg.valid_limit).lists()
    valid_pairs = from_lists(valid_src, valid_refs)
    valid = encode_corpus(valid_pairs, src_tok, tgt_tok, cache, None, False)
    text = text_store(train, cache) if cfg.sampling_alpha else None
    record = f"{len(valid_src):,} pairs ({valid_pairs.fingerprint[:12]})"
    return TrainingData(src_tok, tgt_tok, train_ids, valid, valid_src, valid_refs, text, record)


def run_tokenizers(
    cfg: DataConfig, run_dir: Path, resuming: bool, train: PairStream
) -> tuple[Tokenizer, Tokenizer]:
    """The run folder's own tokenizers when resuming, else copied from
    data.tokenizer.from_folder, else trained (or taken from the cache) and written into it."""
    src_model, tgt_model = run_dir / SRC_TOKENIZER, run_dir / TGT_TOKENIZER
    if resuming and src_model.exists() and tgt_model.exists():
        return Tokenizer.load(src_model), Tokenizer.load(tgt_model)
    if cfg.tokenizer.from_folder:
        _warn_unused_keys(cfg, Path(cfg.tokenizer.from_folder))
        for name, model in ((SRC_TOKENIZER, src_model), (TGT_TOKENIZER, tgt_model)):
            given = require_file(
                Path(cfg.tokenizer.from_folder) / name, "data.tokenizer.from_folder"
            )
            shutil.copyfile(given, model)
        return Tokenizer.load(src_model), Tokenizer.load(tgt_model)
    return train_tokenizers(cfg, train, run_dir)


def _warn_unused_keys(cfg: DataConfig, folder: Path) -> None:
    """One warning naming the data.tokenizer keys the folder's models were not trained with
    (`unapplied_tokenizer_keys`, its config.yaml's): they are taken as they are."""
    saved = folder / CONFIG_FILE
    recorded = (
        OmegaConf.select(OmegaConf.load(saved), "data.tokenizer") if saved.is_file() else None
    )
    if unused := unapplied_tokenizer_keys(cfg.tokenizer, recorded):
        said = ", ".join(f"data.tokenizer.{key}={here}" for key, (here, _) in unused.items())
        log.warning(
            "data.tokenizer.from_folder=%s brings its own models: %s not used", folder, said
        )


def unapplied_tokenizer_keys(tokenizer: Any, recorded: Any) -> dict[str, tuple[Any, Any]]:
    """{key: (value here, value there)} of the data.tokenizer keys set here to another value than
    the schema's default and than ``recorded`` (the models' run's data.tokenizer; None: none
    recorded), which models taken from elsewhere cannot apply; ``from_folder`` aside."""
    plain = functools.partial(OmegaConf.to_container, resolve=True, enum_to_str=True)
    theirs = plain(recorded) if recorded is not None else {}
    defaults = plain(OmegaConf.structured(TokenizerConfig))
    return {
        key: (value, theirs.get(key))
        for key, value in plain(tokenizer).items()
        if key != "from_folder" and value != defaults.get(key) and value != theirs.get(key)
    }


def write_splits(cfg: DataConfig, run_dir: Path) -> list[Path]:
    """A corpus without files per split (tab-separated, a dataset) leaves its validation and
    test splits in the run folder, so evaluation finds them without the corpus; their paths."""
    reader = open_reader(cfg)
    if not isinstance(reader, CarvingReader):
        return []
    written = []
    for split in ("valid", "test"):
        if not reader.has(split):
            continue
        pairs = reader.stream(split)
        (run_dir / SPLITS_DIR).mkdir(parents=True, exist_ok=True)
        paths = [split_file(run_dir, split, lang) for lang in (cfg.src_lang, cfg.tgt_lang)]
        carved = reader.carved.files(split) if getattr(cfg, split) is None else None
        if carved is not None:  # already two text files in the cache
            for origin, path in zip(carved, paths, strict=True):
                shutil.copyfile(origin, path)
        else:
            with (
                open(paths[0], "w", encoding="utf-8") as s,
                open(paths[1], "w", encoding="utf-8") as t,
            ):
                for src, tgt in pairs:
                    s.write(src + "\n")
                    t.write(tgt + "\n")
        written += paths
    return written
