"""notebooks/attention.ipynb and attention.zh.ipynb: kept in git without outputs, and every cell
runs headless (nbclient), training a tiny model (25 updates, 64 units) and drawing its heatmap.
"""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import tokenize
from pathlib import Path

import pytest
from run_helpers import composed

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
NAMES = ["attention.ipynb", "attention.zh.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_is_kept_without_outputs(name: str) -> None:
    cells = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code
    assert [cell["outputs"] for cell in code] == [[]] * len(code)
    assert {cell["execution_count"] for cell in code} == {None}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_runs_and_draws_the_heatmap(
    name: str, multi30k_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cell runs without an error, in order, in a fresh kernel; the heatmap is written as
    a PNG and shown in the notebook's output."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("SEQ2SEQ_MULTI30K", str(multi30k_dir))  # the kernel inherits these
    monkeypatch.setenv("SEQ2SEQ_NOTEBOOK_DIR", str(tmp_path))
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on an error
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    outputs = [output for cell in code for output in cell.outputs]
    assert all(cell.execution_count for cell in code)
    assert [o for o in outputs if o.output_type == "error"] == []
    assert (tmp_path / "heatmap.png").stat().st_size > 1000
    assert any("image/png" in o.get("data", {}) for o in outputs)


def training_overrides(name: str, steps: int, work: Path) -> list[str]:
    """The overrides the notebook's training cell passes, with ``STEPS = steps``."""
    cells = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))["cells"]
    source = next("".join(c["source"]) for c in cells if "command += [" in "".join(c["source"]))
    listed = next(
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.AugAssign) and isinstance(node.value, ast.List)
    )
    names = {"STEPS": steps, "WORK": work, "run": work / "run"}
    return [eval(compile(ast.Expression(item), name, "eval"), names) for item in listed.elts]


@pytest.mark.parametrize("name", NAMES)
def test_raising_steps_trains_that_many_updates(name: str, tmp_path: Path) -> None:
    """STEPS = 300 means 300 updates: neither the smoke recipe's epochs (an epoch has at least
    one update) nor early stopping (at most one validation per epoch here) stops it sooner."""
    overrides = training_overrides(name, 300, tmp_path)
    cfg = composed(*(o for o in overrides if not o.startswith("hydra.")))
    assert cfg.train.max_steps == 300
    assert cfg.train.validate_every is None
    assert cfg.train.max_epochs >= 300 and cfg.train.patience >= 300


@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_trains_on_the_local_multi30k_it_is_given(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SEQ2SEQ_MULTI30K, a folder of the official files as data.source takes them (no
    SHA256SUMS needed), becomes the training's data.source; the lessons say how to open the
    notebook and set it."""
    local = tmp_path / "m30k"
    local.mkdir()
    (local / "train.de.gz").write_bytes(b"")
    monkeypatch.setenv("SEQ2SEQ_MULTI30K", str(local))
    monkeypatch.setenv("SEQ2SEQ_NOTEBOOK_DIR", str(tmp_path / "work"))
    ran = []

    def training(command: list[str], **_: object) -> subprocess.CompletedProcess:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "trained\n", "")

    monkeypatch.setattr(subprocess, "run", training)
    cells = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))["cells"]
    namespace: dict = {}
    for index in (1, 6):  # the settings, then the training
        exec("".join(cells[index]["source"]), namespace)
    assert f"data.source={local}" in ran[0]
    lessons = "attention_lessons.zh.md" if ".zh." in name else "attention_lessons.md"
    page = (REPO / "docs" / lessons).read_text(encoding="utf-8")
    assert "pip install jupyterlab" in page and "SEQ2SEQ_MULTI30K" in page
    assert f"`jupyter lab notebooks/{name}`" in page


def test_the_chinese_notebook_speaks_chinese_in_its_comments_and_title() -> None:
    """Every comment of its code with an English word (of four letters or more, paths and
    $VARIABLES aside) has Chinese too, and the heatmap's title is Chinese."""
    cells = json.loads((NOTEBOOKS / "attention.zh.ipynb").read_text(encoding="utf-8"))["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)]
    comments = [c for c in comments if c.startswith("#")]
    english = [c for c in comments if re.search(r"(?<![\w/.$<])[A-Za-z]{4,}(?![\w/.>])", c)]
    assert [c for c in english if not re.search(r"[\u4e00-\u9fff]", c)] == []
    title = re.search(r'attention_figure\(weights, source, target, "([^"]*)"\)', source)
    assert title is not None and re.search(r"[\u4e00-\u9fff]", title.group(1))
