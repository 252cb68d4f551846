"""Steering that cannot be met as asked is said, not dropped or mangled in silence: characters the
target vocabulary lacks (they come out as ⁇), a phrase that no_repeat_ngram makes impossible (left
out, with a warning, instead of holding the search back to its length limit), a glossary's source
phrase that starts with "#", and a glossary phrase over the server's limit."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from seq2seq_lite.glossary import read_glossary
from seq2seq_lite.steering import LineSteering, SteeringLines, encode_steering
from seq2seq_lite.text import translated_batches

UNK = 1


def _encode(texts: list[str]) -> list[list[int]]:
    """A stand-in tokenizer: a word a piece (its letters' code points summed), UNK for a word with
    a character outside a-z and A-Z."""
    return [
        [sum(map(ord, w)) if w.isascii() and w.isalpha() else UNK for w in t.split()] for t in texts
    ]


def test_a_hash_source_phrase_is_written_escaped_and_a_lookalike_comment_is_named() -> None:
    said: list[str] = []
    text = "#MeToo\tignored\n\\#MeToo\t#MeToo\n# Hund\tdog\n#\n# a note\nWiese\tmeadow\n"
    entries = read_glossary(text, "g.tsv", said.append)
    assert entries == [("#MeToo", "#MeToo"), ("Wiese", "meadow")]
    assert said == [
        "g.tsv, line 1: read as a comment (a '#' line); a source phrase that starts with '#' is "
        "written '\\#'"
    ]  # "# Hund<TAB>dog" is an entry commented out: nothing said


def test_a_glossary_phrase_over_the_limit_is_refused_naming_its_line() -> None:
    text = "Hund\tdog\nWiese\t" + "meadow " * 300 + "\n"
    assert len(read_glossary(text, "g.tsv")) == 2  # no limit: any length
    with pytest.raises(
        ValueError,
        match=r"^g.tsv, line 2: the target phrase has 2,099 characters; at most max_chars=1,000",
    ):
        read_glossary(text, "g.tsv", max_chars=1000)


def test_characters_outside_the_vocabulary_are_warned_of_and_placed_as_asked() -> None:
    phrases = ["big", "São Paulo", "Zü€rich", "Zürich€ Ω"]
    steer = [LineSteering("Zürich is", phrases), None, LineSteering(constraints=["a"])]
    ids = encode_steering(_encode, steer, UNK)
    assert ids is not None
    assert ids[0].prefix == [UNK, sum(map(ord, "is"))]
    assert ids[0].phrases == [
        [sum(map(ord, "big"))],
        [UNK, sum(map(ord, "Paulo"))],
        [UNK],
        [UNK] * 2,
    ]
    assert ids[0].warnings == [  # each character quoted: together, they read as one substring
        "prefix 'Zürich is': the target vocabulary has no 'ü', which comes out as ⁇",
        "constraint 'São Paulo': the target vocabulary has no 'ã', which comes out as ⁇",
        "constraint 'Zü€rich': the target vocabulary has no 'ü' or '€', which come out as ⁇",
        "constraint 'Zürich€ Ω': the target vocabulary has no 'ü', '€' or 'Ω', which come out as ⁇",
    ]
    assert ids[1].warnings == [] and ids[2].warnings == []
    assert encode_steering(_encode, steer)[0].warnings == []  # no unknown piece given: no check


@pytest.mark.parametrize(
    ("prefix", "phrases", "n", "left_out"),
    [
        ("", ["big big", "dog"], 1, {"big big": "itself"}),  # its own piece twice
        ("", ["big big", "dog"], 2, {}),  # a 2-gram once: placeable
        ("a big", ["big dog", "cat"], 1, {"big dog": "the prefix"}),  # the prefix's piece
        ("a big dog", ["big dog"], 1, {}),  # inside the prefix: the prefix places it
        ("", ["red dog", "dog", "cat"], 1, {"dog": "constraint 'red dog'"}),  # the first wins
        ("", ["a b a b"], 2, {"a b a b": "itself"}),
        ("", ["x ☃", "y ☃"], 1, {"y ☃": "constraint 'x ☃'"}),  # no ⁇ warning for it
    ],
)
def test_a_phrase_no_repeat_ngram_makes_impossible_is_left_out_and_said(
    prefix: str, phrases: list[str], n: int, left_out: dict[str, str]
) -> None:
    (ids,) = encode_steering(_encode, [LineSteering(prefix, phrases)], UNK, no_repeat_ngram=n)
    kept = [p for p in phrases if p not in left_out]
    assert ids.phrases == _encode(kept)
    run = "a target piece" if n == 1 else f"a run of {n} target pieces"
    lacks = [
        f"constraint '{p}': the target vocabulary has no '☃', which comes out as ⁇"
        for p in kept
        if "☃" in p
    ]
    assert ids.warnings == lacks + [
        f"constraint '{p}' repeats {run} of {whose}, which no_repeat_ngram={n} bans: left out"
        for p, whose in left_out.items()
    ]
    (terms,) = encode_steering(_encode, [LineSteering(prefix, terms=[("x", p) for p in phrases])])
    assert terms.terms == _encode(phrases)  # no_repeat_ngram off: every one


def test_a_glossary_terms_warning_names_its_entry_once_capitalised_or_not() -> None:
    """A term is named by its entry's source phrase (where to look in the glossary); the same
    entry opening one line (its target capitalised) and inside another is one message."""
    glossary = [("zwei", "two ☃"), ("Hund", "dog dog")]
    steering = SteeringLines(None, None, glossary, {}, None)
    steer = steering.for_lines(["Zwei Hunde", "Ein Hund und zwei"])
    found = encode_steering(_encode, steer, UNK, no_repeat_ngram=1)
    assert found is not None
    lacks = "glossary entry 'zwei': the target vocabulary has no '☃', which comes out as ⁇"
    clash = "glossary entry 'Hund' repeats a target piece of itself, which no_repeat_ngram=1 bans"
    assert found[0].warnings == [lacks]
    assert found[1].warnings == [lacks, f"{clash}: left out"]


def test_each_warning_is_said_once_at_its_first_line_and_the_rest_counted() -> None:
    said: list[str] = []
    steering = SteeringLines(
        None, [["dog dog"], [], ["dog dog"], ["dog dog"]], [], {"constraints": "c.tsv"}, said.append
    )

    def translate(lines: list[str], steer: list[LineSteering]) -> list[object]:
        found = encode_steering(_encode, steer, UNK, no_repeat_ngram=1) or []
        return [type("T", (), {"warnings": s.warnings})() for s in found]

    read, write = os.pipe()
    os.write(write, b"eins\nzwei\ndrei\nvier\n")
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        list(translated_batches(stream, 2, "stdin", translate, steering))
    message = "constraint 'dog dog' repeats a target piece of itself"
    assert len(said) == 2 and said[0].startswith(f"input line 1: {message}")
    assert said[1].startswith(f"2 more input lines the same: {message}")


@pytest.mark.slow
def test_a_trained_models_translations_carry_the_warnings(smoke_run: Path) -> None:
    from seq2seq.config import DecodeConfig
    from seq2seq.decoding.inference import Translator
    from seq2seq.runtime.run_folder import load_run

    run = load_run(smoke_run)
    search = replace(DecodeConfig(), beam_size=3, no_repeat_ngram=1)
    translator = Translator.from_run(run, search)
    lines = ["Ein Hund läuft.", "Zwei Männer."]
    plain = translator.translate(lines)
    steer = [LineSteering(constraints=["dog dog"]), LineSteering(constraints=["☃"])]
    found = translator.translate(lines, steer=steer)
    assert found[0].warnings == [
        "constraint 'dog dog' repeats a target piece of itself, which no_repeat_ngram=1 bans: "
        "left out"
    ]
    searched = [(h.tokens, h.score) for h in found[0].hypotheses]
    assert searched == [(h.tokens, h.score) for h in plain[0].hypotheses]  # as if not asked
    assert found[1].warnings == [
        "constraint '☃': the target vocabulary has no '☃', which comes out as ⁇"
    ]
    assert "⁇" in translator.best_text(found[1]) and plain[1].warnings == []
