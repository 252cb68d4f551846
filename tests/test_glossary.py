"""A glossary (issue 53): source phrases found in a line as whole words, case aside, the longest
first; their target phrases become the line's constraints; the files that steer evaluate and
translate read and counted in one place; and end to end on the smoke model, terms that must
appear appear, reported per line and in the result."""

from __future__ import annotations

import json
import subprocess
import unicodedata
from pathlib import Path

import pytest
from seq2seq_lite.glossary import glossary_hits, read_glossary
from seq2seq_lite.steering import LineSteering, steering_report, with_glossary

from seq2seq.data.steering import SteeringFiles
from seq2seq.errors import Seq2SeqError

GLOSSARY = "# product names\nHund\tdog\nroter Hund\tred hound\n\nWiese\tmeadow\n"


def test_the_glossary_is_read_longest_first_and_a_bad_line_is_named() -> None:
    entries = read_glossary(GLOSSARY, "terms.tsv")
    assert entries == [("roter Hund", "red hound"), ("Wiese", "meadow"), ("Hund", "dog")]
    with pytest.raises(ValueError, match=r"^terms.tsv, line 2: want 'source phrase<TAB>"):
        read_glossary("a\tb\nonly one field\n", "terms.tsv")


def test_a_glossary_saved_with_a_byte_order_mark_keeps_its_first_entry(tmp_path: Path) -> None:
    path = tmp_path / "bom.tsv"
    path.write_bytes(b"\xef\xbb\xbfHund\tcat\nMann\tboat\n")
    files = SteeringFiles.read(None, None, str(path))  # every command's reader
    assert files is not None and files.glossary == [("Hund", "cat"), ("Mann", "boat")]
    assert glossary_hits("Ein Hund.", files.glossary) == [("Hund", "cat")]


def test_serve_reads_its_glossary_before_it_loads_a_model(tmp_path: Path) -> None:
    from run_helpers import cli

    bad = tmp_path / "bad.tsv"
    bad.write_text("Hund dog\n")
    run = [*cli("serve"), f"run_dir={tmp_path / 'nope'}", f"terms={bad}"]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and f"{bad}, line 1: want" in proc.stderr, proc.stderr


def test_source_phrases_match_whole_words_case_aside_longest_first() -> None:
    entries = read_glossary(GLOSSARY, "terms.tsv")
    assert glossary_hits("Ein roter Hund läuft über die Wiese.", entries) == [
        ("roter Hund", "red hound"),
        ("Wiese", "meadow"),
    ]
    assert glossary_hits("Der Hund, die Hundehütte.", entries) == [("Hund", "dog")]
    assert glossary_hits("Hundehütte und Wiesen", entries) == []
    assert glossary_hits("Ein ROTER hund", entries) == []  # as written: other words
    steered = with_glossary(LineSteering("A", ["dog"]), "Ein Hund auf der Wiese", entries)
    assert steered.constraints == ["dog"] and steered.prefix == "A"
    assert steered.terms == [("Hund", "dog"), ("Wiese", "meadow")]


def test_only_the_first_letter_of_a_line_may_differ_and_its_target_is_capital() -> None:
    entries = read_glossary("zwei\ttwo\njunge\tyoung\nHund\tdog\n", "terms.tsv")
    assert glossary_hits("Zwei Hunde, zwei Katzen", entries) == [("zwei", "Two")]
    assert glossary_hits("„Hund“ und zwei", entries) == [("Hund", "Dog"), ("zwei", "two")]
    assert glossary_hits("Der Hund", entries) == [("Hund", "dog")]
    assert glossary_hits("Ein Junge und eine junge Frau", entries) == [("junge", "young")]
    assert glossary_hits("Junge Leute", entries) == [("junge", "Young")]
    cased = read_glossary("iPhone\tiPhone\neBay-Konto\teBay account\n", "terms.tsv")
    assert glossary_hits("iPhone ist gut", cased) == [("iPhone", "iPhone")]  # not "IPhone"
    assert glossary_hits("eBay-Konto gesperrt", cased) == [("eBay-Konto", "eBay account")]


def test_steering_files_are_read_counted_and_reported(tmp_path) -> None:
    (tmp_path / "c.tsv").write_text("a cat\tthe dog\n\nsnow\n")
    (tmp_path / "terms.tsv").write_text(GLOSSARY)
    files = SteeringFiles.read(None, str(tmp_path / "c.tsv"), str(tmp_path / "terms.tsv"))
    files.check_count(3, "test.de")
    with pytest.raises(Seq2SeqError, match=r"^constraints=\S+ has 3 lines, test.de has 2"):
        files.check_count(2, "test.de")
    steer = files.for_lines(["Ein Hund", "Eine Wiese", "Schnee"])
    assert [s.constraints for s in steer] == [["a cat", "the dog"], [], ["snow"]]
    assert [s.terms for s in steer] == [[("Hund", "dog")], [("Wiese", "meadow")], []]
    report = steering_report(["the dog and a cat", "a field", "snow"], steer)
    assert report == {
        "prefixes": 0,
        "prefixes_kept": 0,
        "constraints": 3,
        "constraints_placed": 3,
        "terms": 2,
        "terms_placed": 1,
        "terms_lines": 2,
    }
    assert SteeringFiles.read(None, None, None) is None
    (tmp_path / "bad.tsv").write_text("Hund\n")
    with pytest.raises(Seq2SeqError, match="bad.tsv, line 1"):
        SteeringFiles.read(None, None, str(tmp_path / "bad.tsv"))
    with pytest.raises(Seq2SeqError, match="cannot read terms="):
        SteeringFiles.read(None, None, str(tmp_path / "missing.tsv"))


def test_evaluate_places_constraints_and_glossary_terms(smoke_run, tmp_path) -> None:
    """The smoke model, beam 3, on the first lines of test_2016_flickr: every phrase asked
    appears in its output; the hits are in the result and in the .terms.jsonl file; a phrase
    the target vocabulary cannot spell is said."""
    from run_helpers import command

    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    lines = ["Ein Hund läuft über eine Wiese.", "Zwei Männer spielen Fußball.", "Eine Frau.", "Ja."]
    src.write_text("".join(line + "\n" for line in lines))
    ref.write_text("A dog runs.\nTwo men play soccer.\nA woman.\nYes.\n")
    (tmp_path / "c.tsv").write_text("grass\n\nsmiling woman\n☃\n")
    (tmp_path / "terms.tsv").write_text("Fußball\tfootball\nHund\tpuppy\n")
    proc = command(
        "evaluate",
        f"run_dir={smoke_run}",
        f"input={src}",
        f"reference={ref}",
        "beam_size=3",
        f"constraints={tmp_path / 'c.tsv'}",
        f"terms={tmp_path / 'terms.tsv'}",
        f"out={tmp_path / 'eval'}",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    steering = result["steering"]
    assert steering["constraints"] == 3 and steering["constraints_placed"] == 2  # not ☃
    lacks = "src.de: input line 4: constraint '☃': the target vocabulary has no '☃'"
    assert proc.stderr.count(lacks) == 1, proc.stderr
    assert steering["terms"] == 2 and steering["terms_placed"] == 2
    assert steering["terms_lines"] == 2
    assert result["hypotheses"].endswith(".beam3.constraints-c.tsv.terms-terms.tsv.hyp")
    hyps = Path(result["hypotheses"]).read_text().splitlines()
    assert "grass" in hyps[0] and "puppy" in hyps[0] and "football" in hyps[1]
    assert "smiling woman" in hyps[2]
    terms = [json.loads(line) for line in Path(result["term_hits"]).read_text().splitlines()]
    assert terms == [[["Hund", "puppy"]], [["Fußball", "football"]], [], []]


def test_a_glossary_matches_text_in_another_unicode_form_or_spacing() -> None:
    """Report #4: an NFD line (as macOS saves), an NFD glossary and a doubled space match as
    the model reads them: both sides are normalised (NFC, runs of spaces as one)."""
    nfc, nfd = "Zwei Männer stehen.", unicodedata.normalize("NFD", "Zwei Männer stehen.")
    assert nfc != nfd
    entries = read_glossary("Männer\tboys\n", "g.tsv")
    assert glossary_hits(nfd, entries) == [("Männer", "boys")]
    decomposed = read_glossary(unicodedata.normalize("NFD", "Männer\tboys\n"), "g.tsv")
    assert glossary_hits(nfc, decomposed) == [("Männer", "boys")]
    spaced = read_glossary("Gruppe  von\tgroup of\n", "g.tsv")
    assert glossary_hits("Eine Gruppe von Menschen.", spaced) == [("Gruppe von", "group of")]
    assert glossary_hits("Eine Gruppe   von Menschen.", spaced) == [("Gruppe von", "group of")]


def test_a_source_phrase_given_twice_is_warned_of_naming_both_lines() -> None:
    """Report #9: the first entry wins, and one warning names both lines."""
    told: list[str] = []
    entries = read_glossary("Gruppe\tcrowd\nHund\tdog\nGruppe\tteam\n", "g.tsv", told.append)
    assert entries == [("Gruppe", "crowd"), ("Hund", "dog")]
    assert told == [
        "g.tsv, lines 1 and 3: the source phrase 'Gruppe' twice; line 1's target is used"
    ]


@pytest.mark.parametrize("text", ["", "# only a comment\n\n"])
def test_an_empty_glossary_is_warned_of(tmp_path: Path, caplog, text: str) -> None:
    """Report #10: a glossary with no entries changes nothing: one warning says so."""
    told: list[str] = []
    assert read_glossary(text, "g.tsv", told.append) == []
    assert told == ["g.tsv has no entries (blank or '#' lines only): it changes nothing"]
    (tmp_path / "g.tsv").write_text(text)
    files = SteeringFiles.read(None, None, str(tmp_path / "g.tsv"))  # every command's reader
    assert files is not None and files.glossary == []
    assert [r.getMessage() for r in caplog.records] == [f"{tmp_path / 'g.tsv'} {told[0][6:]}"]
