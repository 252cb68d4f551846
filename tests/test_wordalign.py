"""Word alignment without a model: gold links, AER as defined (Och & Ney 2003), subword weights
merged into words, link extraction and symmetrisation, on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest

from seq2seq.config_choices import AlignMethod, Symmetrize
from seq2seq.decoding.aer import Gold, alignment_scores, parse_gold, read_gold
from seq2seq.decoding.wordalign import (
    extract,
    flipped,
    pharaoh_line,
    read_pairs,
    read_parallel_pairs,
    read_pharaoh,
    symmetrize,
    word_weights,
)
from seq2seq.errors import DataError


def gold(sure: set, possible_only: set = frozenset()) -> Gold:
    return Gold(frozenset(sure), frozenset(set(sure) | set(possible_only)))


def test_gold_lines_are_one_based_and_sure_links_are_possible() -> None:
    g = parse_gold("1-1 2p3 3-2")
    assert g.sure == {(0, 0), (2, 1)}
    assert g.possible == {(0, 0), (1, 2), (2, 1)}
    assert parse_gold("0-0 1p2", one_based=False).possible == {(0, 0), (1, 2)}
    assert parse_gold("") == gold(set())


@pytest.mark.parametrize("line", ["1-x", "1:2", "1-2-3", "0-1", "1p0"])
def test_bad_gold_links_are_refused_with_the_place(line: str) -> None:
    with pytest.raises(DataError, match="gold"):
        parse_gold(line)


def test_aer_precision_recall_as_defined() -> None:
    # S = {00, 11}, P = S + {22}; A = {00, 11, 22, 02}: |A∩S| = 2, |A∩P| = 3, |A| = 4, |S| = 2.
    predicted = {(0, 0), (1, 1), (2, 2), (0, 2)}
    scores = alignment_scores([predicted], [gold({(0, 0), (1, 1)}, {(2, 2)})])
    assert scores["precision"] == pytest.approx(3 / 4)
    assert scores["recall"] == pytest.approx(1.0)
    assert scores["aer"] == pytest.approx(1 - 5 / 6)
    assert (scores["links"], scores["sure"]) == (4, 2)


def test_aer_counts_over_the_set_not_per_sentence() -> None:
    predicted = [{(0, 0)}, {(0, 0), (1, 0), (2, 0)}]
    golds = [gold({(0, 0)}), gold({(2, 0)})]
    # |A| = 4, |S| = 2, |A∩S| = 2, |A∩P| = 2: AER = 1 - 4/6 (a mean per sentence gives 0.25).
    assert alignment_scores(predicted, golds)["aer"] == pytest.approx(1 / 3)


def test_possible_links_raise_precision_but_never_recall() -> None:
    only_possible = alignment_scores([{(1, 1)}], [gold({(0, 0)}, {(1, 1)})])
    assert (only_possible["precision"], only_possible["recall"]) == (1.0, 0.0)
    assert only_possible["aer"] == pytest.approx(1 - 1 / 2)
    # a set whose gold has possible links only: recall has nothing to count, AER = 1 - |A∩P|/|A|
    scores = alignment_scores([{(0, 0), (1, 1)}], [gold(set(), {(0, 0)})])
    assert scores["recall"] == 0.0 and scores["aer"] == pytest.approx(0.5)


def test_empty_predictions_and_sentences_without_links() -> None:
    nothing = alignment_scores([set(), set()], [gold({(0, 0)}), gold(set())])
    assert (nothing["aer"], nothing["precision"], nothing["recall"]) == (1.0, 0.0, 0.0)
    # a pair without gold links and without predictions changes nothing
    alone = alignment_scores([{(0, 0)}], [gold({(0, 0)})])
    padded = alignment_scores([{(0, 0)}, set()], [gold({(0, 0)}), gold(set())])
    assert alone == padded and alone["aer"] == 0.0
    assert alignment_scores([set()], [gold(set())])["aer"] == 0.0
    with pytest.raises(ValueError):
        alignment_scores([set()], [])


def test_gold_files_are_checked_against_the_pairs(tmp_path) -> None:
    pairs_file = tmp_path / "pairs.txt"
    pairs_file.write_text("a b ||| x y z\nc ||| w\n", encoding="utf-8")
    pairs = read_pairs(pairs_file)
    assert pairs == [(["a", "b"], ["x", "y", "z"]), (["c"], ["w"])]
    links = tmp_path / "gold.talp"
    links.write_text("1-1 2p3\n1-1\n", encoding="utf-8")
    assert read_gold(links, pairs)[0] == gold({(0, 0)}, {(1, 2)})
    links.write_text("1-1 3-1\n1-1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"gold.talp:1: link 3-1 is outside"):
        read_gold(links, pairs)
    links.write_text("1-1\n", encoding="utf-8")
    with pytest.raises(DataError, match="1 lines of links for 2 sentence pairs"):
        read_gold(links, pairs)
    pairs_file.write_text("a b ||| x y z\nc ||| w\n\n \n", encoding="utf-8")  # blank at the end
    assert read_pairs(pairs_file) == pairs
    pairs_file.write_text("a ||| x\n\nc ||| w\n", encoding="utf-8")  # a blank pair: refused
    with pytest.raises(DataError, match="pairs.txt:2"):
        read_pairs(pairs_file)
    pairs_file.write_text("no separator\n", encoding="utf-8")
    with pytest.raises(DataError, match="pairs.txt:1"):
        read_pairs(pairs_file)
    pairs_file.write_text("", encoding="utf-8")  # refused as evaluate refuses an empty file
    with pytest.raises(DataError, match=r"pairs.txt is empty$"):
        read_pairs(pairs_file)


def test_parallel_files_need_as_many_lines(tmp_path) -> None:
    (tmp_path / "s").write_text("a b\nc\n", encoding="utf-8")
    (tmp_path / "t").write_text("x\ny z\n", encoding="utf-8")
    assert read_parallel_pairs(tmp_path / "s", tmp_path / "t")[1] == (["c"], ["y", "z"])
    (tmp_path / "t").write_text("x\n", encoding="utf-8")
    with pytest.raises(DataError, match="parallel"):
        read_parallel_pairs(tmp_path / "s", tmp_path / "t")


# Subword attention of a pair with source words [w0 = p0 p1, w1 = p2] and target words
# [v0 = q0, v1 = q1 q2]: rows q0, q1, q2, EOS; columns p0, p1, p2, EOS.
PIECES = np.array(
    [
        [0.5, 0.3, 0.1, 0.1],
        [0.1, 0.1, 0.7, 0.1],
        [0.0, 0.2, 0.4, 0.4],
        [0.0, 0.0, 0.1, 0.9],
    ]
)
SRC_OF, TGT_OF = [0, 0, 1], [0, 1, 1]


def test_subword_weights_become_word_weights() -> None:
    words = word_weights(PIECES, SRC_OF, TGT_OF, (2, 2))
    # v0: w0 = .5 + .3, w1 = .1, EOS .1; v1: the mean of q1 and q2's rows, summed per word
    expected = np.array([[0.8, 0.1, 0.1], [0.2, 0.55, 0.25]])
    np.testing.assert_allclose(words, expected)
    np.testing.assert_allclose(words.sum(axis=1), 1.0)


def test_shift_reads_a_neighbouring_step() -> None:
    later = word_weights(PIECES, SRC_OF, TGT_OF, (2, 2), shift=1)
    # v0 reads q1's row; v1 the mean of q2's and EOS's rows
    np.testing.assert_allclose(later, [[0.2, 0.7, 0.1], [0.1, 0.25, 0.65]])
    earlier = word_weights(PIECES, SRC_OF, TGT_OF, (2, 2), shift=-1)
    np.testing.assert_allclose(earlier[0], [0.0, 0.0, 0.0])  # before the first step: unaligned
    np.testing.assert_allclose(earlier[1], [0.5, 0.4, 0.1])  # the mean of q0's and q1's rows
    assert extract(earlier, AlignMethod.argmax) == {(0, 1)}


def test_words_without_pieces_stay_unaligned() -> None:
    words = word_weights(PIECES, SRC_OF, TGT_OF, (3, 3))  # a third word on each side, no pieces
    assert words.shape == (3, 4)
    np.testing.assert_allclose(words[2], 0.0)
    np.testing.assert_allclose(words[:, 2], 0.0)
    assert extract(words, AlignMethod.argmax) == {(0, 0), (1, 1)}


def test_argmax_leaves_a_word_attending_to_eos_unaligned_and_threshold_keeps_many() -> None:
    words = np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7], [0.35, 0.35, 0.3]])
    assert extract(words, AlignMethod.argmax) == {(0, 0), (0, 2)}
    assert extract(words, AlignMethod.threshold, 0.3) == {(0, 0), (1, 0), (0, 2), (1, 2)}
    assert extract(words, AlignMethod.threshold, 0.5) == {(0, 0)}


def test_symmetrization() -> None:
    forward = {(0, 0), (1, 1), (2, 3)}
    backward = {(0, 0), (1, 1), (1, 2), (3, 3)}
    assert symmetrize(forward, backward, Symmetrize.intersection) == {(0, 0), (1, 1)}
    assert symmetrize(forward, backward, Symmetrize.union) == forward | backward
    # grow-diag: (1, 2) neighbours (1, 1) and aligns target 2; (2, 3) neighbours (1, 2) and
    # aligns source 2 and target 3; (3, 3) neighbours (2, 3) and aligns source 3.
    gdf = symmetrize(forward, backward, Symmetrize.grow_diag_final)
    assert gdf == {(0, 0), (1, 1), (1, 2), (2, 3), (3, 3)}
    assert symmetrize(forward, backward, Symmetrize.grow_diag_final_and) == gdf
    # no neighbour of the intersection: final takes (0, 4) (target 4 unaligned), final-and
    # wants both words unaligned (source 0 is), and takes (3, 2)
    forward, backward = {(0, 0), (0, 4)}, {(0, 0), (3, 2)}
    assert symmetrize(forward, backward, Symmetrize.grow_diag_final) == {(0, 0), (0, 4), (3, 2)}
    assert symmetrize(forward, backward, Symmetrize.grow_diag_final_and) == {(0, 0), (3, 2)}
    # Koehn's final(-and) takes the forward links before the backward ones: (0, 1), then
    # (0, 0) finds source 0 aligned (taken in sorted order over the union, (0, 0) came first)
    forward, backward = {(0, 1)}, {(0, 0)}
    assert symmetrize(forward, backward, Symmetrize.grow_diag_final_and) == {(0, 1)}
    assert symmetrize(backward, forward, Symmetrize.grow_diag_final_and) == {(0, 0)}


def test_pharaoh_lines_are_sorted_and_reverse_links_flip() -> None:
    assert pharaoh_line({(2, 0), (0, 1), (0, 0)}) == "0-0 0-1 2-0"
    assert pharaoh_line(set()) == ""
    assert flipped({(0, 2), (1, 0)}) == {(2, 0), (0, 1)}


def test_pharaoh_files_read_back(tmp_path) -> None:
    path = tmp_path / "links.align"
    path.write_text("0-0 2-1\n\n1-3\n", encoding="utf-8")
    assert read_pharaoh(path) == [{(0, 0), (2, 1)}, set(), {(1, 3)}]
    path.write_text("0-0 2p1\n", encoding="utf-8")
    with pytest.raises(DataError, match="not Pharaoh links"):
        read_pharaoh(path)
