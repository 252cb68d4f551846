"""Sentencepiece subword models: trained once per training text and settings, cached by content."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from seq2seq.config import DataConfig, SubwordModel, TokenizerConfig
from seq2seq.data.stream import PairStream, fingerprint, worker_pool
from seq2seq.errors import DataError
from seq2seq.languages import character_coverage, is_cjk
from seq2seq.storage.manifest import damage, write_manifest
from seq2seq.storage.rundir import SRC_TOKENIZER, TGT_TOKENIZER
from seq2seq.vocab import BOS, EOS, PAD, UNK

log = logging.getLogger(__name__)

TRAINER_THREADS = 16  # sentencepiece's default; the trained pieces differ with the thread count


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

    @functools.cached_property
    def fingerprint(self) -> str:
        """The model's SHA-256: what a checkpoint records of the tokenizers it was trained with."""
        return hashlib.sha256(self.proto).hexdigest()

    def encode(self, text: str) -> list[int]:
        """Subword ids of one sentence, without BOS/EOS."""
        return self._sp.encode(text)

    def encode_batch(self, texts: Sequence[str], threads: int | None = None) -> list[list[int]]:
        """Subword ids of many sentences at once (on ``threads`` threads; None: sentencepiece's
        default, every core)."""
        return self._sp.encode(list(texts), num_threads=threads)

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
    cfg: DataConfig, train: PairStream, out_dir: Path
) -> tuple[Tokenizer, Tokenizer]:
    """Train (or reuse from ``cfg.cache_dir``) the subword models; write out_dir/{src,tgt}.model.

    A joint model is trained on both sides and written twice. ``vocab_size`` is an upper limit: a
    text too small for it (English Multi30k has 7931 pieces at most) gets fewer pieces, logged.
    Models are keyed by the stream's fingerprint and the settings, so a cached model is found
    without reading the text.
    """
    cache = Path(cfg.cache_dir) / "tokenizers"
    langs = [cfg.src_lang, cfg.tgt_lang]
    sides = ["joint"] if cfg.tokenizer.joint else ["src", "tgt"]
    settings = {
        side: _settings(cfg.tokenizer, langs if side == "joint" else [langs[sides.index(side)]])
        for side in sides
    }
    paths = {
        side: cache / f"{fingerprint(train.fingerprint, side, settings[side])[:16]}.model"
        for side in sides
    }
    todo = [side for side in sides if not _usable(paths[side], side)]
    if todo:
        _train(train, {side: settings[side] for side in todo}, {s: paths[s] for s in todo}, cache)
    models = [paths["joint"]] * 2 if cfg.tokenizer.joint else [paths["src"], paths["tgt"]]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, model in zip((SRC_TOKENIZER, TGT_TOKENIZER), models, strict=True):
        shutil.copyfile(model, out_dir / name)
    return Tokenizer.load(out_dir / SRC_TOKENIZER), Tokenizer.load(out_dir / TGT_TOKENIZER)


def _settings(tcfg: TokenizerConfig, langs: list[str]) -> dict:
    """The trainer's settings for text in ``langs``: CJK scripts get a coverage of 0.9995, byte
    fallback for the characters left out, and no NFKC normalisation (which would turn
    full-width punctuation into ASCII), so their text round-trips unchanged."""
    cjk = any(is_cjk(lang) for lang in langs)
    symbols = {"user_defined_symbols": list(tcfg.user_symbols)} if tcfg.user_symbols else {}
    return {
        **symbols,
        "model_type": SubwordModel(tcfg.model_type).value,
        "vocab_size": tcfg.vocab_size,
        "character_coverage": character_coverage(langs, tcfg.character_coverage),
        "input_sentence_size": tcfg.input_sentence_size,
        "byte_fallback": cjk,
        "normalization_rule_name": "identity" if cjk else "nmt_nfkc",
        "sentencepiece": spm.__version__,
    }


def _usable(path: Path, label: str) -> bool:
    """Whether a cached model is there and undamaged (a damaged one is trained again)."""
    if not path.exists():
        return False
    problems = damage(path.with_suffix(".json"))
    if not problems:
        log.info("reusing cached %s tokenizer %s", label, path)
        return True
    log.warning(
        "cached %s tokenizer %s is damaged (%s): training it again",
        label,
        path,
        "; ".join(problems),
    )
    return False


def _sample_files(
    train: PairStream, sides: list[str], limit: int, directory: Path
) -> dict[str, tuple[Path, int]]:
    """Each side's training text as a file: every line, or a seeded sample of ``limit`` lines
    (sentencepiece's own sample differs between runs). A joint side's lines are the source
    lines, then the target lines. Two passes: count the pairs, then write."""
    pairs = train.size if train.size is not None else sum(len(src) for src, _ in train.batches())
    total = {side: 2 * pairs if side == "joint" else pairs for side in sides}
    masks: dict[str, np.ndarray | None] = dict.fromkeys(sides)  # which lines (None: all)
    for side, n in total.items():
        if 0 < limit < n:
            masks[side] = np.zeros(n, dtype=bool)
            masks[side][np.random.default_rng(0).choice(n, limit, replace=False)] = True
    with contextlib.ExitStack() as files:
        out = {
            s: files.enter_context(open(directory / f"{s}.txt", "w", encoding="utf-8"))
            for s in sides
        }
        start = 0
        for src, tgt in train.batches():
            for side in sides:
                parts = {"src": [(0, src)], "tgt": [(0, tgt)], "joint": [(0, src), (pairs, tgt)]}
                for offset, lines in parts[side]:
                    mask = masks[side]
                    if mask is not None:
                        chosen = mask[offset + start : offset + start + len(lines)]
                        lines = [lines[k] for k in np.flatnonzero(chosen)]
                    if lines:
                        out[side].write("\n".join(lines) + "\n")
            start += len(src)
    kept = {s: total[s] if masks[s] is None else limit for s in sides}
    return {s: (directory / f"{s}.txt", kept[s]) for s in sides}


def _train(
    train: PairStream, settings: dict[str, dict], paths: dict[str, Path], cache: Path
) -> None:
    """Train the models of ``settings``' sides on (a sample of) the stream; cache each. Each
    model trains in a process of its own: sentencepiece takes about 1.5 GB per million
    sentences, which goes back to the system when that process ends."""
    limit = next(iter(settings.values()))["input_sentence_size"]
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".text-") as tmp:
        samples = _sample_files(train, list(settings), limit, Path(tmp))
        for side, (text, lines) in samples.items():
            log.info(
                "training %s %s tokenizer (vocab_size=%d) on %d lines",
                side,
                settings[side]["model_type"],
                settings[side]["vocab_size"],
                lines,
            )
            with worker_pool(1) as trainer:
                model = trainer.submit(_train_one, text, lines, settings[side], side).result()
            pieces = spm.SentencePieceProcessor(model_proto=model).get_piece_size()
            if pieces < settings[side]["vocab_size"]:
                log.info(
                    "%s tokenizer has %d pieces, fewer than vocab_size=%d",
                    side,
                    pieces,
                    settings[side]["vocab_size"],
                )
            path = paths[side]
            tmp_model = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp_model.write_bytes(model)
            os.replace(tmp_model, path)
            write_manifest(path.with_suffix(".json"), [path])


def _train_one(text: Path, count: int, settings: dict, label: str) -> bytes:
    """One sentencepiece model trained on the lines of ``text`` (in a process of its own)."""
    model = io.BytesIO()
    options = {
        k: v for k, v in settings.items() if k not in ("input_sentence_size", "sentencepiece")
    }
    with open(text, encoding="utf-8") as lines:
        try:
            spm.SentencePieceTrainer.train(
                # an iterator, not input=<file>: the model would record the temporary file's name
                sentence_iterator=(line.rstrip("\n") for line in lines),
                model_writer=model,
                pad_id=PAD,
                unk_id=UNK,
                bos_id=BOS,
                eos_id=EOS,
                hard_vocab_limit=False,
                # a fixed count: sentencepiece's pieces depend on it (its default, 16)
                num_threads=TRAINER_THREADS,
                minloglevel=2,
                **options,
            )
        except RuntimeError as e:
            reason = str(e).rsplit("] ", 1)[-1].strip()
            if "sentences_.empty()" in str(e) or not reason:  # sentencepiece's own words
                reason = "no line with text (all are blank)" if count else "no lines"
            if chars := re.search(r"required_chars\. (\d+) vs (\d+)", reason):  # in our keys
                reason = (
                    f"its {chars[2]} characters need more pieces than data.tokenizer.vocab_size="
                    f"{chars[1]}: raise it, or lower data.tokenizer.character_coverage"
                )
            raise DataError(
                f"cannot train the {label} tokenizer on {count} lines: {reason}"
            ) from None
    return model.getvalue()


def fingerprints(src_tok: Tokenizer, tgt_tok: Tokenizer) -> list[str]:
    """What a checkpoint records of its run's two tokenizers (``"tokenizers"``): their SHA-256."""
    return [src_tok.fingerprint, tgt_tok.fingerprint]
