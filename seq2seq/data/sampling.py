"""Subword regularisation: every time a training batch is built, each of its sentences is
segmented anew, drawn from the sentencepiece model's segmentations (Kudo, 2018: unigram sampling;
BPE-dropout for a BPE model), instead of the one best segmentation kept in the token-id cache."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from seq2seq.config import DataConfig
from seq2seq.data.batching import Batch, collate_sequences
from seq2seq.data.dataset import TokenizedCorpus
from seq2seq.data.prepare import TrainingData
from seq2seq.data.tokenizer import Tokenizer


class SubwordSampler:
    """Collates batches of ``corpus`` positions from freshly sampled segmentations of the text.

    The draw is seeded by (seed, epoch, the batch's pairs): it repeats within one process, but
    sentencepiece (0.2.3, measured) draws differently in another process with the same seed, so
    a resumed run samples other segmentations than an uninterrupted one. A sentence whose sample
    is longer than ``max_len`` pieces keeps its cached segmentation (longer pairs were dropped).
    """

    def __init__(
        self,
        corpus: TokenizedCorpus,
        texts: tuple[Sequence[str], Sequence[str]],  # each side's text by line number
        tokenizers: tuple[Tokenizer, Tokenizer],
        alpha: float,
        max_len: int,
        seed: int,
    ) -> None:
        self.corpus, self.texts, self.tokenizers = corpus, texts, tokenizers
        self.alpha, self.max_len, self.seed = alpha, max_len, seed

    @classmethod
    def for_training(cls, data: TrainingData, cfg: DataConfig, seed: int) -> SubwordSampler | None:
        """The sampler of a training run, or None where ``data.sampling_alpha`` is 0."""
        if not cfg.sampling_alpha or data.train_text is None:
            return None
        tokenizers = (data.src_tok, data.tgt_tok)
        return cls(data.train, data.train_text, tokenizers, cfg.sampling_alpha, cfg.max_len, seed)

    def collate(self, ids: np.ndarray, epoch: int) -> Batch:
        """The batch of pairs ``ids`` [B], each side sampled with ``alpha``."""
        ids = np.asarray(ids, dtype=np.int64)
        lines = np.asarray(self.corpus.line_numbers)[ids]
        draw = zlib.crc32(ids.tobytes(), zlib.crc32(np.int64([self.seed, epoch]).tobytes()))
        sides = []
        cached = (self.corpus.src, self.corpus.tgt)
        for side, (text, tok) in enumerate(zip(self.texts, self.tokenizers, strict=True)):
            pieces = tok.sample_batch([text[i] for i in lines], self.alpha, draw + side)
            sides.append(
                [
                    p if len(p) <= self.max_len else cached[side](i)[:-1].tolist()
                    for p, i in zip(pieces, ids, strict=True)
                ]
            )
        return collate_sequences(*sides, ids)
