"""Every ``seq2seq-<command>`` line the README and docs/ show (```bash blocks and inline code)
passes the checks the command itself makes before any work: its flags, keys, group options and
value types. A key renamed in the code then fails here, not in a reader's terminal.

Placeholders are written ``<...>``: after ``=`` one stands for a value of any type (``???``),
elsewhere for a word; ``$VARIABLE`` words and ``...`` stand for settings shown elsewhere.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from seq2seq.commands import keys
from seq2seq.commands.arguments import check_arguments
from seq2seq.errors import Seq2SeqError

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMANDS = "train|evaluate|translate|average|export|serve|align|score|distill|backtranslate"
# a command at the start of a shell part, after optional VAR=value assignments
COMMAND = re.compile(rf"(?:\w+=\S*\s+)*seq2seq-({COMMANDS})(?:\s+|$)")
OPERATORS = re.compile(r"&&|\|\||[|;&]|\s[<>]\s|\s\d?>")
VALUE_PLACEHOLDER = re.compile(r"=<[^<>\s][^<>\n]*>")
WORD_PLACEHOLDER = re.compile(r"<[^<>\s][^<>\n]*>")
COMPOSE = keys.compose


def shown_lines(page: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a ```bash block (continuations joined, comments
    cut) and of each inline code span that starts with a command."""
    text = page.read_text(encoding="utf-8")
    for block in re.finditer(r"^```bash\n(.*?)^```", text, re.S | re.M):
        first = text[: block.start()].count("\n") + 2
        for at, line in enumerate(block.group(1).replace("\\\n", " ").split("\n")):
            yield first + at, re.split(r"(?:^|\s)#", line)[0]
    for span in re.finditer(r"`(seq2seq-[^`\n]+)`", text):
        yield text[: span.start()].count("\n") + 1, span.group(1)


def shown_commands(page: Path) -> Iterator[tuple[int, str, list[str]]]:
    """(line number, command, its arguments) of every command the page shows."""
    for number, line in shown_lines(page):
        line = WORD_PLACEHOLDER.sub("x", VALUE_PLACEHOLDER.sub("=???", line))
        for part in OPERATORS.split(line):
            part = part.strip().removeprefix("$ ")
            if found := COMMAND.match(part):
                yield number, found.group(1), _arguments(part[found.end() :])


def _arguments(rest: str) -> list[str]:
    words: list[str] = []
    for word in shlex.split(rest):
        if "$" in word:  # a shell variable: a flag's argument, or settings shown elsewhere
            if words and words[-1].startswith("-"):
                words.append("x")
        elif "..." not in word and not word.endswith("="):  # "...", or a key named in prose
            words.append(word)
    return words


@functools.cache
def _composed(name: str, overrides: tuple[str, ...]) -> object:
    """Each config composed once for all pages (about 170 ms each)."""
    return COMPOSE(name, list(overrides))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_command_shown_passes_its_checks(page: Path, monkeypatch) -> None:
    monkeypatch.setattr(keys, "compose", lambda name, overrides: _composed(name, tuple(overrides)))
    refused, seen = [], set()
    for number, command, arguments in shown_commands(page):
        if (command, *arguments) in seen:
            continue
        seen.add((command, *arguments))
        config = "config" if command == "train" else command
        try:
            check_arguments(config, arguments)
            keys.check_command_line(config, arguments)
        except Seq2SeqError as error:
            refused.append(
                f"{page.name}:{number}: seq2seq-{command} {shlex.join(arguments)}: {error}"
            )
    assert not refused, "\n".join(refused)


def test_the_pages_show_commands_to_check() -> None:
    """The extraction finds what the README shows (the quick start, the tour)."""
    found = {(command, tuple(args)) for _, command, args in shown_commands(REPO / "README.md")}
    assert ("train", ("experiment=multi30k_de_en_cpu",)) in found
    assert ("evaluate", ("run_dir=???",)) in found
    assert sum(1 for page in PAGES for _ in shown_commands(page)) > 200
