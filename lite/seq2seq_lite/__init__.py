"""seq2seq-lite: translate with a seq2seq release's ONNX graphs, without torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece as spm

from seq2seq_lite import rules
from seq2seq_lite.release import Graphs, ReleaseError, check_manifest, read_spec
from seq2seq_lite.search import Hypothesis, beam, greedy

__all__ = ["Hypothesis", "InputTooLong", "ReleaseError", "Translation", "Translator"]

# sentences decoded together unless asked: the beam's arrays of 64 (the export's default) take
# about 120 MB more for about 6 % less time (docs/deploy.md, "Size and memory")
BATCH_SIZE = 16


@dataclass
class Translation:
    """The n-best list of one input line (best first; empty for a blank line) and the source
    subword ids the model read (pieces + EOS)."""

    source_ids: list[int]
    hypotheses: list[Hypothesis]
    texts: list[str]


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
        steering = {k: search.get(k, 0) for k in ("no_repeat_ngram", "min_len_a", "min_len_b")}
        if problem := rules.search_problem(**{k: search[k] for k in keys}, **steering):
            raise ReleaseError(problem)

    @classmethod
    def load(
        cls, folder: str | Path, int8: bool = False, threads: int | None = None, **search
    ) -> Translator:
        """The release in ``folder`` (manifest checked); ``search`` overrides the defaults it
        was exported with (beam_size, nbest, alpha, max_len_a, max_len_b, no_repeat_ngram,
        min_len_a, min_len_b), and BATCH_SIZE."""
        folder = Path(folder)
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

    def translate(self, lines: Sequence[str]) -> list[Translation]:
        """Translate the lines in length-sorted batches; the order of the input is kept."""
        eos, pad = self.graphs.ids["eos"], self.graphs.ids["pad"]
        sources = [[*ids, eos] if ids else [] for ids in self.encode(lines)]
        results = [Translation(s, [], []) for s in sources]
        todo = sorted((i for i, s in enumerate(sources) if s), key=lambda i: -len(sources[i]))
        size = self.search["batch_size"]
        for start in range(0, len(todo), size):
            chunk = todo[start : start + size]
            lengths = np.array([len(sources[i]) for i in chunk], dtype=np.int64)
            src = np.full((len(chunk), lengths.max()), pad, dtype=np.int64)
            for row, i in enumerate(chunk):
                src[row, : lengths[row]] = sources[i]
            if self.search["beam_size"] == 1:
                nbest = [[h] for h in greedy(self.graphs, src, lengths, self.search)]
            else:
                nbest = beam(self.graphs, src, lengths, self.search)
            for i, hyps in zip(chunk, nbest, strict=True):
                results[i].hypotheses = hyps
                results[i].texts = [" ".join(self.tgt_tok.decode(h.tokens).split()) for h in hyps]
        return results
