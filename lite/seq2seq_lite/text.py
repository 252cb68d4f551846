"""Lines of input bytes as seq2seq-translate reads a pipe: split on "\n" only (a CR before it
dropped, a last line without one kept), and invalid UTF-8 refused with the message every seq2seq
command gives (seq2seq.data.stream.decode_text), naming where and the line."""

from __future__ import annotations


class InputError(ValueError):
    """Input that is not text: one line for the user."""


def decode_lines(data: bytes, where: str) -> list[str]:
    """The lines of ``data``, or InputError naming ``where`` and the line of invalid UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{where}, line {line}: invalid UTF-8 ({e.reason})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # after the last newline
    return [line.removesuffix("\r") for line in lines]
