"""Alignment quality during training: at every validation the model reads gold-aligned pairs
(forced decoding) and its argmax links are scored (AER), so TensorBoard shows the alignment
forming next to BLEU (``log.alignment_pairs`` / ``log.alignment_links``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.config_choices import AlignMethod
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.aer import Gold, alignment_scores, read_gold, sure_links_missing
from seq2seq.decoding.forced import ForcedAligner
from seq2seq.decoding.pairlangs import pair_language_problem
from seq2seq.decoding.wordalign import WordPair, extract, read_pairs
from seq2seq.errors import DataError
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.runtime.engine import Engine

log = logging.getLogger("seq2seq.train")


@dataclass
class AlignmentProbe:
    """Pairs and their human links, read once when training starts."""

    pairs: list[WordPair]
    gold: list[Gold]

    @classmethod
    def from_config(
        cls, cfg: Any, tokenizers: tuple[Tokenizer, Tokenizer] | None = None
    ) -> AlignmentProbe | None:
        """The probe a run's ``log.alignment_pairs`` and ``log.alignment_links`` name; None
        without. Warned of here, once: a gold file without sure links, and (given the run's
        ``tokenizers``) pairs that do not read like the run's languages."""
        pairs_path, links_path = cfg.log.alignment_pairs, cfg.log.alignment_links
        if pairs_path is None and links_path is None:
            return None
        for path in (pairs_path, links_path):
            if not Path(path).is_file():
                raise DataError(f"alignment gold file not found: {path}")
        pairs = read_pairs(pairs_path)
        gold = read_gold(links_path, pairs)
        if note := sure_links_missing(gold, f"log.alignment_links={links_path}"):
            log.warning(note)
        langs = (cfg.data.src_lang, cfg.data.tgt_lang)
        if tokenizers and (problem := pair_language_problem(pairs, *tokenizers, langs)):
            log.warning("log.alignment_pairs, read by a %s->%s run: %s", *langs, problem)
        return cls(pairs, gold)

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
