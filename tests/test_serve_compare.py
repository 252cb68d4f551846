"""seq2seq-serve with several models (``compare_with=``), through a real process: each model served
under its folder's name, requests routed by ``"model"``, batches never mixed across models, the
settings refused at start, and the page's side-by-side columns in a real browser."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import cli
from serve_helpers import (
    SENTENCES,
    call,
    cli_translations,
    export,
    free_port,
    headless_browser,
    post,
    server,
)

NAMES = ["bahdanau", "luong"]


@pytest.fixture(scope="module")
def releases(smoke_run: Path, luong_run: Path, tmp_path_factory) -> dict[str, Path]:
    """Two releases of one language pair: the trained smoke run (Bahdanau attention) and an
    untrained Luong model, named by their folders."""
    base = tmp_path_factory.mktemp("releases")
    runs = zip(NAMES, (smoke_run, luong_run), strict=True)
    return {name: export(run, base / name) for name, run in runs}


@pytest.fixture(scope="module")
def pair(releases: dict[str, Path]) -> Iterator[str]:
    """A server of both releases, bahdanau the default; a batch waits 50 ms for company, so
    that requests to both models arrive in one batch's window."""
    compare = f"compare_with=[{releases['luong']}]"
    with server(releases["bahdanau"], compare, "batch_wait_ms=50") as (url, _):
        yield url


def test_models_lists_every_model_by_its_folder_name(pair: str) -> None:
    status, listing = call(f"{pair}/models")
    assert status == 200 and listing["default"] == "bahdanau"
    cards = listing["models"]
    assert [card["name"] for card in cards] == NAMES
    assert [card["attention"] for card in cards] == NAMES
    assert cards[0]["attention_label"] == "bahdanau"
    assert cards[1]["attention_label"].startswith("luong (general")
    assert all(card["parameters"] > 0 and card["src_lang"] == "de" for card in cards)
    assert call(f"{pair}/model") == (200, cards[0])  # the default's, as with one model


@pytest.mark.slow
def test_each_model_answers_as_its_own_command_line(pair: str, releases: dict[str, Path]):
    answers = {}
    for name in NAMES:
        status, data = post(pair, {"sentences": SENTENCES[:2], "model": name})
        assert status == 200 and data["model"] == name
        answers[name] = [t["translation"] for t in data["translations"]]
        assert answers[name] == cli_translations(releases[name], SENTENCES[:2])
    assert answers["bahdanau"] != answers["luong"]  # two models, two answers
    status, data = post(pair, SENTENCES[:2])  # no "model": the default
    assert status == 200 and data["model"] == "bahdanau"
    assert [t["translation"] for t in data["translations"]] == answers["bahdanau"]


def decoded(url: str) -> dict[str, float]:
    """Sentences decoded so far by each model, from /metrics (which also describes each)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    counts = {}
    for model in NAMES:
        assert re.search(rf'^seq2seq_model_info{{.*model="{model}".*}} 1\.0$', text, re.MULTILINE)
        line = rf'^seq2seq_sentences_decoded_total{{model="{model}"}} (\S+)$'
        found = re.search(line, text, re.MULTILINE)
        counts[model] = float(found.group(1)) if found else 0.0
    return counts


def test_concurrent_requests_to_both_models_are_never_mixed(pair: str) -> None:
    def ask(model: str, sentence: str) -> tuple[str, str, dict]:
        status, data = post(pair, {"sentences": [sentence], "model": model})
        assert status == 200, data
        return model, sentence, data

    before = decoded(pair)
    alone = {(m, s): ask(m, s)[2]["translations"] for m in NAMES for s in SENTENCES}
    assert alone["bahdanau", SENTENCES[0]] != alone["luong", SENTENCES[0]]
    jobs = [(NAMES[i % 2], SENTENCES[(i // 2) % 4]) for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda job: ask(*job), jobs))
    for model, sentence, data in answers:
        assert data["model"] == model
        assert data["translations"] == alone[model, sentence], (model, sentence)
    after = decoded(pair)
    assert {m: after[m] - before[m] for m in NAMES} == {m: 4 + 12 for m in NAMES}


@pytest.mark.parametrize(
    ("model", "status", "words"),
    [
        ("transformer", 404, ["no model named 'transformer'", "bahdanau, luong"]),
        ("", 404, ["no model named ''"]),
        (3, 422, ["model must be the name of a served model: bahdanau, luong"]),
    ],
)
def test_a_model_not_served_is_refused_naming_those_that_are(pair, model, status, words) -> None:
    got, data = post(pair, {"sentences": SENTENCES[:1], "model": model})
    assert got == status and all(word in data["error"] for word in words), data


def serve_refused(run_dir: Path, *overrides: str) -> str:
    """The error line of a seq2seq-serve that must refuse to start: exit 1, one error line, no
    traceback (one that starts instead is stopped by the time limit, and the test fails)."""
    proc = subprocess.run(
        [*cli("serve"), f"run_dir={run_dir}", f"port={free_port()}", *overrides],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("[ERROR]")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_two_folders_of_one_name_are_refused(releases: dict[str, Path], tmp_path: Path):
    twin = tmp_path / "elsewhere" / "bahdanau"
    shutil.copytree(releases["bahdanau"], twin)
    error = serve_refused(releases["bahdanau"], f"compare_with=[{releases['luong']},{twin}]")
    assert "two models 'bahdanau'" in error and str(twin) in error
    error = serve_refused(releases["luong"], f"compare_with=[{releases['luong']}]")  # itself
    assert "two models 'luong'" in error


def test_a_folder_that_does_not_load_is_refused(releases: dict[str, Path], tmp_path: Path):
    error = serve_refused(releases["bahdanau"], f"compare_with=[{tmp_path / 'nothing'}]")
    assert f"compare_with: {tmp_path / 'nothing'} is not a training run or release folder" in error


def test_compare_with_ensemble_is_refused(releases: dict[str, Path]) -> None:
    luong = releases["luong"]
    error = serve_refused(releases["bahdanau"], f"compare_with=[{luong}]", f"ensemble=[{luong}]")
    assert "give one or the other" in error


def test_the_page_shows_every_models_translation_and_heatmap(pair: str, tmp_path: Path):
    with headless_browser() as browser:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        browser.set_window_size(1400, 1400)
        browser.get(pair + "/")
        wait = WebDriverWait(browser, 60)
        columns = wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#columns .column"))
        assert [c.find_element(By.CSS_SELECTOR, "h2").text for c in columns] == NAMES
        labels = [c.find_element(By.CSS_SELECTOR, ".attention").text for c in columns]
        assert labels[0].startswith("bahdanau attention") and "luong (general" in labels[1]
        assert not browser.find_element(By.ID, "single").is_displayed()
        browser.find_element(By.ID, "source").send_keys(SENTENCES[0])
        browser.find_element(By.ID, "go").click()
        for name, col in zip(NAMES, columns, strict=True):
            rows = wait.until(lambda b, c=col: c.find_elements(By.CSS_SELECTOR, "tr.target-row"))
            query = {"sentences": SENTENCES[:1], "alignment": True, "model": name}
            item = post(pair, query)[1]["translations"][0]
            assert col.find_element(By.CSS_SELECTOR, ".translation").text == item["translation"]
            assert len(rows) == len(item["alignment"]["target"]), name  # a row per target piece
        assert columns[0].location["y"] == columns[1].location["y"]  # side by side
        assert columns[0].location["x"] < columns[1].location["x"]
        shot = Path(os.environ.get("SEQ2SEQ_COMPARE_SCREENSHOT", tmp_path / "compare.png"))
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 0
