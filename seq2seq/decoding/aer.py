"""Alignment error rate against human links (Och & Ney 2003).

Gold links come in Pharaoh/talp form: ``i-j`` a sure link, ``ipj`` a possible one, one line per
sentence pair; every sure link is also possible (S ⊆ P). With A the predicted links::

    precision = |A ∩ P| / |A|    recall = |A ∩ S| / |S|
    AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

counted over the whole set, not averaged per sentence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from seq2seq.data.stream import iter_lines
from seq2seq.decoding.wordalign import Links, WordPair
from seq2seq.errors import DataError

_LINK = re.compile(r"^(\d+)([-p])(\d+)$")


@dataclass(frozen=True)
class Gold:
    """One pair's human links: ``sure`` ⊆ ``possible``, 0-based (source, target)."""

    sure: frozenset[tuple[int, int]]
    possible: frozenset[tuple[int, int]]


def parse_gold(line: str, one_based: bool = True, where: str = "gold") -> Gold:
    """One line of ``i-j`` (sure) and ``ipj`` (possible) links."""
    sure, possible = set(), set()
    offset = 1 if one_based else 0
    for item in line.split():
        match = _LINK.match(item)
        if match is None:
            raise DataError(f"{where}: '{item}' is not a link (i-j sure, ipj possible)")
        i, j = int(match[1]) - offset, int(match[3]) - offset
        if i < 0 or j < 0:
            raise DataError(f"{where}: '{item}' has a position below {offset}")
        possible.add((i, j))
        if match[2] == "-":
            sure.add((i, j))
    return Gold(frozenset(sure), frozenset(possible))


def read_gold(
    path: str | Path, pairs: Sequence[WordPair] | None = None, one_based: bool = True
) -> list[Gold]:
    """The gold links of a file, one line per pair; with ``pairs``, checked against their words."""
    lines = list(iter_lines(Path(path)))
    gold = [parse_gold(line, one_based, f"{path}:{n}") for n, line in enumerate(lines, 1)]
    if pairs is None:
        return gold
    if len(gold) != len(pairs):
        raise DataError(f"{path} has {len(gold)} lines of links for {len(pairs)} sentence pairs")
    base = 1 if one_based else 0
    for n, (links, (src, tgt)) in enumerate(zip(gold, pairs, strict=True), 1):
        outside = [(i, j) for i, j in links.possible if i >= len(src) or j >= len(tgt)]
        if outside:
            i, j = outside[0]
            raise DataError(
                f"{path}:{n}: link {i + base}-{j + base} is outside "
                f"the pair's {len(src)} source and {len(tgt)} target words (is the gold file in "
                "the other direction, or 0-based?)"
            )
    return gold


def sure_links_missing(gold: Sequence[Gold], where: str) -> str | None:
    """One line where gold links are all possible (``ipj``), none sure: recall counts sure links
    only, so it reads 0 and AER 1 - precision, which looks like a broken aligner; or where the
    gold holds no link at all (an empty or wrong file)."""
    if any(g.sure for g in gold):
        return None
    if not any(g.possible for g in gold):
        return f"{where} holds no links at all: recall and AER against it say nothing"
    return (
        f"{where} holds possible links (ipj) only, no sure one (i-j): recall counts sure links, "
        "so it is 0, and AER is 1 - precision"
    )


def alignment_scores(predicted: Sequence[Links], gold: Sequence[Gold]) -> dict[str, float]:
    """Precision, recall and AER of predicted links over a set; also the link counts.

    Nothing predicted: precision 0. No sure links: recall 0 (`sure_links_missing` says why) and
    AER 1 - precision; neither predicted nor sure links: AER 0 (nothing missed).
    """
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted alignments for {len(gold)} gold ones")
    a = s = a_s = a_p = 0
    for links, g in zip(predicted, gold, strict=True):
        a, s = a + len(links), s + len(g.sure)
        a_s += len(links & g.sure)
        a_p += len(links & g.possible)
    return {
        "aer": 1.0 - (a_s + a_p) / (a + s) if a + s else 0.0,
        "precision": a_p / a if a else 0.0,
        "recall": a_s / s if s else 0.0,
        "links": a,
        "sure": s,
    }
