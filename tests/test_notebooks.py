"""notebooks/attention.ipynb and attention.zh.ipynb: kept in git without outputs, and every cell
runs headless (nbclient), training a tiny model (25 updates, 64 units) and drawing its heatmap.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
