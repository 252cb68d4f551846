"""seq2seq-serve backend=onnx: a release's ONNX graphs on onnxruntime behind the same API, probes,
metrics and page as PyTorch, with the same answers; what the graphs cannot do is refused in one
line before the server starts."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest
from run_helpers import cli
from serve_helpers import SENTENCES, call, export, post, server

LINES = [*SENTENCES, "", "Ein Mann fährt Fahrrad."]


def answers(url: str, beam: int) -> list[dict]:
    status, body = post(
        url, {"sentences": LINES, "beam_size": beam, "nbest": beam, "alignment": True}
    )
    assert status == 200, body
    return body["translations"]


@pytest.mark.slow
def test_onnx_answers_as_torch_does(onnx_release: Path) -> None:
    found = {}
    for backend in ("torch", "onnx"):
        with server(onnx_release, f"backend={backend}") as (url, _):
            found[backend] = {beam: answers(url, beam) for beam in (1, 5)}
            status, card = call(f"{url}/model")
            assert status == 200 and card["backend"] == backend
    for beam in (1, 5):
        for torch_item, onnx_item in zip(found["torch"][beam], found["onnx"][beam], strict=True):
            assert onnx_item["translation"] == torch_item["translation"]
            alignment, expected = onnx_item["alignment"], torch_item["alignment"]
            assert (alignment["source"], alignment["target"]) == (
                expected["source"],
                expected["target"],
            )
            for row, expected_row in zip(alignment["weights"], expected["weights"], strict=True):
                assert row == pytest.approx(expected_row, abs=1e-3)
            if beam > 1:
                scores = [c["score"] for c in onnx_item["nbest"]]
                assert scores == pytest.approx([c["score"] for c in torch_item["nbest"]], abs=1e-3)
    assert found["onnx"][5][4] == {
        "translation": "",
        "nbest": [],
        "alignment": {"source": [], "target": [], "weights": []},
    }


@pytest.mark.slow
def test_onnx_probes_metrics_page_and_int8_graphs(onnx_release: Path) -> None:
    with server(onnx_release, "backend=onnx", "precision=int8") as (url, proc):
        assert call(f"{url}/health") == (200, {"status": "ok"})
        assert call(f"{url}/ready")[0] == 200
        status, body = post(url, SENTENCES[:2])
        assert status == 200 and all(item["translation"] for item in body["translations"])
        assert call(f"{url}/model")[1]["precision"] == "int8"
        with urllib.request.urlopen(f"{url}/", timeout=60) as page:
            assert b"<html" in page.read().lower()
        status, body = post(url, {"sentences": ["x" * 10], "beam_size": 99})
        assert status == 422
    assert "the int8 graphs" in proc.log()


def refusal(*overrides: str) -> str:
    """The one line a server that cannot start says, after checking it exits 1 and says one."""
    proc = subprocess.run(
        [*cli("serve"), *overrides],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.mark.slow
def test_onnx_refusals(smoke_run: Path, onnx_release: Path, tmp_path: Path) -> None:
    assert "has no ONNX graphs" in refusal(f"run_dir={smoke_run}", "backend=onnx")
    plain = export(smoke_run, tmp_path / "plain")
    assert "seq2seq-export" in refusal(f"run_dir={plain}", "backend=onnx")
    # the schema's rules (test_config_values has each), in the command's one line
    assert "not precision=bf16" in refusal(
        f"run_dir={onnx_release}", "backend=onnx", "precision=bf16"
    )
