"""A pipe as seq2seq-translate and seq2seq-lite read and answer it: lines split on "\n" only (a CR
before it dropped, a last line without one kept), invalid UTF-8 refused by the rule every seq2seq
command follows (rules.decode_text), naming where and the line; batches translated as they
arrive, each line's output line written in one form."""

from __future__ import annotations

import os
import select
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, TypeVar

from seq2seq_lite.rules import InputError, InputTooLong, decode_text
from seq2seq_lite.steering import SteeringLines, SteeringWarnings

NBEST_SEPARATOR = " ||| "  # Moses' field separator; between a piped line's candidates too
BUFFER_BATCHES = 8  # batches of lines read ahead where they have arrived: like lengths batch up

T = TypeVar("T")


def decode_lines(data: bytes, where: str) -> list[str]:
    """The lines of ``data``, or InputError naming ``where`` and the line of invalid UTF-8."""
    lines = decode_text(data, where).split("\n")
    if lines[-1] == "":
        lines.pop()  # after the last newline
    return [line.removesuffix("\r") for line in lines]


def _ready(fd: int) -> bool:
    """Whether reading `fd` would return at once; False where ``select`` cannot tell (pipes on
    Windows), so that lines are then answered one read at a time."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def line_batches(stream: BinaryIO, max_lines: int, where: str) -> Iterator[list[str]]:
    """Lines of `stream` in batches of what has arrived, at most `max_lines` each.

    A batch never waits for more input while complete lines are at hand, so a line typed into a
    pipe is answered at once, and a file is read in full batches. A line of invalid UTF-8 is
    InputError naming ``where`` and the line (the lines before it are yielded first).
    """
    fd = stream.fileno()
    pending: list[bytes] = []
    partial: list[bytes] = []  # the chunks of a line begun, joined once its end arrives
    eof = False
    number = 0  # lines yielded
    while not eof or pending:
        while not eof and (not pending or (len(pending) < max_lines and _ready(fd))):
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                eof = True
                if partial:
                    pending.append(b"".join(partial))
                break
            if b"\n" not in chunk:
                partial.append(chunk)
                continue
            *complete, rest = b"".join([*partial, chunk]).split(b"\n")
            pending.extend(complete)
            partial = [rest] if rest else []
        batch, pending = pending[:max_lines], pending[max_lines:]
        lines, error = _decoded(batch, number, where)
        if lines:
            yield lines
            number += len(lines)
        if error is not None:
            raise error


def _decoded(batch: list[bytes], before: int, where: str) -> tuple[list[str], InputError | None]:
    """The lines of ``batch`` up to the first of invalid UTF-8, and its error, if any."""
    lines = []
    for line in batch:
        try:
            lines.append(decode_text(line, where, before + len(lines)).removesuffix("\r"))
        except InputError as e:
            return lines, e
    return lines, None


def translated_batches(
    stream: BinaryIO,
    batch_size: int,
    where: str,
    translate: Callable[..., list[T]],
    steering: SteeringLines | None = None,
) -> Iterator[tuple[int, list[T]]]:
    """The translations of `stream`'s lines as they arrive (up to BUFFER_BATCHES batches at a
    time) by ``translate(lines, steer=...)``, each list with the number of lines before it.

    ``steering`` gives each line's, and is told of what of it the translations could not meet
    (their ``warnings``); a per-line file shorter than the input read so far is InputError
    before its lines are translated, one longer at the end. A line over the length limit: the
    lines before it are yielded, then its InputTooLong, indexed in the whole input.
    """
    done, said = 0, SteeringWarnings(steering.warn if steering is not None else None)
    for lines in line_batches(stream, batch_size * BUFFER_BATCHES, where):
        steer = None
        if steering is not None:
            _check_count(steering, done + len(lines), where, more=True)
            steer = steering.for_lines(lines, done)
        try:
            translations = translate(lines, steer=steer)
        except InputTooLong as e:
            if e.index:
                yield done, translate(lines[: e.index], steer=steer and steer[: e.index])
            raise type(e)(done + e.index, e.length, e.limit) from None
        said.tell(done, [getattr(t, "warnings", []) for t in translations])
        yield done, translations
        done += len(lines)
    if steering is not None:
        said.told()
        _check_count(steering, done, where)


def _check_count(steering: SteeringLines, count: int, where: str, more: bool = False) -> None:
    if problem := steering.count_problem(count, where, more):
        raise InputError(problem)


def scored(text: str, score: float) -> str:
    """One candidate as the commands print it: ``score<TAB>text``."""
    return f"{score:.4f}\t{text}"


def output_line(candidates: Sequence[tuple[str, float]], nbest: int) -> str:
    """A piped line's output line from its (text, score) candidates, best first: the best text
    ("" for a blank line), or with ``nbest`` above 1 every candidate scored, joined by " ||| "."""
    if nbest == 1:
        return candidates[0][0] if candidates else ""
    return NBEST_SEPARATOR.join(scored(text, score) for text, score in candidates)
