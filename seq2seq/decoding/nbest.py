"""The n-best list of a translation: one list of (text, score) candidates, written three ways.

Every command takes the candidates from `candidates` and the score to 4 decimals; each keeps the
layout its users read: Moses' ``index ||| text ||| score`` lines in evaluation's ``.nbest`` file,
``score<TAB>text`` per candidate in the translate command, JSON objects in the server's answers.
"""

from __future__ import annotations

from typing import Any

from seq2seq_lite.text import NBEST_SEPARATOR, scored

from seq2seq.decoding.inference import Translation, TranslatorBase


def candidates(translator: TranslatorBase, translation: Translation) -> list[tuple[str, float]]:
    """(detokenized text, the search's score) of each hypothesis, best first; none for a blank
    line."""
    return [(translator.text(h), h.score) for h in translation.hypotheses]


def moses_lines(index: int, translator: TranslatorBase, translation: Translation) -> list[str]:
    """Moses' n-best lines of input line `index` (from 0): ``index ||| text ||| score``."""
    return [
        NBEST_SEPARATOR.join((str(index), text, f"{score:.4f}"))
        for text, score in candidates(translator, translation)
    ]


def scored_lines(translator: TranslatorBase, translation: Translation) -> list[str]:
    """``score<TAB>text`` of each candidate (the translate command's form)."""
    return [scored(text, score) for text, score in candidates(translator, translation)]


def json_candidates(translator: TranslatorBase, translation: Translation) -> list[dict[str, Any]]:
    """``{"translation": text, "score": score}`` of each candidate (the server's form)."""
    return [
        {"translation": text, "score": round(score, 4)}
        for text, score in candidates(translator, translation)
    ]
