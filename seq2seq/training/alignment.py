"""Alignment quality during training: at every validation the model reads gold-aligned pairs
(forced decoding) and its argmax links are scored (AER), so TensorBoard shows the alignment
forming next to BLEU (``log.alignment_pairs`` / ``log.alignment_links``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.config_choices import AlignMethod
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.aer import Gold, alignment_scores, read_gold
from seq2seq.decoding.forced import ForcedAligner
from seq2seq.decoding.wordalign import WordPair, extract, read_pairs
from seq2seq.errors import DataError
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.runtime.engine import Engine


@dataclass
class AlignmentProbe:
    """Pairs and their human links, read once when training starts."""

    pairs: list[WordPair]
    gold: list[Gold]

    @classmethod
    def from_config(cls, log_cfg: Any) -> AlignmentProbe | None:
        """The probe ``log.alignment_pairs`` and ``log.alignment_links`` name; None without."""
        pairs_path, links_path = log_cfg.alignment_pairs, log_cfg.alignment_links
        if pairs_path is None and links_path is None:
            return None
        for path in (pairs_path, links_path):
            if not Path(path).is_file():
                raise DataError(f"alignment gold file not found: {path}")
        pairs = read_pairs(pairs_path)
        return cls(pairs, read_gold(links_path, pairs))

    def measure(
        self, model: Seq2Seq, src_tok: Tokenizer, tgt_tok: Tokenizer, engine: Engine
    ) -> dict[str, float]:
        """AER, precision and recall of the model's argmax links (no shift) on the pairs."""
        aligner = ForcedAligner(model, src_tok, tgt_tok, engine)
        weights = aligner.word_attention(self.pairs)
        scores = alignment_scores([extract(w, AlignMethod.argmax) for w in weights], self.gold)
        return {
            "aer": scores["aer"],
            "alignment_precision": scores["precision"],
            "alignment_recall": scores["recall"],
        }
