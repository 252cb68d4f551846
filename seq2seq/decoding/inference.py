"""One prediction path: load a run onto a device, decode raw sentences, detokenize, score.

Validation during training, ``seq2seq-evaluate`` and ``seq2seq-translate`` all go through the
`Translator` and `score` here, so validation BLEU and test BLEU are computed the same way.
"""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from omegaconf import DictConfig, OmegaConf
from sacrebleu.metrics import BLEU, CHRF
from seq2seq_lite import rules
from seq2seq_lite.steering import (
    LineSteering,
    SteeringIds,
    decode_steered,
    encode_steering,
    word_continuations,
)

from seq2seq.config import DecodeConfig, InferenceConfig
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.graphed import SearchGraphs
from seq2seq.decoding.search import Hypothesis, decode_sources
from seq2seq.errors import Seq2SeqError
from seq2seq.languages import bleu_tokenizer, check_bleu_tokenizer
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import TrainedRun, load_runs
from seq2seq.vocab import EOS, UNK


def open_model(cfg: InferenceConfig, engine: Engine) -> TrainedRun:
    """The run (or release, or ensemble) an inference command's config names, on the command's
    ``engine`` (`inference_engine`); compiled when asked. The values were checked by the command
    (commands/rules.py)."""
    run = load_runs(cfg.run_dir, cfg.ensemble, cfg.checkpoint, engine)
    engine.choose_products(run.model, training=False)
    if cfg.compile:
        engine.compile(run.model)
    return run


def run_bleu_tokenizer(data: DictConfig, override: str | None = None) -> str:
    """sacreBLEU's tokenizer for a run's target language: ``override``, else the run's
    ``data.bleu_tokenize``, else the language's own (zh, ja-mecab, ko-mecab; 13a otherwise)."""
    return bleu_tokenizer(data.tgt_lang, override or OmegaConf.select(data, "bleu_tokenize"))


@dataclass
class Translation:
    """The n-best list of one input line, and the source subword ids the model read. A line is
    blank when the tokenizer keeps nothing of it (spaces, or control characters alone)."""

    source_ids: list[int]  # pieces + EOS; empty for a blank line
    hypotheses: list[Hypothesis]  # best first; empty for a blank line
    warnings: list[str] = field(default_factory=list)  # steering not met as asked, one a line


class InputTooLong(rules.InputTooLong, Seq2SeqError):
    """An input line over the search's ``max_source_len`` subwords: refused, never cut
    (``index``: 0-based, in a batch)."""

    option = "max_source_len=..."


def encode_sources(
    tok: Tokenizer, lines: Sequence[str], limit: int, threads: int | None = None
) -> list[list[int]]:
    """The subword ids of each line, by the input rule of every search (`rules.encode_lines`);
    InputTooLong for the first line over ``limit``. ``threads``: sentencepiece's (None: every
    core)."""
    encode = (
        tok.encode_batch
        if threads is None
        else functools.partial(tok.encode_batch, threads=threads)
    )
    return rules.encode_lines(encode, lines, limit, InputTooLong)


class TranslatorBase(abc.ABC):
    """What every translator gives: the translations of raw lines under its search setting, and
    their texts and subword labels read through its two tokenizers. `Translator` searches a
    PyTorch model; the server's onnx backend searches the exported graphs the same way."""

    def __init__(self, src_tok: Tokenizer, tgt_tok: Tokenizer, search: DecodeConfig) -> None:
        self.src_tok, self.tgt_tok, self.search = src_tok, tgt_tok, search

    @abc.abstractmethod
    def translate(
        self,
        lines: Sequence[str],
        seed: int | None = None,
        steer: Sequence[LineSteering | None] | None = None,
    ) -> list[Translation]:
        """Each line's n-best list, in order (a blank line: none)."""

    def text(self, hypothesis: Hypothesis) -> str:
        """Detokenized translation on one line (any line break inside becomes a space)."""
        return rules.one_line(self.tgt_tok.decode(hypothesis.tokens))

    def best_text(self, translation: Translation) -> str:
        """The text of the best hypothesis; empty for a blank line."""
        return self.text(translation.hypotheses[0]) if translation.hypotheses else ""

    def source_pieces(self, translation: Translation) -> list[str]:
        """Subword labels of the source as read, ending with "</s>" like the attention columns."""
        return self.src_tok.pieces(translation.source_ids)

    @functools.cached_property
    def joins(self) -> np.ndarray:
        """The target pieces that go on with a word (`word_continuations`)."""
        return word_continuations(self.tgt_tok.pieces(range(self.tgt_tok.vocab_size)))

    def target_pieces(self, hypothesis: Hypothesis) -> list[str]:
        """Subword labels of a hypothesis, ending with "</s>" like the attention rows."""
        return self.tgt_tok.pieces([*hypothesis.tokens, EOS])


class Translator(TranslatorBase):
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
        graphs: SearchGraphs | None = None,
    ) -> None:
        """``graphs``: CUDA graphs of the searches to keep using (a training's validations);
        by default a new set on a GPU, none elsewhere."""
        keys = (
            "beam_size",
            "nbest",
            "batch_size",
            "max_source_len",
            "sampling",
            *rules.NOT_NEGATIVE,
        )
        settings = {k: getattr(search, k) for k in keys}
        if problem := rules.search_problem(**settings, vocab_size=tgt_tok.vocab_size):
            raise Seq2SeqError(problem)
        super().__init__(src_tok, tgt_tok, search)
        self.model, self.engine = model, engine
        self.graphs = graphs if graphs is not None else SearchGraphs.where_they_run(engine)

    @classmethod
    def from_run(
        cls,
        run: TrainedRun,
        search: DecodeConfig,
        engine: Engine | None = None,
        graphs: SearchGraphs | None = None,
    ) -> Translator:
        return cls(run.model, run.src_tok, run.tgt_tok, search, engine, graphs)

    def translate(
        self,
        lines: Sequence[str],
        seed: int | None = None,
        steer: Sequence[LineSteering | None] | None = None,
    ) -> list[Translation]:
        """Decode the non-blank lines together (in length-sorted batches); order is kept.
        ``seed``: sampling's first seed, if not the search's (see `decode_sources`); ``steer``:
        each line's prefix and constraints (one per line; None: none)."""
        encoded = encode_sources(self.src_tok, lines, self.search.max_source_len)
        if steer is not None and len(steer) != len(lines):
            raise Seq2SeqError(f"steering for {len(steer)} lines, {len(lines)} lines to translate")
        targets = encode_steering(
            self.tgt_tok.encode_batch, steer, UNK, self.search.no_repeat_ngram
        )
        said = [t.warnings for t in targets] if targets else [[] for _ in lines]
        results = [
            Translation([*ids, EOS] if ids else [], [], w)
            for ids, w in zip(encoded, said, strict=True)
        ]
        todo = [i for i, ids in enumerate(encoded) if ids]

        def decode(lines: list[int], given: Sequence[SteeringIds] | None) -> list[list[Hypothesis]]:
            sources = [results[i].source_ids for i in lines]
            wanted = None if given is None else [given[i] for i in lines]
            search, graphs = self.search, self.graphs
            return decode_sources(self.model, sources, search, seed, wanted, graphs, self.joins)

        with self.engine.compute() if self.engine else contextlib.nullcontext():
            nbest = decode_steered(decode, todo, targets, self.joins)
        for i, hypotheses in zip(todo, nbest, strict=True):
            results[i].hypotheses = hypotheses
        return results


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
