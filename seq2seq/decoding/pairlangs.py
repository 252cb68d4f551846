"""Whether sentence pairs to align are in a run's languages, the right way round: text segments
into fewer pieces under its own language's subword model than under another's, so a side's
piece count under the run's model for that side, divided by its count under the other side's
model, tells which of the run's two languages it reads more like. The run's pairs the wrong way
round, or another pair's, align without an error into nonsense links: `seq2seq-align` and the
training's alignment probe warn of them with this one rule."""

from __future__ import annotations

from collections.abc import Sequence

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.wordalign import WordPair

# above 1: a side reads more like the run's other language (measured: docs/alignment.md)
OTHER = 1.0
MIN_WORDS = 100  # both sides together; at 50 words right and wrong sides overlap
SAMPLED_PAIRS = 2000  # the first pairs tell; a large file is not segmented twice


def piece_ratio(lines: Sequence[str], own: Tokenizer, other: Tokenizer) -> float:
    """Pieces of ``lines`` under ``own`` divided by their pieces under ``other``."""
    count = [sum(map(len, tok.encode_batch(lines, threads=1))) for tok in (own, other)]
    return count[0] / max(count[1], 1)


def pair_language_problem(
    pairs: Sequence[WordPair],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    langs: tuple[str, str],
    swapped: bool = False,
) -> str | None:
    """One line saying which side of the (source, target) ``pairs`` reads like the run's other
    language (of ``langs``), and what to check (``swapped``: the user swapped the file's sides);
    None where neither does, or where nothing can tell (one model for both languages, fewer
    than MIN_WORDS words)."""
    sample = pairs[:SAMPLED_PAIRS]
    if src_tok.fingerprint == tgt_tok.fingerprint:
        return None
    if sum(len(src) + len(tgt) for src, tgt in sample) < MIN_WORDS:
        return None
    lines = [[" ".join(pair[k]) for pair in sample] for k in (0, 1)]
    other = [
        piece_ratio(lines[0], src_tok, tgt_tok) > OTHER,
        piece_ratio(lines[1], tgt_tok, src_tok) > OTHER,
    ]
    if not any(other):
        return None
    said = [
        f"the {side} side reads like the run's {('target', 'source')[k]} language "
        f"({langs[1 - k]}), not its {side} ({langs[k]})"
        for k, side in enumerate(("source", "target"))
        if other[k]
    ]
    question = (
        f"drop swap=true: the file is {langs[0]} ||| {langs[1]} already"
        if all(other) and swapped
        else "are the sides swapped?"
        if all(other)
        else f"are the sides swapped, or the pairs not {langs[0]} ||| {langs[1]}?"
    )
    return f"{' and '.join(said)}: {question}"
