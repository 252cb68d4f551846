"""A release exported again (e.g. with onnx=true) from a release folder states what the first
did of its training, and its card's install line installs seq2seq with its lite/ package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serve_helpers import export


@pytest.mark.slow
def test_a_release_of_a_release_keeps_its_facts(smoke_run: Path, tmp_path: Path) -> None:
    first = export(smoke_run, tmp_path / "first")
    again = export(first, tmp_path / "again")
    stated = json.loads((first / "release.json").read_text())
    assert stated["recipe"].startswith("seq2seq-train") and stated["training_minutes"] is not None
    assert json.loads((again / "release.json").read_text()) == stated
    card = (again / "README.md").read_text()
    assert card == (first / "README.md").read_text()
    assert "pip install torch /path/to/seq2seq /path/to/seq2seq/lite\n" in card
