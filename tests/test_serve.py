"""seq2seq-export and seq2seq-serve through real processes on 127.0.0.1: the API, its limits,
batching under concurrency, shutdown, releases, and the web page in a real browser."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from run_helpers import cli
from serve_helpers import (
    KNOWN,
    SENTENCES,
    call,
    cli_translations,
    export,
    headless_browser,
    post,
    server,
)

from seq2seq.data.corpus import read_parallel


@pytest.fixture(scope="module")
def served(smoke_run: Path) -> Iterator[str]:
    with server(smoke_run) as (url, _):
        yield url


@pytest.mark.slow
def test_translations_equal_the_command_lines(served: str, smoke_run: Path) -> None:
    status, data = post(served, SENTENCES)
    assert status == 200
    assert [t["translation"] for t in data["translations"]] == cli_translations(
        smoke_run, SENTENCES
    )
    status, data = post(served, {"sentences": SENTENCES[:2], "beam_size": 1})
    greedy = cli_translations(smoke_run, SENTENCES[:2], "beam_size=1")
    assert [t["translation"] for t in data["translations"]] == greedy


def test_nbest_and_alignment(served: str) -> None:
    status, data = post(
        served, {"sentences": SENTENCES[:1], "beam_size": 4, "nbest": 3, "alignment": True}
    )
    assert status == 200
    [item] = data["translations"]
    assert len(item["nbest"]) == 3 and item["nbest"][0]["translation"] == item["translation"]
    scores = [h["score"] for h in item["nbest"]]
    assert scores == sorted(scores, reverse=True)
    al = item["alignment"]
    assert al["source"][-1] == al["target"][-1] == "</s>"
    assert len(al["weights"]) == len(al["target"])
    assert all(len(row) == len(al["source"]) and abs(sum(row) - 1) < 1e-3 for row in al["weights"])


def test_health_model_page_and_unknown_paths(served: str) -> None:
    assert call(f"{served}/health") == (200, {"status": "ok"})
    status, card = call(f"{served}/model")
    assert status == 200 and (card["src_lang"], card["tgt_lang"]) == ("de", "en")
    assert (card["name"], card["attention"]) == ("run", "bahdanau")
    assert call(f"{served}/models") == (200, {"default": "run", "models": [card]})
    with urllib.request.urlopen(f"{served}/", timeout=60) as response:
        assert "<textarea" in response.read().decode()
    assert call(f"{served}/nowhere")[0] == 404
    assert call(f"{served}/translate")[0] == 405  # GET


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        (b"{not json", 400, "not JSON"),
        (b"\xff\xfd", 400, "the request body, line 1: invalid UTF-8 (invalid start byte)"),
        (b"\xff\xfe[", 400, "the request body is UTF-16 text (byte-order mark FF FE)"),
        ({"sentences": "one string"}, 422, "JSON list of sentences"),
        ([1, 2], 422, "JSON list of sentences"),
        ({"text": ["a"]}, 422, f"unknown fields: text; the fields are {KNOWN}"),
        ([], 422, "no sentences"),
        (["a"] * 65, 413, "at most 64 per request"),
        (["x" * 1001], 413, "at most 1000"),
        (["two\nlines"], 422, "line break"),
        (
            {"sentences": ["a"], "beam_size": 0},
            422,
            "beam_size must be a whole number from 1 to 10",
        ),
        ({"sentences": ["a"], "beam_size": 11}, 422, "beam_size"),
        ({"sentences": ["a"], "beam_size": "5"}, 422, "beam_size"),
        ({"sentences": ["a"], "beam_size": 2, "nbest": 3}, 422, "nbest must be"),
        ({"sentences": ["a"], "alignment": "yes"}, 422, "alignment must be"),
        (b"[" + b'"a",' * 30000 + b'"a"]', 413, "bytes"),
        (b"[" * 5000 + b"]" * 5000, 400, "nests too deeply"),
        ({"sentences": ["a"], "constraints": [["dog"] * 21]}, 413, "21 constraints; at most 20"),
        ({"sentences": ["a"], "constraints": [["d" * 600] * 2]}, 413, "1200 characters"),
        ({"sentences": ["a"], "prefixes": ["x" * 1001]}, 413, "prefix: 1001 characters"),
    ],
)
def test_bad_requests_get_4xx_and_a_json_error(served, payload, status, message) -> None:
    got, data = post(served, payload)
    assert got == status and message in data["error"], data


def test_concurrent_requests_are_all_answered_in_order(served: str) -> None:
    alone = {s: post(served, [s])[1]["translations"][0]["translation"] for s in SENTENCES}
    requests = [[SENTENCES[(i + j) % 4] for j in range(1 + i % 3)] for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda sentences: post(served, sentences), requests))
    for sentences, (status, data) in zip(requests, answers, strict=True):
        assert status == 200
        assert [t["translation"] for t in data["translations"]] == [alone[s] for s in sentences]


def test_api_key(smoke_run: Path) -> None:
    with server(smoke_run, "api_key=s3cret") as (url, _):
        assert post(url, ["Ein Hund."])[0] == 401
        assert post(url, ["Ein Hund."], **{"X-API-Key": "wrong"})[0] == 401
        assert call(f"{url}/model")[0] == 401
        assert post(url, ["Ein Hund."], **{"X-API-Key": "s3cret"})[0] == 200
        assert call(f"{url}/health")[0] == 200  # for load balancers


def test_sigterm_under_load_finishes_or_refuses_cleanly(smoke_run: Path) -> None:
    with server(smoke_run) as (url, proc):

        def one(i: int) -> str:
            try:
                status, data = post(url, {"sentences": SENTENCES, "beam_size": 5})
            except OSError:  # refused or reset once the server stopped accepting
                return "refused"
            assert status == 200 and len(data["translations"]) == 4, data  # never a 500
            return "answered"

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            outcomes = [pool.submit(one, i) for i in range(48)]
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            results = [f.result() for f in outcomes]
        # uvicorn finishes the requests in hand, then lets the signal end the process
        assert proc.wait(60) in (0, -signal.SIGTERM)
        assert "answered" in results
        assert "Traceback" not in proc.log()
        assert "stopped by SIGTERM: the requests already in were answered" in proc.log()


# -- releases ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def release(smoke_run: Path, tmp_path_factory) -> Path:
    return export(smoke_run, tmp_path_factory.mktemp("release") / "de-en")


def evaluate(run_dir: Path, *overrides: str, cwd: Path | None = None) -> dict:
    """`seq2seq-evaluate`'s result; ``cwd``: where a download goes (a release's ``data.root``
    is relative), not the directory pytest runs in."""
    proc = subprocess.run(
        [*cli("evaluate"), f"run_dir={run_dir}", *overrides],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_release_reproduces_the_run_and_holds_no_pickle(
    smoke_run: Path, release: Path, multi30k_url: str, tmp_path: Path
) -> None:
    names = sorted(p.name for p in release.iterdir())
    assert names == [
        "README.md",
        "config.yaml",
        "manifest.json",
        "model.safetensors",
        "release.json",
        "src.model",
        "tgt.model",
    ]
    weights = (release / "model.safetensors").read_bytes()
    header = json.loads(weights[8 : 8 + int.from_bytes(weights[:8], "little")])
    assert all(v["dtype"] == "F32" for k, v in header.items() if k != "__metadata__")
    for path in release.iterdir():  # no pickle, no torch.save zip archive
        assert path.name == "model.safetensors" or path.read_bytes()[:2] not in (b"PK", b"\x80\x02")
    card = (release / "README.md").read_text()
    assert "de→en" in card and "non-commercial" in card and "seq2seq-translate" in card
    facts = json.loads((release / "release.json").read_text())
    assert facts["device"] == torch.load(smoke_run / "last.pt", weights_only=True)["device"]
    assert facts["device"].startswith("cpu, fp32")  # from the checkpoint, not the log
    # the release keeps no path of the training machine: say where Multi30k is
    on_release = evaluate(release, f"data_source={multi30k_url}", cwd=tmp_path)
    on_run = evaluate(smoke_run)
    assert (on_release["bleu"], on_release["ppl"]) == (on_run["bleu"], on_run["ppl"])  # exactly


def test_a_tampered_release_is_refused(release: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(release, copy)
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-7] ^= 0x01  # one bit of one weight
    (copy / "model.safetensors").write_bytes(bytes(weights))
    proc = subprocess.run(
        [*cli("translate"), f"run_dir={copy}"],
        input="Ein Hund.\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "model.safetensors does not match its SHA-256" in proc.stderr


def test_a_release_is_as_readable_as_the_umask_allows(release: Path) -> None:
    """Every file, the weights included (safetensors writes 0600), is readable by a server that
    runs as another user, as the umask of the exporting process allows."""
    mask = os.umask(0o022)
    os.umask(mask)
    files = [p for p in release.iterdir() if p.is_file()]  # evaluating it adds eval/
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert "model.safetensors" in modes
    assert modes == dict.fromkeys(modes, oct(0o666 & ~mask))


def test_a_taken_port_is_refused_before_the_model_loads(smoke_run: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                *cli("serve"),
                f"run_dir={smoke_run}",
                f"port={port}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    said = proc.stderr.splitlines()
    assert said == [f"[ERROR] cannot serve on 127.0.0.1:{port}: Address already in use"], said


def test_a_release_is_served(release: Path) -> None:
    with server(release) as (url, _):
        status, data = post(url, SENTENCES[:2])
        assert status == 200 and all(t["translation"] for t in data["translations"])
        status, card = call(f"{url}/model")
        assert card["parameters"] > 0 and card["recipe"].startswith("seq2seq-train")


# -- the page in a real browser ------------------------------------------------------------------


def test_the_page_translates_and_draws_the_heatmap(served: str, tmp_path: Path) -> None:
    with headless_browser() as browser:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        browser.get(served + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_element(By.ID, "model").text.strip())  # the card is in
        browser.find_element(By.ID, "source").send_keys(SENTENCES[0])
        browser.find_element(By.ID, "go").click()
        wait.until(lambda b: b.find_element(By.ID, "translation").text.strip())
        rows = wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#alignment tr.target-row"))
        status, data = post(served, {"sentences": SENTENCES[:1], "alignment": True})
        item = data["translations"][0]
        assert browser.find_element(By.ID, "translation").text == item["translation"]
        assert len(rows) == len(item["alignment"]["target"])  # one row per target piece
        assert not browser.find_elements(By.CSS_SELECTOR, "#columns .column")  # one model
        shot = Path(os.environ.get("SEQ2SEQ_SCREENSHOT", tmp_path / "page.png"))
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 0


def test_the_page_completes_a_prefix_as_it_is_typed(served: str) -> None:
    """The prefix box: each pause in typing asks for a completion of what is typed so far; the
    last one shown starts with the whole prefix, as the API completes it, with its latency."""
    with headless_browser() as browser:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        browser.get(served + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_element(By.ID, "model").text.strip())
        browser.find_element(By.ID, "source").send_keys(SENTENCES[0])
        box = browser.find_element(By.ID, "prefix")
        for part in ("A", " big", " brown"):
            box.send_keys(part)
            wait.until(lambda b, p=part: "completed" in b.find_element(By.ID, "latency").text)
            typed = box.get_attribute("value")
            wait.until(lambda b, t=typed: f'"{t}"' in b.find_element(By.ID, "latency").text)
            wait.until(lambda b, t=typed: b.find_element(By.ID, "translation").text.startswith(t))
        request = {"sentences": SENTENCES[:1], "prefixes": ["A big brown"]}
        status, data = post(served, request)
        assert status == 200
        assert (
            browser.find_element(By.ID, "translation").text
            == data["translations"][0]["translation"]
        )
        assert browser.find_element(By.ID, "latency").text.endswith(" ms")


def test_the_page_asks_for_the_api_key_and_sends_it(smoke_run: Path) -> None:
    """With api_key=, the page shows a key field (the probes of /models answer 401), and once
    the key is typed its model line and translations come back."""
    with server(smoke_run, "api_key=secret") as (url, proc), headless_browser() as browser:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys
        from selenium.webdriver.support.ui import WebDriverWait

        browser.get(url + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_element(By.ID, "apikey").is_displayed())
        browser.find_element(By.ID, "apikey").send_keys("secret", Keys.TAB)
        wait.until(lambda b: "→" in b.find_element(By.ID, "model").text)
        browser.find_element(By.ID, "source").send_keys(SENTENCES[0])
        browser.find_element(By.ID, "go").click()
        wait.until(lambda b: b.find_element(By.ID, "translation").text.strip())
        assert browser.find_element(By.ID, "error").text == ""
        assert "the page at / asks for it" in proc.log()


@pytest.mark.slow
def test_serve_bench_reports(served: str, tmp_path: Path, multi30k_dir: Path) -> None:
    sources, _ = read_parallel(multi30k_dir / "val.de.gz", multi30k_dir / "val.en.gz", 50)
    (tmp_path / "s.de").write_text("\n".join(sources) + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/serve_bench.py",
            served,
            "--clients",
            "1,4",
            "--seconds",
            "3",
            "--overload-seconds",
            "3",
            "--input",
            str(tmp_path / "s.de"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    ramp, overload = report["phases"][:2], report["phases"][2]
    assert [phase["clients"] for phase in ramp] == [1, 4]
    for phase in report["phases"]:
        assert (phase["lost"], phase["other_status"]) == (0, 0), phase
        assert phase["answered_200"] > 0
        assert phase["p50_ms"] <= phase["p95_ms"] <= phase["p99_ms"]
        assert phase["health_probes"] > 0 and phase["rss_mb_max"] > 0
    assert overload["offered_per_s"] == pytest.approx(2 * report["capacity"], rel=0.01)
    assert "| overload |" in proc.stdout
