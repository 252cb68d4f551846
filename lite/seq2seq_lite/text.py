"""Lines of input bytes as seq2seq-translate reads a pipe: split on "\n" only (a CR before it
dropped, a last line without one kept), and invalid UTF-8 refused by the rule every seq2seq
command follows (rules.decode_text), naming where and the line."""

from __future__ import annotations

from seq2seq_lite.rules import decode_text


def decode_lines(data: bytes, where: str) -> list[str]:
    """The lines of ``data``, or InputError naming ``where`` and the line of invalid UTF-8."""
    lines = decode_text(data, where).split("\n")
    if lines[-1] == "":
        lines.pop()  # after the last newline
    return [line.removesuffix("\r") for line in lines]
