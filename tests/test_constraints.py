"""Lexically constrained beam search (issue 53): every phrase of a sentence's constraints in
every hypothesis, phrases of several pieces included; constraints that stay with their sentence
when a batch is sorted by length; scores that are the model's; the progress rule and dynamic
beam allocation by hand; refused where it cannot apply; unconstrained search unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from model_helpers import forced_log_prob, peaky_model, settings, sources
from seq2seq_lite import rules
from seq2seq_lite.steering import (
    LineSteering,
    SteeringIds,
    decode_steered,
    holds,
    steering_report,
    word_continuations,
)

from seq2seq.decoding.beam import beam_search
from seq2seq.decoding.constraints import Constraints, allocate
from seq2seq.decoding.hypothesis import BatchSteering
from seq2seq.decoding.search import decode, decode_sources
from seq2seq.errors import Seq2SeqError
from seq2seq.vocab import PAD

# per sentence of `sources`: phrases of one to three target pieces (the model's ids are 4-24)
PHRASES = [[[7], [11, 12]], [[20, 21, 22]], [[5], [6], [8, 9]], [], [[13, 13], [4]]]


def _steer(phrases: list[list[list[int]]], prefixes=None) -> list[SteeringIds]:
    prefixes = prefixes or [[] for _ in phrases]
    return [SteeringIds(p, c) for p, c in zip(prefixes, phrases, strict=True)]


def _holds(tokens: list[int], phrase: list[int]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


def _listed(src: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
    return [src[i, : lengths[i]].tolist() for i in range(len(src))]


@pytest.mark.parametrize("beam_size", [2, 5])
@pytest.mark.parametrize("name", ["bahdanau", "multihead", "luong"])
def test_every_hypothesis_holds_every_phrase(name: str, beam_size: int) -> None:
    model, (src, lengths) = peaky_model(name), sources()
    plain = decode(model, src, lengths, settings(beam_size, 0.6, beam_size))
    missing = [p for hyps, ps in zip(plain, PHRASES, strict=True) for p in ps]
    assert any(not _holds(hyps[0].tokens, p) for hyps in plain for p in missing)
    cfg = settings(beam_size, 0.6, beam_size)
    found = decode(model, src, lengths, cfg, BatchSteering.of(_steer(PHRASES), range(5)))
    for hyps, phrases, source in zip(found, PHRASES, _listed(src, lengths), strict=True):
        assert hyps
        for h in hyps:
            assert all(_holds(h.tokens, p) for p in phrases), (h.tokens, phrases)
            penalty = rules.length_penalty(len(h.tokens) + 1, cfg.alpha)
            forced = forced_log_prob(model, torch.tensor(source), h.tokens)
            assert h.score == pytest.approx(forced / penalty, abs=1e-4)  # the model's own
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


@pytest.mark.parametrize("check_every", [1, 3])
def test_constraints_stay_with_their_sentence_when_sorted_by_length(check_every: int) -> None:
    """decode_sources sorts by length: each output holds its own sentence's phrases, and is
    what that sentence alone decodes to."""
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = settings(4, 0.6, 2)
    listed = _listed(src, lengths)
    together = decode_sources(model, listed, cfg, steer=_steer(PHRASES))
    for i, phrases in enumerate(PHRASES):
        alone = beam_search(
            model,
            src[i : i + 1, : lengths[i]],
            lengths[i : i + 1],
            cfg,
            check_every=check_every,
            steer=BatchSteering.of(_steer([phrases]), [0]),
        )
        assert [h.tokens for h in together[i]] == [h.tokens for h in alone[0]]
        assert all(_holds(h.tokens, p) for h in together[i] for p in phrases)


def test_a_prefix_and_constraints_together() -> None:
    model, (src, lengths) = peaky_model("luong"), sources()
    prefixes = [[9, 9], [], [4], [10], []]
    steer = BatchSteering.of(_steer(PHRASES, prefixes), range(5))
    for hyps, prefix, phrases in zip(
        decode(model, src, lengths, settings(3, 0.6, 3), steer), prefixes, PHRASES, strict=True
    ):
        for h in hyps:
            assert h.tokens[: len(prefix)] == prefix
            assert all(_holds(h.tokens, p) for p in phrases)


def test_without_phrases_the_search_is_unchanged() -> None:
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = settings(4, 0.6, 4)
    assert BatchSteering.of(_steer([[]] * 5), range(5)) is None  # no work at all
    plain = decode(model, src, lengths, cfg)
    # one sentence with a phrase turns the batch's search constrained: the others keep theirs
    steered = decode(
        model, src, lengths, cfg, BatchSteering.of(_steer([[]] * 4 + [[[4]]]), range(5))
    )
    for a, b in zip(plain[:4], steered[:4], strict=True):
        assert [h.tokens for h in a][:1] == [h.tokens for h in b][:1]


@pytest.mark.parametrize("given", [dict(beam_size=1), dict(sampling=True, beam_size=1)])
def test_constraints_are_refused_without_beam_search(given: dict) -> None:
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = replace(settings(), **given)
    with pytest.raises(Seq2SeqError, match="constraints need beam search"):
        decode(model, src, lengths, cfg, BatchSteering.of(_steer(PHRASES), range(5)))


def test_progress_goes_on_drops_and_places_phrases() -> None:
    constraints = Constraints(torch.tensor([[[5, 6, PAD], [7, PAD, PAD]]]))
    sent = torch.zeros(1, dtype=torch.long)
    progress = constraints.start(1)
    assert constraints.wanted(sent, progress).tolist() == [[5, 7]]
    progress = constraints.advance(sent, progress, torch.tensor([5]))
    assert constraints.wanted(sent, progress).tolist() == [[6, PAD]]
    assert constraints.met(sent, progress).tolist() == [1]
    dropped = constraints.advance(sent, progress, torch.tensor([8]))  # not 6: starts over
    assert constraints.met(sent, dropped).tolist() == [0]
    restarted = constraints.advance(sent, progress, torch.tensor([7]))  # drops 5, places 7
    assert restarted.placed.tolist() == [[False, True]] and constraints.met(
        sent, restarted
    ).tolist() == [1]
    placed = constraints.advance(sent, progress, torch.tensor([6]))
    assert placed.placed.tolist() == [[True, False]] and placed.current.tolist() == [-1]
    assert constraints.wanted(sent, placed).tolist() == [[PAD, 7]]
    done = constraints.advance(sent, placed, torch.tensor([7]))
    assert constraints.complete(sent, done).tolist() == [True]


def test_allocation_takes_the_banks_in_turn_fullest_first() -> None:
    scores = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]])
    banks = torch.tensor([[0, 0, 0, 1, 2, 2]])
    valid = torch.tensor([[True, True, True, True, True, False]])
    # bank 2: -5 (its -6 is not valid); bank 1: -4; bank 0: -1, -2, -3
    assert allocate(scores, banks, valid, 4, 3).tolist() == [[4, 3, 0, 1]]
    assert allocate(scores, banks, valid, 2, 3).tolist() == [[4, 3]]
    assert allocate(scores, banks, ~valid | valid, 6, 3).tolist() == [[4, 3, 0, 5, 1, 2]]


@pytest.mark.parametrize("beam_size", [2, 4])
def test_the_lite_search_places_constraints_as_torch_does(peaky_graphs, beam_size: int) -> None:
    from seq2seq_lite import search as lite_search

    model, graphs = peaky_graphs
    src, lengths = sources()
    cfg = settings(beam_size, 0.6, beam_size)
    search = {k: getattr(cfg, k) for k in ("beam_size", "nbest", "alpha", "max_len_a", "max_len_b")}
    prefixes = [[9, 9], [], [4], [], []]
    steer = BatchSteering.of(_steer(PHRASES, prefixes), range(5))
    expected = decode(model, src, lengths, cfg, steer)
    arrays = steer.prefix.numpy(), steer.phrases.numpy()
    found = lite_search.beam(graphs, src.numpy(), lengths.numpy(), search, *arrays)
    for want, got in zip(expected, found, strict=True):
        assert [h.tokens for h in got] == [h.tokens for h in want]
        for a, b in zip(want, got, strict=True):
            assert abs(a.score - b.score) < 1e-4


def test_glossary_terms_are_forced_only_where_the_translation_lacks_one() -> None:
    """Line 0's terms are in its unconstrained translation: it keeps that translation, with
    no second search; line 2's are not: it is searched again, and holds them."""
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg, listed = settings(3, 0.6, 1), _listed(src, lengths)
    plain = decode_sources(model, listed, cfg)
    held = plain[0][0].tokens[1:3]
    absent = [t for t in range(4, 25) if t not in plain[2][0].tokens][:1]
    steer = [
        SteeringIds(terms=[held]),
        SteeringIds(),
        SteeringIds(terms=[absent]),
        SteeringIds(),
        SteeringIds(),
    ]
    asked = []

    def decode(lines, given):
        asked.append((lines, given))
        wanted = None if given is None else [given[i] for i in lines]
        return decode_sources(model, [listed[i] for i in lines], cfg, steer=wanted)

    found = decode_steered(decode, list(range(5)), steer)
    assert [lines for lines, _ in asked] == [list(range(5)), [2]]
    assert asked[0][1] is None  # the first search has nothing to force
    assert found[0][0].tokens == plain[0][0].tokens
    assert _holds(found[2][0].tokens, absent) and found[2][0].tokens != plain[2][0].tokens
    assert [h.tokens for h in found[1]] == [h.tokens for h in plain[1]]


# pieces that go on with a word (no word-start mark): every odd id of the peaky model's
JOINS = torch.tensor([t >= 4 and t % 2 == 1 for t in range(25)])


def _joined(tokens: list[int], phrase: list[int]) -> bool:
    """Whether every occurrence of ``phrase`` in ``tokens`` goes on with a word's piece (without
    the rule, the bahdanau and multihead models' outputs have such phrases)."""
    n = len(phrase)
    ends = [i + n for i in range(len(tokens) - n + 1) if tokens[i : i + n] == phrase]
    return bool(ends) and all(e < len(tokens) and bool(JOINS[tokens[e]]) for e in ends)


@pytest.mark.parametrize("beam_size", [2, 4])
def test_a_placed_phrase_ends_a_word_in_torch_and_lite(peaky_graphs, beam_size: int) -> None:
    """Report #3: "cat" placed must not go on as "cate": the piece after a placed phrase is
    never one that continues its word (EOS and word starts are); torch and lite agree."""
    from seq2seq_lite import search as lite_search

    model, graphs = peaky_graphs
    src, lengths = sources()
    cfg = settings(beam_size, 0.6, beam_size)
    # each phrase begins a word (even ids), as a phrase encoded alone does
    phrases = [[[8], [12, 13]], [[20, 21, 22]], [[6], [10], [4, 9]], [], [[12, 14], [4]]]
    plain = BatchSteering.of(_steer(phrases), range(5))
    steer = replace(plain, joins=JOINS)
    found = decode(model, src, lengths, cfg, steer)
    for hyps, ps in zip(found, phrases, strict=True):
        assert hyps
        for h in hyps:
            assert all(_holds(h.tokens, p) and not _joined(h.tokens, p) for p in ps), (h.tokens, ps)
    search = {k: getattr(cfg, k) for k in ("beam_size", "nbest", "alpha", "max_len_a", "max_len_b")}
    arrays = None, steer.phrases.numpy(), JOINS.numpy()
    lite = lite_search.beam(graphs, src.numpy(), lengths.numpy(), search, *arrays)
    assert [[h.tokens for h in hyps] for hyps in lite] == [
        [h.tokens for h in hyps] for hyps in found
    ]


def test_a_term_is_held_and_counted_as_whole_words_only() -> None:
    """Report #3: a term's pieces followed by a piece of the same word are not the term, in
    the glossary's check and in evaluate's counts ("man" is not placed in "woman")."""
    joins = word_continuations(["<unk>", "<s>", "</s>", "<pad>", "▁cat", "e", ".", "▁a", "1"])
    assert joins.tolist() == [False] * 4 + [False, True, False, False, True]
    assert holds([7, 4, 6], [4], joins) and holds([7, 4], [4], joins)
    assert not holds([7, 4, 5], [4], joins) and not holds([4, 8], [4], joins)
    steer = [LineSteering(constraints=["man", "cat"], terms=[("Hund", "dog")])]
    report = steering_report(["A woman and a cate with a hotdog."], steer)
    assert (report["constraints_placed"], report["terms_placed"]) == (0, 0)
    report = steering_report(["A man, a cat (dog)."], steer)
    assert (report["constraints_placed"], report["terms_placed"]) == (2, 1)


def test_a_line_steering_of_the_wrong_shape_is_refused() -> None:
    """LineSteering(constraints="cat") asked for the phrases "c", "a" and "t"."""
    with pytest.raises(TypeError, match=r"constraints is a list of phrases: \['cat'\]"):
        LineSteering(constraints="cat")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="prefix is one string, not list"):
        LineSteering(prefix=["A dog"])  # type: ignore[arg-type]
    assert LineSteering("A", ["cat"]).constraints == ["cat"]
