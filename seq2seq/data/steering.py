"""The files a user steers decoding with, read once: ``prefix=`` (a target prefix per input
line), ``constraints=`` (tab-separated target phrases per input line) and ``terms=`` (a glossary,
source phrase TAB target phrase), turned into each input line's `LineSteering`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from seq2seq_lite.glossary import read_glossary
from seq2seq_lite.steering import LineSteering, SteeringLines, constraint_lines

from seq2seq.data.stream import decode_text
from seq2seq.errors import Seq2SeqError

log = logging.getLogger(__name__)


def _warn(message: str) -> None:
    log.warning("%s", message)


def _lines(key: str, path: str) -> list[str]:
    """The lines of the file ``path`` given as ``key=`` (without their line ends)."""
    try:
        block = Path(path).read_bytes()
    except OSError as e:
        raise Seq2SeqError(f"cannot read {key}={path}: {e.strerror or e}") from None
    lines = decode_text(block, path).removesuffix("\n").split("\n") if block else []
    return [line.removesuffix("\r") for line in lines]


class SteeringFiles(SteeringLines):
    """The files read (seq2seq_lite.steering.SteeringLines), named in messages as ``key=path``."""

    @classmethod
    def read(
        cls, prefix: str | None, constraints: str | None, terms: str | None, max_chars: int = 0
    ) -> SteeringFiles | None:
        """Read the files given (None: not given); None where none is. ``max_chars``: the
        longest glossary phrase taken (0: any)."""
        files = (("prefix", prefix), ("constraints", constraints), ("terms", terms))
        given = {key: path for key, path in files if path}
        if not given:
            return None
        read = {key: _lines(key, path) for key, path in given.items()}  # every file first
        phrases = constraint_lines(read["constraints"]) if constraints else None
        try:
            text = "\n".join(read.get("terms", []))
            glossary = read_glossary(text, terms, _warn, max_chars) if terms else []
        except ValueError as e:
            raise Seq2SeqError(str(e)) from None
        names = {key: f"{key}={path}" for key, path in given.items()}
        return cls(read.get("prefix"), phrases, glossary, names, _warn)

    def check_count(self, count: int, input_name: str) -> None:
        """Refuse, in one line, a per-line file of another line count than the input's."""
        if problem := self.count_problem(count, input_name):
            raise Seq2SeqError(problem)

    def for_input(self, lines: Sequence[str], input_name: str) -> list[LineSteering]:
        """The steering of a whole input, after its line count is checked."""
        self.check_count(len(lines), input_name)
        return self.for_lines(lines)


def read_steering(
    prefix: str | None,
    constraints: str | None,
    terms: str | None,
    lines: Sequence[str],
    input_name: str,
) -> list[LineSteering] | None:
    """The steering of a whole input ``lines`` from the files given (None: none given), each
    per-line file counted against it."""
    files = SteeringFiles.read(prefix, constraints, terms)
    return None if files is None else files.for_input(lines, input_name)
