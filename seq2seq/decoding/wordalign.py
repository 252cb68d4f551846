"""Word alignment from attention: subword weights merged into words, links extracted, and two
directions symmetrised as statistical aligners do.

Words are the whitespace-separated tokens of a pair's two sides; a link is a 0-based
``(source word, target word)`` pair, written ``i-j`` (Pharaoh's form).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seq2seq.config_choices import AlignMethod, Symmetrize
from seq2seq.data.corpus import read_parallel
from seq2seq.data.stream import iter_lines
from seq2seq.errors import DataError

WordPair = tuple[list[str], list[str]]  # (source words, target words)
Links = set[tuple[int, int]]  # {(source word, target word)}


def read_pairs(path: str | Path) -> list[WordPair]:
    """``source ||| target`` lines -> (source words, target words) per line (blank lines at the
    end left out)."""
    pairs, lines = [], list(iter_lines(Path(path)))
    while lines and not lines[-1].strip():  # blank lines at the end: an editor's, not pairs
        lines.pop()
    for number, line in enumerate(lines, 1):
        if line.count("|||") != 1:
            raise DataError(f"{path}:{number}: expected one 'source ||| target' per line")
        source, target = line.split("|||")
        pairs.append((source.split(), target.split()))
    if not pairs:  # as evaluate and the parallel files answer an empty input
        raise DataError(f"{path} is empty")
    return pairs


def read_parallel_pairs(source: str | Path, target: str | Path) -> list[WordPair]:
    """Two files (plain or .gz) of as many lines, the words of line n in one aligned to those of
    line n."""
    sources, targets = read_parallel(Path(source), Path(target))
    return [(s.split(), t.split()) for s, t in zip(sources, targets, strict=True)]


def word_weights(
    pieces: np.ndarray,
    src_word_of: Sequence[int],
    tgt_word_of: Sequence[int],
    words: tuple[int, int],
    shift: int = 0,
) -> np.ndarray:
    """Subword attention [tgt pieces + EOS, src pieces + EOS] -> word attention
    [tgt words, src words + 1] (the last column: the weight on the source EOS).

    ``*_word_of[k]`` is the word of piece k, ``words`` the (source, target) word counts. Each
    target word's rows are averaged over its pieces (a distribution stays one), each source
    word's columns summed (the mass on the word). With ``shift`` k, target piece j reads the row
    of step j + k (rows past either end: unaligned); a word without pieces stays all zero.
    """
    pieces = np.asarray(pieces, dtype=np.float64)
    steps, cols = pieces.shape
    n_src, n_tgt = words
    if len(tgt_word_of) != steps - 1 or len(src_word_of) != cols - 1:
        raise ValueError(f"{pieces.shape} weights for {len(tgt_word_of)}/{len(src_word_of)} pieces")
    rows = np.zeros((steps - 1, cols))  # [tgt pieces, src pieces + EOS]
    for j in range(steps - 1):
        if 0 <= j + shift < steps:
            rows[j] = pieces[j + shift]
    src_map = np.zeros((cols, n_src + 1))  # sums a source word's pieces
    src_map[np.arange(cols - 1), src_word_of] = 1.0
    src_map[cols - 1, n_src] = 1.0
    tgt_map = np.zeros((n_tgt, steps - 1))  # averages a target word's pieces
    tgt_map[tgt_word_of, np.arange(steps - 1)] = 1.0
    tgt_map /= np.maximum(tgt_map.sum(axis=1, keepdims=True), 1.0)
    return tgt_map @ rows @ src_map  # [tgt words, src words + 1]


def extract(weights: np.ndarray, method: AlignMethod, threshold: float = 0.3) -> Links:
    """Links of a word attention matrix [tgt words, src words + EOS]."""
    weights = np.asarray(weights)
    eos = weights.shape[1] - 1
    if method == AlignMethod.argmax:
        best = weights.argmax(axis=1)
        return {(int(i), j) for j, i in enumerate(best) if i != eos and weights[j, i] > 0.0}
    tgt, src = np.nonzero(weights[:, :eos] >= threshold)
    return {(int(i), int(j)) for i, j in zip(src, tgt, strict=True)}


_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def symmetrize(forward: Links, backward: Links, how: Symmetrize) -> Links:
    """Links of two directions (both as (source, target)) combined: `Symmetrize`'s methods."""
    union = forward | backward
    if how == Symmetrize.union:
        return set(union)
    links = forward & backward
    if how == Symmetrize.intersection:
        return links
    src_done = {i for i, _ in links}
    tgt_done = {j for _, j in links}

    def add(i: int, j: int) -> None:
        links.add((i, j))
        src_done.add(i)
        tgt_done.add(j)

    grown = True
    while grown:  # grow-diag: neighbours in the union that align a word not yet aligned
        grown = False
        for i, j in sorted(links):
            for di, dj in _NEIGHBOURS:
                point = (i + di, j + dj)
                if (
                    point in union
                    and point not in links
                    and (point[0] not in src_done or point[1] not in tgt_done)
                ):
                    add(*point)
                    grown = True
    both = how == Symmetrize.grow_diag_final_and
    for direction in (forward, backward):  # final(-and): words still unaligned, as Koehn's
        for i, j in sorted(direction - links):  # steps take them: one direction, then the other
            free = (i not in src_done, j not in tgt_done)
            if all(free) if both else any(free):
                add(i, j)
    return links


def flipped(links: Links) -> Links:
    """(target, source) links of the reverse direction as (source, target)."""
    return {(j, i) for i, j in links}


def read_pharaoh(path: str | Path) -> list[Links]:
    """A file of ``i-j`` links (0-based), one line per pair."""
    lines = list(iter_lines(Path(path)))
    try:
        return [{tuple(map(int, x.split("-"))) for x in line.split()} for line in lines]
    except ValueError:
        raise DataError(f"{path}: not Pharaoh links (i-j ...)") from None


def pharaoh_line(links: Links) -> str:
    """``i-j`` links, sorted by source then target word."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))
