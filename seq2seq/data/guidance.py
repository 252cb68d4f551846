"""Guided alignment's targets: a statistical aligner's word links of the training pairs, as the
attention each target subword should have (Chen et al. 2016; Garg et al. 2019).

The links file has one line per line of the training split, Pharaoh ``i-j`` (0-based source and
target words, words split at whitespace, as in the training text). A link joins every piece of
its source word to every piece of its target word; a target piece's row is uniform over the
source pieces it is linked to, and a piece without links is not guided.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from seq2seq.data.dataset import TokenizedCorpus
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.errors import DataError, require_file

log = logging.getLogger(__name__)
WORD_START = "▁"  # sentencepiece's mark of a piece that begins a word


def word_starts(tok: Tokenizer) -> np.ndarray:
    """[vocab] bool: whether each piece begins a whitespace word."""
    pieces = tok.pieces(range(tok.vocab_size))
    return np.array([piece.startswith(WORD_START) for piece in pieces])


def words_of(ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The word of each piece of a sentence (pieces without EOS)."""
    return np.maximum(np.cumsum(starts[ids]) - 1, 0)


def _read_links(path: Path) -> list[list[tuple[int, int]]]:
    lines = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                lines.append([tuple(map(int, item.split("-"))) for item in line.split()])
            except ValueError:
                raise DataError(f"{path}:{number}: not Pharaoh links (i-j ...)") from None
    return lines


class AlignmentTargets:
    """Per training pair, the (target piece, source piece) positions of its links."""

    def __init__(self, pairs: list[np.ndarray]) -> None:
        self.pairs = pairs  # pair -> [links, 2] int32 (target piece, source piece)

    @classmethod
    def load(
        cls, path: str | Path, corpus: TokenizedCorpus, src_tok: Tokenizer, tgt_tok: Tokenizer
    ) -> AlignmentTargets:
        """The targets of ``corpus`` from the links of its training lines."""
        path = require_file(path, "train.guided_alignment")
        links = _read_links(path)
        if len(corpus) and int(np.max(corpus.line_numbers)) >= len(links):
            raise DataError(
                f"{path} has {len(links)} lines, fewer than the training split: it needs one "
                "line of links per training pair"
            )
        starts = word_starts(src_tok), word_starts(tgt_tok)
        pairs, unusable = [], 0
        for i in range(len(corpus)):
            src_words = words_of(corpus.src(i)[:-1], starts[0])
            tgt_words = words_of(corpus.tgt(i)[:-1], starts[1])
            found = _piece_links(links[corpus.line_numbers[i]], src_words, tgt_words)
            unusable += found is None
            pairs.append(found if found is not None else np.zeros((0, 2), dtype=np.int32))
        if unusable:
            log.warning("%d training pairs have links past their words: not guided", unusable)
        return cls(pairs)

    def batch(self, ids: np.ndarray, tgt_len: int, src_len: int) -> torch.Tensor:
        """[B, tgt_len, src_len] float: each guided row a distribution, the others zero."""
        target = np.zeros((len(ids), tgt_len, src_len), dtype=np.float32)
        for row, i in enumerate(np.asarray(ids).tolist()):
            links = self.pairs[i]
            target[row, links[:, 0], links[:, 1]] = 1.0
        sums = target.sum(axis=2, keepdims=True)
        return torch.from_numpy(target / np.maximum(sums, 1.0))


def _piece_links(
    links: list[tuple[int, int]], src_words: np.ndarray, tgt_words: np.ndarray
) -> np.ndarray | None:
    """(target piece, source piece) of every piece pair of linked words; None where a link
    names a word the sentence does not have (the links belong to other text)."""
    n_src = int(src_words[-1]) + 1 if len(src_words) else 0
    n_tgt = int(tgt_words[-1]) + 1 if len(tgt_words) else 0
    out = []
    for i, j in links:
        if i >= n_src or j >= n_tgt:
            return None
        src_pieces, tgt_pieces = np.nonzero(src_words == i)[0], np.nonzero(tgt_words == j)[0]
        out.extend((t, s) for t in tgt_pieces for s in src_pieces)
    return np.array(out, dtype=np.int32).reshape(-1, 2)
