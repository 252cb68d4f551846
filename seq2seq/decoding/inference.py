"""One prediction path: load a run onto a device, decode raw sentences, detokenize, score.

Validation during training, ``seq2seq-evaluate`` and ``seq2seq-translate`` all go through the
`Translator` and `score` here, so validation BLEU and test BLEU are computed the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import safetensors.torch
from omegaconf import DictConfig, OmegaConf
from sacrebleu.metrics import BLEU, CHRF

from seq2seq.config import DecodeConfig
from seq2seq.config_commands import InferenceConfig
from seq2seq.config_rules import check_config, upgrade_saved_config
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.search import Hypothesis, decode_sources
from seq2seq.errors import Seq2SeqError
from seq2seq.languages import bleu_tokenizer, check_bleu_tokenizer
from seq2seq.model.ensemble import Ensemble
from seq2seq.model.seq2seq import Seq2Seq, build_model
from seq2seq.runtime.checkpoint import load_checkpoint
from seq2seq.runtime.engine import Engine
from seq2seq.storage.manifest import damage
from seq2seq.storage.rundir import (
    CONFIG_FILE,
    MANIFEST,
    RELEASE_FACTS,
    RELEASE_WEIGHTS,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    checkpoint_path,
)
from seq2seq.vocab import EOS


@dataclass
class TrainedRun:
    """Everything a finished run folder provides for evaluation and translation."""

    run_dir: Path
    cfg: DictConfig
    model: Seq2Seq | Ensemble  # in eval mode, on the engine's device
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    checkpoint: Path
    step: int  # training updates behind the checkpoint


def load_run(
    run_dir: str | Path, checkpoint: str = "best", engine: Engine | None = None
) -> TrainedRun:
    """Rebuild the model of a training run folder, or of a release folder (seq2seq-export:
    weights in safetensors, read without torch.load), in eval mode, on the engine's device (the
    host without one)."""
    run_dir = Path(run_dir)
    release = (run_dir / RELEASE_WEIGHTS).is_file()
    if not (run_dir / CONFIG_FILE).is_file():
        raise Seq2SeqError(f"{run_dir} is not a training run or release folder (no {CONFIG_FILE})")
    if release and not (run_dir / MANIFEST).is_file():
        raise Seq2SeqError(f"{run_dir} is a release folder without its {MANIFEST}: refused")
    if (run_dir / MANIFEST).is_file() and (problems := damage(run_dir / MANIFEST)):
        raise Seq2SeqError(
            f"{run_dir} is damaged: {'; '.join(problems)} (see {MANIFEST}); restore the files "
            "from a copy of the folder"
        )
    cfg = read_config(run_dir / CONFIG_FILE)
    for name in (SRC_TOKENIZER, TGT_TOKENIZER):
        if not (run_dir / name).is_file():
            raise Seq2SeqError(f"{run_dir} has no tokenizer model {name}")
    src_tok = Tokenizer.load(run_dir / SRC_TOKENIZER)
    tgt_tok = Tokenizer.load(run_dir / TGT_TOKENIZER)
    vocab = (src_tok.vocab_size, tgt_tok.vocab_size)
    model = build_model(cfg.model, *vocab)
    if release:
        if checkpoint != "best":
            raise Seq2SeqError(
                f"{run_dir} is a release: it holds one model (leave out checkpoint=)"
            )
        path, step = run_dir / RELEASE_WEIGHTS, release_facts(run_dir).get("step", 0)
        try:
            safetensors.torch.load_model(model, path)
        except Exception as e:  # safetensors' header errors, missing or misshapen tensors
            raise Seq2SeqError(f"{path} does not fit the model of {run_dir}: {e}") from None
    else:
        path = checkpoint_path(run_dir, checkpoint)
        if not path.is_file():
            raise Seq2SeqError(f"checkpoint not found: {path} (give best, last or a file's path)")
        state = load_checkpoint(path)
        step = state.get("step", 0)
        if "vocab" in state and tuple(state["vocab"]) != vocab:
            raise Seq2SeqError(
                f"{path} was trained with vocabularies of {state['vocab'][0]}/"
                f"{state['vocab'][1]} pieces, but the tokenizers in {run_dir} have {vocab[0]}/"
                f"{vocab[1]}: it belongs to another run"
            )
        try:
            model.load_state_dict(state["model"])
        except (KeyError, RuntimeError, TypeError) as e:  # a checkpoint of another model or run
            raise Seq2SeqError(f"{path} does not fit the model of {run_dir}: {e}") from e
    if engine is not None:
        engine.for_inference(model)
    model.eval()
    return TrainedRun(run_dir, cfg, model, src_tok, tgt_tok, path, int(step))


def release_facts(folder: Path) -> dict:
    """The facts a release folder states about its model (release.json); {} for a run folder."""
    path = Path(folder) / RELEASE_FACTS
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def load_runs(
    run_dir: str | Path, others: Sequence[str | Path], checkpoint: str, engine: Engine
) -> TrainedRun:
    """``run_dir`` alone, or with ``others`` as an ensemble (the mean of their log-probabilities),
    which needs the same tokenizers in every folder."""
    run = load_run(run_dir, checkpoint, engine)
    if not others:
        return run
    members = [run, *(load_run(other, checkpoint, engine) for other in others)]
    for member in members[1:]:
        if (member.src_tok.proto, member.tgt_tok.proto) != (run.src_tok.proto, run.tgt_tok.proto):
            raise Seq2SeqError(
                f"{member.run_dir} has other tokenizers than {run.run_dir}: an ensemble needs "
                "the same subword vocabularies (the same training data and tokenizer settings)"
            )
    return replace(run, model=Ensemble([m.model for m in members]))


def open_model(cfg: InferenceConfig, purpose: str) -> tuple[Engine, TrainedRun]:
    """The engine and the run (or release, or ensemble) an inference command's config names,
    after refusing a missing run_dir ("say which model to <purpose>") and impossible settings;
    compiled when asked."""
    if OmegaConf.is_missing(cfg, "run_dir"):
        raise Seq2SeqError(f"say which model to {purpose}: run_dir=<a run or release folder>")
    check_config(cfg)
    engine = Engine.create(
        cfg.device, cfg.precision, products=cfg.products, int8_engine=cfg.int8_engine
    )
    run = load_runs(cfg.run_dir, cfg.ensemble, cfg.checkpoint, engine)
    engine.choose_products(run.model)
    if cfg.compile:
        engine.compile(run.model)
    return engine, run


def run_bleu_tokenizer(data: DictConfig, override: str | None = None) -> str:
    """sacreBLEU's tokenizer for a run's target language: ``override``, else the run's
    ``data.bleu_tokenize``, else the language's own (zh, ja-mecab, ko-mecab; 13a otherwise)."""
    return bleu_tokenizer(data.tgt_lang, override or OmegaConf.select(data, "bleu_tokenize"))


def read_config(path: Path) -> DictConfig:
    """A run's config.yaml; unreadable YAML, or YAML that is not a run's config, is a
    Seq2SeqError naming the file."""
    what = "restore it from a copy of the run folder"
    try:
        cfg = OmegaConf.load(path)
    except Exception as e:  # yaml's and omegaconf's many errors
        raise Seq2SeqError(f"{path} is damaged ({type(e).__name__}: {e}); {what}") from None
    needed = ("model.attention.name", "model.hidden_size", "data.src_lang", "data.tgt_lang")
    missing = [
        key
        for key in needed
        if not isinstance(cfg, DictConfig) or OmegaConf.select(cfg, key) is None
    ]
    if missing:
        raise Seq2SeqError(f"{path} is not a run's config (no {', '.join(missing)}); {what}")
    return upgrade_saved_config(cfg)


@dataclass
class Translation:
    """The n-best list of one input line, and the source subword ids the model read. A line is
    blank when the tokenizer keeps nothing of it (spaces, or control characters alone)."""

    source_ids: list[int]  # pieces + EOS; empty for a blank line
    hypotheses: list[Hypothesis]  # best first; empty for a blank line


class InputTooLong(Seq2SeqError):
    """An input line over the search's ``max_source_len`` subwords: refused, never cut."""

    def __init__(self, index: int, length: int, limit: int) -> None:
        self.index, self.length, self.limit = index, length, limit  # index: 0-based, in a batch
        super().__init__(self.describe(f"input line {index + 1}"))

    def describe(self, where: str) -> str:
        """The one-line refusal, naming the line as the caller knows it."""
        return (
            f"{where} has {self.length:,} subwords; at most {self.limit:,} are translated "
            "(max_source_len=...)"
        )


def encode_sources(tok: Tokenizer, lines: Sequence[str], limit: int) -> list[list[int]]:
    """The subword ids of each line (lone surrogates, undecodable terminal bytes, become "?":
    sentencepiece takes only UTF-8); InputTooLong for the first line over ``limit``."""
    text = [line.encode("utf-8", "replace").decode("utf-8").strip() for line in lines]
    encoded = tok.encode_batch(text)
    for index, ids in enumerate(encoded):
        if len(ids) > limit:
            raise InputTooLong(index, len(ids), limit)
    return [ids if line else [] for ids, line in zip(encoded, text, strict=True)]


class Translator:
    """A model with its tokenizers, ready for raw sentences: subwords in, detokenized text out.

    Decoding runs under the engine's autocast. Every line is read whole; one over the search's
    ``max_source_len`` is refused (InputTooLong) before anything is decoded.
    """

    def __init__(
        self,
        model: Seq2Seq,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        search: DecodeConfig,
        engine: Engine | None = None,
    ) -> None:
        for key in ("beam_size", "nbest", "batch_size", "max_source_len"):
            if getattr(search, key) < 1:
                raise Seq2SeqError(f"{key} must be at least 1, not {getattr(search, key)}")
        if search.nbest > search.beam_size and not search.sampling:  # sampling draws nbest
            raise Seq2SeqError(
                f"nbest={search.nbest} needs at least as many beams: add beam_size={search.nbest}"
            )
        self.model, self.src_tok, self.tgt_tok = model, src_tok, tgt_tok
        self.search, self.engine = search, engine

    @classmethod
    def from_run(
        cls,
        run: TrainedRun,
        search: DecodeConfig,
        engine: Engine | None = None,
    ) -> Translator:
        return cls(run.model, run.src_tok, run.tgt_tok, search, engine)

    def translate(self, lines: Sequence[str], seed: int | None = None) -> list[Translation]:
        """Decode the non-blank lines together (in length-sorted batches); order is kept.
        ``seed``: sampling's first seed, if not the search's (see `decode_sources`)."""
        encoded = encode_sources(self.src_tok, lines, self.search.max_source_len)
        results = [Translation([], []) for _ in lines]
        todo = [i for i, ids in enumerate(encoded) if ids]
        for i in todo:
            results[i] = Translation([*encoded[i], EOS], [])
        sources = [results[i].source_ids for i in todo]
        with self.engine.compute() if self.engine else contextlib.nullcontext():
            nbest = decode_sources(self.model, sources, self.search, seed)
        for i, hypotheses in zip(todo, nbest, strict=True):
            results[i].hypotheses = hypotheses
        return results

    def text(self, hypothesis: Hypothesis) -> str:
        """Detokenized translation on one line (any line break inside becomes a space)."""
        return " ".join(self.tgt_tok.decode(hypothesis.tokens).split())

    def best_text(self, translation: Translation) -> str:
        """The text of the best hypothesis; empty for a blank line."""
        return self.text(translation.hypotheses[0]) if translation.hypotheses else ""

    def source_pieces(self, translation: Translation) -> list[str]:
        """Subword labels of the source as read, ending with "</s>" like the attention columns."""
        return self.src_tok.pieces(translation.source_ids)

    def target_pieces(self, hypothesis: Hypothesis) -> list[str]:
        """Subword labels of a hypothesis, ending with "</s>" like the attention rows."""
        return self.tgt_tok.pieces([*hypothesis.tokens, EOS])


@dataclass
class Scores:
    """Corpus BLEU and chrF of detokenized hypotheses against raw references (sacrebleu)."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str


def score(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a") -> Scores:
    """sacrebleu's corpus BLEU (with its ``tokenize`` tokenizer) and chrF with their
    signatures; one reference per line."""
    check_bleu_tokenizer(tokenize)
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    return Scores(
        bleu.corpus_score(list(hypotheses), [list(references)]).score,
        chrf.corpus_score(list(hypotheses), [list(references)]).score,
        str(bleu.get_signature()),
        str(chrf.get_signature()),
    )
