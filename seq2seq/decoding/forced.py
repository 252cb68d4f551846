"""Forced decoding: where a model attends while it reads a given target (teacher forcing, never a
search), per subword and merged into the pairs' words."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from seq2seq.data.batching import collate_sequences
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.wordalign import WordPair, word_weights
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.runtime.engine import Engine


@dataclass
class Segmented:
    """A side's words as subword ids, and the word of each piece."""

    ids: list[int]
    word_of: list[int]


def segment(tok: Tokenizer, words: Sequence[str]) -> Segmented:
    """Each word encoded on its own (sentencepiece never joins words, so the pieces are those of
    the sentence); a word the tokenizer normalises away gets no piece and stays unaligned."""
    ids, word_of = [], []
    for index, pieces in enumerate(tok.encode_batch(list(words), threads=1) if words else []):
        ids.extend(pieces)
        word_of.extend([index] * len(pieces))
    return Segmented(ids, word_of)


class ForcedAligner:
    """A model with its tokenizers, reading given pairs: attention per subword and per word.

    Runs in the engine's compute scope; pairs are read in batches of ``batch_size``, longest first.
    Multi-head attention is averaged over its heads.
    """

    def __init__(
        self,
        model: Seq2Seq,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        engine: Engine | None = None,
        batch_size: int = 64,
    ) -> None:
        self.model, self.src_tok, self.tgt_tok = model, src_tok, tgt_tok
        self.engine, self.batch_size = engine, batch_size

    @torch.inference_mode()
    def piece_attention(
        self, sources: Sequence[Segmented], targets: Sequence[Segmented]
    ) -> list[np.ndarray]:
        """Per pair: [tgt pieces + EOS, src pieces + EOS] (row t: the step that predicts piece
        t, the last one EOS)."""
        order = sorted(range(len(sources)), key=lambda k: -len(sources[k].ids))
        out: list[np.ndarray] = [np.zeros((0, 0))] * len(sources)
        scope = self.engine.compute() if self.engine else contextlib.nullcontext()
        with scope:
            for start in range(0, len(order), self.batch_size):
                ids = order[start : start + self.batch_size]
                batch = collate_sequences(
                    [sources[k].ids for k in ids], [targets[k].ids for k in ids], np.array(ids)
                )
                if self.engine is not None:
                    batch = self.engine.to_device(batch)
                _, weights = self.model.features(batch.src, batch.src_lengths, batch.tgt_in)
                weights = weights.float().mean(dim=1).cpu().numpy()  # [B, T, S], heads averaged
                for row, k in enumerate(ids):
                    steps, cols = len(targets[k].ids) + 1, len(sources[k].ids) + 1
                    out[k] = weights[row, :steps, :cols]
        return out

    def word_attention(self, pairs: Sequence[WordPair], shift: int = 0) -> list[np.ndarray]:
        """Per pair: [target words, source words + 1] (see `word_weights`); a pair with an empty
        side gets an empty matrix."""
        sources = [segment(self.src_tok, src) for src, _ in pairs]
        targets = [segment(self.tgt_tok, tgt) for _, tgt in pairs]
        real = [k for k, (s, t) in enumerate(zip(sources, targets, strict=True)) if s.ids and t.ids]
        pieces = self.piece_attention([sources[k] for k in real], [targets[k] for k in real])
        out = [np.zeros((len(tgt), len(src) + 1)) for src, tgt in pairs]
        for k, weights in zip(real, pieces, strict=True):
            sizes = (len(pairs[k][0]), len(pairs[k][1]))
            out[k] = word_weights(weights, sources[k].word_of, targets[k].word_of, sizes, shift)
        return out
