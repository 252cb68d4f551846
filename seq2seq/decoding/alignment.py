"""Where a translation attended, in the forms the commands write and log.

One module for every alignment record: the heatmap sample and attention statistics of
validation and TensorBoard, the JSON form (evaluation's ``.attn.jsonl`` lines and the server's
``alignment``), the Pharaoh form (evaluation's ``.align``) and the terminal view (the translate
command's ``show_alignment``). No drawing library is imported here: see `seq2seq.decoding.heatmap`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import Tensor

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.inference import Translation, TranslatorBase
from seq2seq.decoding.search import Hypothesis
from seq2seq.vocab import EOS

# -- heatmap samples and statistics (validation, evaluation, TensorBoard) ---------------------


@dataclass
class AttentionSample:
    """One decoded sentence: texts for the table, subword labels and attention for the heatmap.

    `weights` (array or CPU tensor) is [tgt, src] or [heads, tgt, src]; the pieces include "</s>"
    where the weights have an EOS row or column.
    """

    source: str
    reference: str
    hypothesis: str
    source_pieces: list[str]
    target_pieces: list[str]
    weights: np.ndarray

    def __post_init__(self) -> None:
        weights = np.asarray(self.weights, dtype=np.float32)
        if weights.ndim == 3 and weights.shape[0] == 1:
            weights = weights[0]  # single-head attention reported with a heads axis
        if weights.ndim not in (2, 3):
            raise ValueError(
                f"attention weights must be [tgt, src] or [heads, tgt, src], got {weights.shape}"
            )
        expected = (len(self.target_pieces), len(self.source_pieces))
        if weights.shape[-2:] != expected:
            raise ValueError(
                f"attention weights {weights.shape} do not match {expected[0]} target and "
                f"{expected[1]} source pieces"
            )
        self.weights = weights


def hypothesis_weights(hypothesis: Hypothesis) -> np.ndarray:
    """Where a hypothesis attended: [heads, tgt, src] for multi-head attention, else [tgt, src]."""
    weights = hypothesis.head_attention
    return (hypothesis.attention if weights is None else weights).float().numpy()


def attention_sample(
    source: str,
    reference: str,
    hypothesis: Hypothesis,
    src_ids: Iterable[int],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
) -> AttentionSample:
    """The heatmap sample of one decoded sentence; `src_ids` are its encoded source with EOS."""
    return AttentionSample(
        source=source,
        reference=reference,
        hypothesis=tgt_tok.decode(hypothesis.tokens),
        source_pieces=src_tok.pieces(src_ids),  # ends with "</s>"
        target_pieces=tgt_tok.pieces([*hypothesis.tokens, EOS]),  # the EOS row of the weights
        weights=hypothesis_weights(hypothesis),
    )


def attention_samples(
    sources: Sequence[str],
    references: Sequence[str],
    translations: Sequence[Translation],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    count: int,
) -> list[AttentionSample]:
    """The heatmap samples of the first `count` decoded (non-blank) sentences."""
    decoded = [i for i, t in enumerate(translations) if t.hypotheses]
    return [
        attention_sample(
            sources[i],
            references[i],
            translations[i].hypotheses[0],
            translations[i].source_ids,
            src_tok,
            tgt_tok,
        )
        for i in decoded[:count]
    ]


def attention_statistics(weights_list: Sequence[np.ndarray]) -> dict[str, float]:
    """Mean entropy (nats) and mean largest weight of the attention rows, over all target tokens.

    Each item is [tgt, src] (or [heads, tgt, src]: every head's row counts as one) with rows
    normalised over the real source positions.
    """
    rows = [
        np.asarray(w, dtype=np.float64).reshape(-1, np.shape(w)[-1])
        for w in weights_list
        if np.size(w)
    ]
    if not rows:
        raise ValueError("attention_statistics needs at least one non-empty attention matrix")
    entropy = 0.0
    largest = 0.0
    count = 0
    for p in rows:
        logs = np.log(np.where(p > 0, p, 1.0))
        entropy += float(-(p * logs).sum())
        largest += float(p.max(axis=1).sum())
        count += p.shape[0]
    return {"attention_entropy": entropy / count, "attention_max_weight": largest / count}


# -- the JSON and Pharaoh forms (evaluation's files, the server's answers) ---------------------


def _rounded(weights: Tensor) -> list:
    """Weights as nested lists of floats with 4 decimals."""
    return weights.double().numpy().round(4).tolist()


def alignment_record(
    translator: TranslatorBase, translation: Translation, head_weights: bool = True
) -> dict[str, Any]:
    """The JSON form of where the best hypothesis attended: subword labels and weights
    [target + EOS][source + EOS] (4 decimals); with `head_weights`, multi-head attention adds
    each head's [heads][target + EOS][source + EOS]. Empty lists for a blank line."""
    hypothesis = translation.hypotheses[0] if translation.hypotheses else None
    record: dict[str, Any] = {"source": [], "target": [], "weights": []}
    if hypothesis is not None:
        record["source"] = translator.source_pieces(translation)
        record["target"] = translator.target_pieces(hypothesis)
        record["weights"] = _rounded(hypothesis.attention)
        if head_weights and hypothesis.head_attention is not None:
            record["head_weights"] = _rounded(hypothesis.head_attention)
    return record


def pharaoh(attention: np.ndarray) -> str:
    """``i-j`` pairs (source subword i, target subword j, from 0) of an attention matrix.

    `attention` is [target + EOS, source + EOS]. Each target subword is aligned to the source
    subword it attends to most; one whose largest weight is on the source EOS stays unaligned.
    """
    best = np.asarray(attention)[:-1].argmax(axis=1)  # [target]
    eos = attention.shape[1] - 1
    return " ".join(f"{i}-{j}" for j, i in enumerate(best.tolist()) if i != eos)


# -- the terminal view (the translate command) -------------------------------------------------

_SHADES = ((0.7, "█"), (0.5, "▓"), (0.3, "▒"), (0.1, "░"))  # lowest weight drawn with each shade
_MAX_SOURCE_LABEL = 12  # display columns of a source subword label in the grid
_MAX_TARGET_LABEL = 16


def _width(text: str) -> int:
    """Terminal columns of `text`: wide (CJK) characters take two, combining marks none."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def _fit(text: str, columns: int) -> str:
    """`text` cut to at most `columns` terminal columns, with "…" where it was cut."""
    if _width(text) <= columns:
        return text
    while _width(text) > columns - 1:
        text = text[:-1]
    return text + "…"


def _pad(text: str, columns: int) -> str:
    return text + " " * (columns - _width(text))


def _shade(weight: float) -> str:
    return next((char for low, char in _SHADES if weight >= low), " ")


def _grid(
    row_labels: Sequence[str], col_labels: Sequence[str], weights: np.ndarray
) -> tuple[list[str], int]:
    """Lines of a shaded grid with the given labels, and its width in terminal columns."""
    label_width = max(map(_width, row_labels)) + 1
    columns = [max(_width(label), 2) for label in col_labels]
    header = " " * label_width + " ".join(
        _pad(label, c) for label, c in zip(col_labels, columns, strict=True)
    )
    rows = [
        _pad(label, label_width)
        + " ".join(_shade(w) * c for w, c in zip(row, columns, strict=True))
        for label, row in zip(row_labels, weights, strict=True)
    ]
    return [line.rstrip() for line in (header, *rows)], label_width + sum(c + 1 for c in columns)


def _wrap(items: Sequence[str], width: int) -> list[str]:
    """`items` joined by two spaces into lines of at most `width` columns."""
    lines, line = [], ""
    for item in items:
        if line and _width(line) + 2 + _width(item) > width:
            lines.append(line)
            line = ""
        line = f"{line}  {item}" if line else item
    return [*lines, line]


def alignment_view(
    source: Sequence[str], target: Sequence[str], weights: np.ndarray, width: int = 80
) -> str:
    """Attention weights [target, source] as text that fits `width` terminal columns.

    A shaded grid, target subwords down and source subwords across (darker = more attention),
    labelled with the subwords when that fits, else with their numbers and a key below. When not
    even that fits, one ``target ← source (weight)`` line per target subword.
    """
    weights = np.asarray(weights, dtype=np.float64)
    src_labels = [_fit(piece, _MAX_SOURCE_LABEL) for piece in source]
    tgt_labels = [_fit(piece, _MAX_TARGET_LABEL) for piece in target]
    legend = "  ".join(f"{char} ≥{low:.1f}" for low, char in reversed(_SHADES))
    lines, used = _grid(tgt_labels, src_labels, weights)
    if used <= width:
        return "\n".join([*lines, legend])
    lines, used = _grid(tgt_labels, [str(j) for j in range(len(source))], weights)
    if used <= width:
        key = [f"{j}:{label}" for j, label in enumerate(src_labels)]
        return "\n".join([*lines, legend, *_wrap(key, width)])
    label_width = max(map(_width, tgt_labels)) + 1
    return "\n".join(
        f"{_pad(label, label_width)}← {src_labels[j]} ({row[j]:.2f})"
        for label, row, j in zip(tgt_labels, weights, weights.argmax(axis=1), strict=True)
    )


def best_alignment_view(translator: TranslatorBase, translation: Translation, width: int) -> str:
    """`alignment_view` of the best hypothesis of a (non-blank) translation."""
    best = translation.hypotheses[0]
    view = alignment_view(
        translator.source_pieces(translation),
        translator.target_pieces(best),
        best.attention.numpy(),
        width,
    )
    if best.head_attention is not None:
        view += f"  (mean of {best.head_attention.size(0)} heads)"
    return view
