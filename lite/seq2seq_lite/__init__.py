"""seq2seq-lite: translate with a seq2seq release's ONNX graphs, without torch."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sentencepiece as spm

from seq2seq_lite import rules
from seq2seq_lite.release import Graphs, ReleaseError, check_manifest, read_spec
from seq2seq_lite.search import Hypothesis, beam, greedy
from seq2seq_lite.steering import (
    LineSteering,
    SteeringIds,
    constraints_problem,
    decode_steered,
    encode_steering,
    steering_arrays,
    word_continuations,
)

__all__ = ["Hypothesis", "InputTooLong", "ReleaseError", "Translation", "Translator"]

# sentences decoded together unless asked: fewer than the export's 64, whose beam arrays cost far
# more memory than the time they save (docs/deploy.md, "Size and memory")
BATCH_SIZE = 16


@dataclass
class Translation:
    """The n-best list of one input line (best first; empty for a blank line) and the source
    subword ids the model read (pieces + EOS)."""

    source_ids: list[int]
    hypotheses: list[Hypothesis]
    texts: list[str]
    warnings: list[str] = field(default_factory=list)  # steering not met as asked, one a line

    def candidates(self) -> list[tuple[str, float]]:
        """(text, the search's score) of each hypothesis, best first."""
        return [(t, h.score) for t, h in zip(self.texts, self.hypotheses, strict=True)]


class InputTooLong(rules.InputTooLong, ReleaseError):
    """A line over max_source_len subwords: refused, never cut (``index``: 0-based)."""

    option = "--max-source-len"


class Translator:
    """A release's graphs and tokenizers, with the search settings of ``search``."""

    def __init__(self, folder: Path, graphs: Graphs, search: dict) -> None:
        spec = graphs.spec
        self.graphs, self.search = graphs, search
        self.src_tok = spm.SentencePieceProcessor(model_file=str(folder / spec["src_tokenizer"]))
        self.tgt_tok = spm.SentencePieceProcessor(model_file=str(folder / spec["tgt_tokenizer"]))
        keys = ("beam_size", "nbest", "batch_size", "max_source_len")
        others = {k: search.get(k, 0) for k in rules.NOT_NEGATIVE}
        vocab = self.tgt_tok.get_piece_size()
        settings = {k: search[k] for k in keys}
        if problem := rules.search_problem(**settings, vocab_size=vocab, **others):
            raise ReleaseError(problem)

    @functools.cached_property
    def joins(self) -> np.ndarray:
        """The target pieces that go on with a word (`word_continuations`)."""
        pieces = self.tgt_tok.id_to_piece(list(range(self.tgt_tok.get_piece_size())))
        return word_continuations(pieces)

    @classmethod
    def load(
        cls, folder: str | Path, int8: bool = False, threads: int | None = None, **search
    ) -> Translator:
        """The release in ``folder`` (manifest checked); ``search`` overrides the defaults it
        was exported with (beam_size, nbest, alpha, max_len_a, max_len_b, no_repeat_ngram,
        min_len_a, min_len_b), and BATCH_SIZE."""
        folder = Path(folder)
        if threads is not None and threads < 0:
            raise ReleaseError(f"threads must not be negative, not {threads}")
        check_manifest(folder)
        spec = read_spec(folder)
        given = {k: v for k, v in search.items() if v is not None}
        settings = {**spec["search"], "batch_size": BATCH_SIZE, **given}
        graphs = Graphs(folder, spec, "int8" if int8 else "fp32", threads)
        return cls(folder, graphs, settings)

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Subword ids of each line ([] for a blank one); a line over max_source_len subwords
        is refused, never cut."""
        return rules.encode_lines(
            self.src_tok.encode, lines, self.search["max_source_len"], InputTooLong
        )

    def _decode(
        self, sources: list[list[int]], steer: Sequence[SteeringIds] | None
    ) -> list[list[Hypothesis]]:
        """n-best lists of id sequences, longest first, in batches, each with its ``steer``."""
        pad, size, found = self.graphs.ids["pad"], self.search["batch_size"], []
        for start in range(0, len(sources), size):
            chunk = list(range(start, min(start + size, len(sources))))
            lengths = np.array([len(sources[i]) for i in chunk], dtype=np.int64)
            src = np.full((len(chunk), lengths.max()), pad, dtype=np.int64)
            for row, i in enumerate(chunk):
                src[row, : lengths[row]] = sources[i]
            prefix, phrases = steering_arrays(steer, chunk, pad)  # rows in the batch's order
            if problem := constraints_problem(phrases is not None, self.search["beam_size"]):
                raise ValueError(problem)
            if self.search["beam_size"] == 1:
                found += [[h] for h in greedy(self.graphs, src, lengths, self.search, prefix)]
            else:
                found += beam(self.graphs, src, lengths, self.search, prefix, phrases, self.joins)
        return found

    def translate(
        self, lines: Sequence[str], steer: Sequence[LineSteering | None] | None = None
    ) -> list[Translation]:
        """Translate the lines in length-sorted batches; the order of the input is kept.
        ``steer``: each line's prefix and constraints (one per line; None: none)."""
        if isinstance(lines, str):  # a str is a sequence of one-character lines
            raise TypeError("translate takes a list of lines, not a str: translate([line])")
        eos = self.graphs.ids["eos"]
        sources = [[*ids, eos] if ids else [] for ids in self.encode(lines)]
        if steer is not None and len(steer) != len(lines):
            raise ValueError(f"steering for {len(steer)} lines, {len(lines)} lines to translate")
        unk, no_repeat = self.tgt_tok.unk_id(), self.search.get("no_repeat_ngram", 0)
        targets = encode_steering(self.tgt_tok.encode, steer, unk, no_repeat)
        said = [t.warnings for t in targets] if targets else [[] for _ in lines]
        results = [Translation(s, [], [], w) for s, w in zip(sources, said, strict=True)]
        todo = sorted((i for i, s in enumerate(sources) if s), key=lambda i: -len(sources[i]))

        def decode(lines: list[int], given: Sequence[SteeringIds] | None) -> list[list[Hypothesis]]:
            wanted = None if given is None else [given[i] for i in lines]
            return self._decode([sources[i] for i in lines], wanted)

        for i, hyps in zip(todo, decode_steered(decode, todo, targets, self.joins), strict=True):
            results[i].hypotheses = hyps
            results[i].texts = [rules.one_line(self.tgt_tok.decode(h.tokens)) for h in hyps]
        return results
