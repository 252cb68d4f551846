"""docs/attention.md and docs/attention.zh.md: quoted code is the code, the tables are the
record's, and the Chinese page stands on its own."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from run_helpers import composed

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import attention_runs  # noqa: E402
import attention_table  # noqa: E402

DOCS = REPO / "docs"
PAGES = [DOCS / "attention.md", DOCS / "attention.zh.md"]


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_quoted_python_line_is_a_line_of_the_package(page: Path) -> None:
    """A ```python block quotes the code: each of its lines, stripped, is a line of seq2seq/."""
    source = {
        line.strip()
        for path in (REPO / "seq2seq").rglob("*.py")
        for line in read(path).splitlines()
    }
    blocks = re.findall(r"```python\n(.*?)```", read(page), re.S)
    assert len(blocks) > 20
    stale = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert [line for line in stale if line.strip() not in source] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_tables_are_the_records_in_the_pages_language(page: Path) -> None:
    """What ``attention_table.py --record docs/attention_comparison.jsonl --docs`` would write."""
    lines = read(DOCS / "attention_comparison.jsonl").splitlines()
    runs = [attention_runs.Run.from_json(line) for line in lines]
    tables = attention_table.tables(runs, attention_table.page_language(page))
    text = read(page)
    for name, body in tables.items():
        found = re.search(
            rf"<!-- attention_table:{name} -->\n(.*?)\n<!-- /attention_table -->", text, re.S
        )
        assert found is not None and found.group(1) == body, f"{page.name}: table {name}"


def headings(text: str) -> set[str]:
    """The anchors of a page: its explicit <a id> and GitHub's slugs of its headings."""
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
    for title in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_within_the_page_has_its_anchor(page: Path) -> None:
    text = read(page)
    missing = set(re.findall(r"\]\(#([^)]+)\)", text)) - headings(text)
    assert missing == set()


def test_the_chinese_page_stands_on_its_own() -> None:
    """No sentence that sends the reader to the English page as the one that counts, no table in
    English, and a link to a page that exists only in English says so."""
    text = read(DOCS / "attention.zh.md")
    for deferral in ("以英文版为准", "以英文为准", "英文版为准"):
        assert deferral not in text
    english_headers = re.findall(
        r"^\| *(direction|row|variant|attention|symbol|you want)\b", text, re.M | re.I
    )
    assert english_headers == []
    assert "Summarised on" not in text
    for label, target in re.findall(r"\[([^\]]*)\]\(([\w./-]+\.md)(?:#[^)]*)?\)", text):
        if not target.endswith(".zh.md"):
            assert "英文" in label, f"[{label}]({target}): an English page, not labelled so"
    for term in (
        "查询",
        "键",
        "值",
        "配置项",
        "加性注意力",
        "乘性注意力",
        "缩放点积注意力",
        "掩码",
        "多头注意力",
        "覆盖机制",
    ):
        assert term in text, term
    # 键 is the attention's key; a config key is a 配置项
    assert re.search(r"`[\w.]+` ?键|的键[（(]`|其余的键|没有的键", text) is None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_exercises_train_in_the_tables_precision(page: Path) -> None:
    """The table's runs were fp32 ("What was measured"); precision=auto would train the
    exercises in bf16 on a CPU with native bf16, so every exercise's comparison run pins fp32."""
    exercises = read(page).split(
        '<a id="exercises"></a>' if ".zh." in page.name else "## Exercises"
    )
    commands = re.findall(
        r"^ *seq2seq-train experiment=attention_comparison .*$", exercises[1], re.M
    )
    assert len(commands) >= 8
    assert [c for c in commands if " precision=fp32" not in c] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_exercise_6s_quick_alternative_trains_the_attention_of_its_answer(page: Path) -> None:
    """The reference answer is the Chinese recipe's Luong general; the smoke recipe it offers as
    the three-minute version inherits Bahdanau unless the command says otherwise."""
    quick = re.search(r"`(experiment=tatoeba_zh_en_smoke[^`]*)`", read(page))
    assert quick is not None
    answer = composed("experiment=tatoeba_zh_en_cpu").model.attention
    tried = composed(*quick.group(1).split()).model.attention
    assert (
        (tried.name, tried.get("score"))
        == (answer.name, answer.get("score"))
        == ("luong", "general")
    )
