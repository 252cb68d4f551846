"""Lines of input bytes as seq2seq-translate and seq2seq-lite read a pipe: split on "\n" only (a
CR before it dropped, a last line without one kept), and invalid UTF-8 refused by the rule every
seq2seq command follows (rules.decode_text), naming where and the line."""

from __future__ import annotations

import os
import select
from collections.abc import Iterator
from typing import BinaryIO

from seq2seq_lite.rules import InputError, decode_text


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
    partial = b""
    eof = False
    number = 0  # lines yielded
    while not eof or pending:
        while not eof and (not pending or (len(pending) < max_lines and _ready(fd))):
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                eof = True
                if partial:
                    pending.append(partial)
                break
            *complete, partial = (partial + chunk).split(b"\n")
            pending.extend(complete)
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
