"""How seq2seq-translate and seq2seq-lite read and answer a pipe (seq2seq_lite.text), without a
model: lines taken as they arrive, what is written before a line is refused, the steering files'
counts, the output line's form."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

import pytest
from seq2seq_lite.rules import InputError, InputTooLong, encode_lines
from seq2seq_lite.steering import SteeringLines
from seq2seq_lite.text import BUFFER_BATCHES, line_batches, output_line, translated_batches

WHERE = "standard input"


@contextmanager
def piped(data: bytes) -> Iterator[BinaryIO]:
    """A pipe that ``data`` is written into, then closed: a stream as a command reads its
    stdin (written by a thread, as more than a pipe's buffer may be)."""
    read, write = os.pipe()

    def feed() -> None:
        with os.fdopen(write, "wb") as writer:
            writer.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(read, "rb") as stream:
        try:
            yield stream
        finally:
            stream.read()  # whatever the test left, so that the writer ends
            writer.join()


def upper(lines: list[str], steer=None) -> list[str]:
    """A translation of each line: its words upper-cased, refused over 3 words as a model's
    translator refuses a line over max_source_len (InputTooLong, the line's index)."""
    encode_lines(lambda texts: [t.split() for t in texts], lines, 3)
    marks = [""] * len(lines) if steer is None else [f" <{s.prefix}>" for s in steer]
    return [line.upper() + mark for line, mark in zip(lines, marks, strict=True)]


def test_the_lines_before_a_refused_line_are_answered_first() -> None:
    lines = [f"line {i}" for i in range(20)] + ["one two three four", "after"]
    with piped("".join(f"{x}\n" for x in lines).encode()) as stream:
        batches = translated_batches(stream, 2, WHERE, upper)
        answered = []
        with pytest.raises(InputTooLong) as refused:
            for done, translations in batches:
                assert done == len(answered)
                answered += translations
    assert answered == [x.upper() for x in lines[:20]]  # 20 > 2 * BUFFER_BATCHES: two batches
    assert refused.value.index == 20 and refused.value.length == 4
    assert 2 * BUFFER_BATCHES < 20


def test_a_refused_line_first_in_a_later_batch_and_steered_lines_before_one() -> None:
    """The refused line opening a batch: nothing more is answered; steered lines before one keep
    their own steering."""
    lines = [f"w{i}" for i in range(BUFFER_BATCHES)] + ["one two three four", "after"]
    with piped("".join(f"{x}\n" for x in lines).encode()) as stream:
        answered = []
        with pytest.raises(InputTooLong) as refused:
            for _, translations in translated_batches(stream, 1, WHERE, upper):
                answered += translations
    assert len(answered) == BUFFER_BATCHES and refused.value.index == BUFFER_BATCHES
    steering = SteeringLines(["A", "B", "C", "D"], None, [], {"prefix": "--prefix p.txt"})
    answered = []
    with piped(b"x\ny\na b c d\nz\n") as stream, pytest.raises(InputTooLong):
        for _, translations in translated_batches(stream, 4, WHERE, upper, steering):
            answered += translations
    assert answered == ["X <A>", "Y <B>"]


def test_steering_files_must_have_the_inputs_line_count() -> None:
    names = {"prefix": "--prefix p.txt"}
    steering = SteeringLines(["A", "B", "C"], None, [], names)
    with piped(b"x\ny\nz\n") as stream:
        got = [t for _, ts in translated_batches(stream, 1, WHERE, upper, steering) for t in ts]
    assert got == ["X <A>", "Y <B>", "Z <C>"]
    with piped(b"x\ny\n") as stream, pytest.raises(InputError) as longer:
        list(translated_batches(stream, 1, WHERE, upper, steering))
    said = "--prefix p.txt has 3 lines, standard input has 2: give one line per input line"
    assert str(longer.value).startswith(said)
    with piped(b"w\nx\ny\nz\n") as stream, pytest.raises(InputError) as shorter:
        list(translated_batches(stream, 1, WHERE, upper, steering))
    assert "has 3 lines, standard input has more than 3" in str(shorter.value)


def test_a_long_line_arriving_in_many_reads_is_one_line() -> None:
    long = b"w" * (5 << 16) + b" end"  # five reads and more before its newline
    with piped(long + b"\nnext\n" + long) as stream:
        lines = [line for batch in line_batches(stream, 8, WHERE) for line in batch]
    assert lines == [long.decode(), "next", long.decode()]


def test_an_output_line_is_the_best_text_or_every_candidate_scored() -> None:
    candidates = [("A dog runs.", -0.51234), ("A dog is running.", -0.9)]
    assert output_line(candidates, 1) == "A dog runs."
    assert output_line(candidates, 2) == "-0.5123\tA dog runs. ||| -0.9000\tA dog is running."
    assert output_line([], 1) == output_line([], 3) == ""  # a blank line's


def test_line_batches_take_what_has_arrived() -> None:
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream, os.fdopen(write, "wb") as writer:
        writer.write(b"one\n\ntwo\r\nthree\npart")
        writer.flush()
        batches = line_batches(stream, 2, WHERE)
        assert next(batches) == ["one", ""]
        assert next(batches) == ["two", "three"]
        writer.write(b"ial\n")
        writer.flush()
        assert next(batches) == ["partial"]
        writer.write(b"no newline at the end")
        writer.close()
        assert list(batches) == [["no newline at the end"]]


def test_line_batches_stop_at_invalid_utf8_after_the_lines_before_it() -> None:
    with piped(b"one\ntwo\nthree\nf\xfcnf\nsix\n") as stream:
        batches = line_batches(stream, 2, WHERE)
        assert next(batches) == ["one", "two"]
        assert next(batches) == ["three"]
        with pytest.raises(InputError, match=r"^standard input, line 4: invalid UTF-8 \(invalid"):
            next(batches)


def test_steering_given_for_an_empty_line_is_warned_of() -> None:
    """An empty line is not translated: its prefix and constraints were dropped without a word."""
    said: list[str] = []
    names = {"prefix": "--prefix p.txt", "constraints": "--constraints c.tsv"}
    steering = SteeringLines(["A", "B", ""], [[], ["dog"], []], [], names, said.append)
    with piped(b"x\n\n\n") as stream:
        list(translated_batches(stream, 2, WHERE, upper, steering))
    assert said == [
        "input line 2 is empty: --prefix p.txt and --constraints c.tsv of that line is not used"
    ]
