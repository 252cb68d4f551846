"""Sentencepiece subword models: trained once per training text and settings, cached by content."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from seq2seq.config import DataConfig, SubwordModel, TokenizerConfig
from seq2seq.errors import DataError
from seq2seq.manifest import damage, write_manifest
from seq2seq.rundir import SRC_TOKENIZER, TGT_TOKENIZER
from seq2seq.vocab import BOS, EOS, PAD, UNK

log = logging.getLogger(__name__)


class Tokenizer:
    """One sentencepiece model; ids 0-3 are PAD, UNK, BOS, EOS in every vocabulary.

    ``proto`` is the serialized model (what the file holds): the key of caches, and what a
    process that cannot read the run folder receives from rank 0.
    """

    def __init__(self, proto: bytes, path: Path | None = None) -> None:
        self.proto, self.path = proto, path
        self._sp = spm.SentencePieceProcessor(model_proto=proto)

    @classmethod
    def load(cls, path: Path) -> Tokenizer:
        """The model in ``path``; a missing or damaged file is a DataError naming it."""
        path = Path(path)
        try:
            return cls(path.read_bytes(), path)
        except (OSError, RuntimeError) as e:  # sentencepiece: "could not parse ModelProto"
            reason = str(e).rsplit("] ", 1)[-1].strip()
            raise DataError(f"cannot read the sentencepiece model {path}: {reason}") from None

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Subword ids of one sentence, without BOS/EOS."""
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Subword ids of many sentences at once (sentencepiece encodes them on all cores)."""
        return self._sp.encode(list(texts))

    def sample_batch(self, texts: Sequence[str], alpha: float, seed: int) -> list[list[int]]:
        """One segmentation per sentence drawn at random (unigram: from all segmentations,
        sharpened by ``alpha``; BPE: merges dropped with probability ``alpha``), the same for
        the same ``seed``."""
        spm.set_random_generator_seed(seed & 0xFFFFFFFF)
        return self._sp.encode(
            list(texts), enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1
        )

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first EOS, skipping PAD and BOS; UNK reads as " ⁇ "."""
        kept = []
        for i in map(int, ids):
            if i == EOS:
                break
            if i not in (PAD, BOS):
                kept.append(i)
        return self._sp.decode(kept)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Subword strings of ``ids`` (for attention plots), special ids included."""
        return [self._sp.id_to_piece(int(i)) for i in ids]


def train_tokenizers(
    cfg: DataConfig, src_lines: Sequence[str], tgt_lines: Sequence[str], out_dir: Path
) -> tuple[Tokenizer, Tokenizer]:
    """Train (or reuse from ``cfg.cache_dir``) the subword models; write out_dir/{src,tgt}.model.

    A joint model is trained on both sides and written twice. ``vocab_size`` is an upper limit: a
    text too small for it (English Multi30k has 7931 pieces at most) gets fewer pieces, logged.
    """
    cache = Path(cfg.cache_dir) / "tokenizers"
    if cfg.tokenizer.joint:
        joint = _cached_model([*src_lines, *tgt_lines], cfg.tokenizer, cache, "joint")
        models = (joint, joint)
    else:
        models = (
            _cached_model(src_lines, cfg.tokenizer, cache, cfg.src_lang),
            _cached_model(tgt_lines, cfg.tokenizer, cache, cfg.tgt_lang),
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, model in zip((SRC_TOKENIZER, TGT_TOKENIZER), models, strict=True):
        shutil.copyfile(model, out_dir / name)
    return Tokenizer.load(out_dir / SRC_TOKENIZER), Tokenizer.load(out_dir / TGT_TOKENIZER)


def _cached_model(lines: Sequence[str], tcfg: TokenizerConfig, cache: Path, label: str) -> Path:
    """Path of the model for these lines and settings in ``cache``, training it if absent."""
    settings = {
        "model_type": SubwordModel(tcfg.model_type).value,
        "vocab_size": tcfg.vocab_size,
        "character_coverage": tcfg.character_coverage,
        "input_sentence_size": tcfg.input_sentence_size,
        "sentencepiece": spm.__version__,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    digest.update("\n".join(lines).encode())
    path = cache / f"{digest.hexdigest()[:16]}.model"
    manifest = path.with_suffix(".json")  # its size and SHA-256
    if path.exists():
        problems = damage(manifest)
        if not problems:
            log.info("reusing cached %s tokenizer %s", label, path)
            return path
        log.warning("cached %s tokenizer %s is damaged (%s): training it again", label, path,
                    "; ".join(problems))  # fmt: skip
    sample = list(lines)
    if 0 < tcfg.input_sentence_size < len(sample):  # own seeded sample: sentencepiece's varies
        rng = np.random.default_rng(0)
        keep = np.sort(rng.choice(len(sample), tcfg.input_sentence_size, replace=False))
        sample = [sample[i] for i in keep]
    log.info(
        "training %s %s tokenizer (vocab_size=%d) on %d lines",
        label,
        settings["model_type"],
        tcfg.vocab_size,
        len(sample),
    )
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sample),
            model_writer=model,
            model_type=settings["model_type"],
            vocab_size=tcfg.vocab_size,
            character_coverage=tcfg.character_coverage,
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            hard_vocab_limit=False,
            minloglevel=2,
        )
    except RuntimeError as e:
        reason = str(e).rsplit("] ", 1)[-1]
        raise DataError(
            f"cannot train the {label} tokenizer on {len(sample)} lines: {reason}"
        ) from e
    pieces = spm.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()
    if pieces < tcfg.vocab_size:
        log.info(
            "%s tokenizer has %d pieces, fewer than vocab_size=%d", label, pieces, tcfg.vocab_size
        )
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(model.getvalue())
    os.replace(tmp, path)
    write_manifest(manifest, [path])
    return path
