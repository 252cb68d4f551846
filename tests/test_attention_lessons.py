"""docs/attention_lessons.md and docs/attention_lessons.zh.md: every ```python block runs, in
order and in one namespace per page, and prints exactly the ```text block that follows it, also
when pasted line by line into the classic `python` prompt.

A block preceded by ``<!-- needs MODULE -->`` runs only where MODULE can be imported (its output
is then checked like any other). The pages print shapes and True/False, never raw floats, so the
same text is right on every CPU. Both pages run in about 2 seconds.
"""

from __future__ import annotations

import ast
import code
import contextlib
import importlib.util
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "docs" / "attention_lessons.md", REPO / "docs" / "attention_lessons.zh.md"]

EXTRAS = {"entmax": "sparse"}  # the extra (pyproject.toml) of each module a block needs

# a fenced block, with the optional "needs" comment right above it
FENCE = re.compile(
    r"(?:<!-- needs (?P<needs>[\w.]+) -->\n)?^```(?P<kind>\w*)\n(?P<body>.*?)^```$", re.M | re.S
)


@dataclass
class Lesson:
    code: str
    expected: str
    line: int  # where the code block starts in the page, for the failure message
    needs: str | None


def lessons(page: Path) -> list[Lesson]:
    """The page's (code, expected output) pairs; every ```python block has a ```text after it."""
    text = page.read_text(encoding="utf-8")
    found, pending = [], None
    for block in FENCE.finditer(text):
        line = text.count("\n", 0, block.start("body"))
        if block["kind"] == "python":
            assert pending is None, f"{page.name}:{pending.line}: a python block without output"
            pending = Lesson(block["body"], "", line, block["needs"])
        elif block["kind"] == "text" and pending is not None:
            pending.expected = block["body"]
            found.append(pending)
            pending = None
    assert pending is None, f"{page.name}:{pending.line}: the last python block has no output"
    return found


def normalized(output: str) -> str:
    return "\n".join(line.rstrip() for line in output.strip("\n").splitlines())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_lesson_prints_its_expected_output(page: Path) -> None:
    namespace: dict = {"__name__": "__lesson__"}
    ran = 0
    for lesson in lessons(page):
        if lesson.needs and importlib.util.find_spec(lesson.needs) is None:
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(lesson.code, f"{page.name}:{lesson.line}", "exec"), namespace)
        assert normalized(printed.getvalue()) == normalized(lesson.expected), (
            f"{page.name}, the block at line {lesson.line}"
        )
        ran += 1
    assert ran >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_lesson_pastes_into_the_plain_python_prompt(page: Path) -> None:
    """The page says to paste the blocks into Python: fed line by line to the classic >>> prompt
    (plus the Enter a paste ending at ... needs), every block runs without an error and prints
    just its expected output (no echoed values)."""
    errors: list[str] = []
    console = code.InteractiveConsole({"__name__": "__console__"})
    console.write = errors.append  # tracebacks and syntax errors
    for lesson in lessons(page):
        if lesson.needs and importlib.util.find_spec(lesson.needs) is None:
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            for line in [*lesson.code.splitlines(), ""]:
                console.push(line)
        assert not errors, f"{page.name}, the block at line {lesson.line}: {''.join(errors)}"
        assert normalized(printed.getvalue()) == normalized(lesson.expected), (
            f"{page.name}, the block at line {lesson.line}"
        )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_introduction_names_the_extra_of_each_block_that_needs_one(page: Path) -> None:
    """The introduction says what to install before pasting: with the package alone, a block
    that needs a module (<!-- needs entmax -->) fails, so its extra is named there too."""
    introduction = page.read_text(encoding="utf-8").split("\n## ", 1)[0].replace("\n", " ")
    for needs in {lesson.needs for lesson in lessons(page) if lesson.needs}:
        assert f"pip install -e '.[{EXTRAS[needs]}]'" in introduction, needs


def test_the_chinese_page_runs_the_same_lessons() -> None:
    """The same code (comments aside) and the same outputs: the twins teach the same thing."""
    english, chinese = (lessons(page) for page in PAGES)
    assert len(english) == len(chinese)
    for en, zh in zip(english, chinese, strict=True):
        assert ast.dump(ast.parse(en.code)) == ast.dump(ast.parse(zh.code)), f"line {zh.line}"
        assert normalized(en.expected) == normalized(zh.expected), f"line {zh.line}"
        assert en.needs == zh.needs


def test_a_changed_output_fails(tmp_path: Path) -> None:
    """The comparison is real: one changed character of an expected output is caught."""
    text = PAGES[0].read_text(encoding="utf-8")
    broken = tmp_path / "broken.md"
    broken.write_text(text.replace("padding weights are exactly 0: True", "... : False"), "utf-8")
    assert broken.read_text(encoding="utf-8") != text
    with pytest.raises(AssertionError, match="broken.md, the block at line"):
        test_every_lesson_prints_its_expected_output(broken)
