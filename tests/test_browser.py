"""seq2seq-export onnx=true browser=true: a static folder that translates in headless Chromium,
with no server behind it but a static one, as the lite translator does (greedy and beam 5, the
n-best scores), and through the served page; an export that cannot make it says so in one line."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import sentencepiece as spm
from run_helpers import browser_search, command
from seq2seq_lite import Translator as LiteTranslator
from serve_helpers import KNOWN, SENTENCES, export, headless_browser

from seq2seq.storage.rundir import SRC_TOKENIZER

LINES = [*SENTENCES, "", "Ein Mann fährt Fahrrad."]
# the folder's translations of LINES, or an error, from a page script
TRANSLATE = """
const [lines, options, done] = arguments;
window.seq2seq.then((t) => t.translate(lines, options)).then(done, (e) => done({error: String(e)}));
"""


@pytest.fixture(scope="module")
def browser_release(smoke_run: Path, tmp_path_factory) -> Path:
    if shutil.which("npm") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("npm is needed for browser=true")
        pytest.skip("npm is needed for browser=true")
    out = tmp_path_factory.mktemp("release") / "de-en"
    return export(smoke_run, out, "onnx=true", "browser=true")


@contextlib.contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """The folder on a plain static file server, as any web host would serve it."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@pytest.mark.slow
def test_the_browser_translates_as_lite_does(browser_release: Path) -> None:
    with static_site(browser_release / "browser") as url, headless_browser() as browser:
        browser.set_script_timeout(300)
        browser.get(url + "/")
        for beam in (1, 5):
            nbest = 3 if beam > 1 else 1
            found = browser.execute_async_script(
                TRANSLATE, LINES, {"beam_size": beam, "nbest": nbest}
            )
            assert "error" not in found, found
            lite = LiteTranslator.load(browser_release, beam_size=beam, nbest=nbest)
            expected = lite.translate(LINES)
            for item, result in zip(found, expected, strict=True):
                assert item["translation"] == (result.texts[0] if result.texts else "")
                if beam > 1:
                    assert [c["translation"] for c in item["nbest"]] == result.texts
                    scores = [h.score for h in result.hypotheses]
                    assert [c["score"] for c in item["nbest"]] == pytest.approx(scores, abs=1e-3)
                weights = item["alignment"]["weights"]
                if result.hypotheses:
                    attention = result.hypotheses[0].attention
                    assert len(weights) == attention.shape[0]
                    for row, expected_row in zip(weights, attention.tolist(), strict=True):
                        assert row == pytest.approx(expected_row, abs=1e-3)
        assert found[4] == {
            "translation": "",
            "nbest": [],
            "alignment": {"source": [], "target": [], "weights": []},
        }


@pytest.mark.slow
def test_the_page_translates_in_the_browser(browser_release: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with static_site(browser_release / "browser") as url, headless_browser() as browser:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda b: "ready" in b.find_element(By.TAG_NAME, "body").get_attribute("class"))
        assert "de → en" in browser.find_element(By.ID, "model").text
        browser.find_element(By.ID, "source").send_keys(SENTENCES[1])
        browser.find_element(By.ID, "go").click()
        rows = wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "tr.target-row"))
        lite = LiteTranslator.load(browser_release)
        [expected] = lite.translate(SENTENCES[1:2])
        assert browser.find_element(By.ID, "translation").text == expected.texts[0]
        assert len(rows) == expected.hypotheses[0].attention.shape[0]  # a row per target piece
        assert browser.find_element(By.ID, "error").text == ""


# each body's answer from the page's POST handler, as [status, JSON]
ANSWER = """
const [bodies, done] = arguments;
window.seq2seq.then(async (t) => {
  const out = [];
  for (const body of bodies) {
    const response = await t.answer(body);
    out.push([response.status, await response.json()]);
  }
  return out;
}).then(done, (e) => done({error: String(e)}));
"""


@pytest.mark.slow
def test_the_pages_requests_are_answered_as_the_server_answers_them(browser_release) -> None:
    """The static folder's POST handler: the server's statuses for bad queries, its default
    n-best and alignments only when asked for."""
    long = " ".join(["Mann"] * 1100)  # over the export's max_source_len of 1,000 subwords
    bodies = {
        "not JSON": 400,
        '{"sentences": [1]}': 422,
        '{"sentences": []}': 422,
        '{"sentences": ["Ein Mann."], "beam_size": 2, "nbest": 3}': 422,
        '{"sentences": ["Ein Mann."], "beam": 2}': 422,
        '{"sentences": ["Ein Mann."], "alignment": "yes"}': 422,
        json.dumps({"sentences": [long]}): 413,
        '["Ein Mann."]': 200,
        '{"sentences": ["Ein Mann."], "beam_size": 5, "nbest": 2, "alignment": true}': 200,
    }
    with static_site(browser_release / "browser") as url, headless_browser() as browser:
        browser.set_script_timeout(300)
        browser.get(url + "/")
        found = browser.execute_async_script(ANSWER, list(bodies))
    assert "error" not in found, found
    assert [status for status, _ in found] == list(bodies.values()), found
    assert all(set(answer) == {"error"} for status, answer in found if status != 200)
    tokenizer = spm.SentencePieceProcessor(model_file=str(browser_release / SRC_TOKENIZER))
    pieces = len(tokenizer.encode(long))  # the server's words for it
    said = f"sentence 0 has {pieces:,} subwords; at most 1,000 are translated (max_source_len=...)"
    assert found[6][1]["error"] == said
    assert found[4][1]["error"] == f"unknown fields: beam; the fields are {KNOWN}"  # the server's
    [plain] = found[7][1]["translations"]
    assert set(plain) == {"translation"}  # the export's nbest of 1, no alignment unasked
    [asked] = found[8][1]["translations"]
    assert len(asked["nbest"]) == 2 and asked["alignment"]["weights"]


@pytest.mark.slow
def test_the_exported_page_completes_a_prefix_as_it_is_typed(browser_release: Path) -> None:
    """The release's static page, no server: typing the translation's start in the prefix box
    gives lite's completion of it, with its latency."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from seq2seq_lite.steering import LineSteering

    with static_site(browser_release / "browser") as url, headless_browser() as browser:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda b: "ready" in b.find_element(By.TAG_NAME, "body").get_attribute("class"))
        browser.find_element(By.ID, "source").send_keys(SENTENCES[1])
        browser.find_element(By.ID, "prefix").send_keys("Two big")
        wait.until(lambda b: '"Two big" in' in b.find_element(By.ID, "latency").text)
        lite = LiteTranslator.load(browser_release, nbest=3)
        [expected] = lite.translate(SENTENCES[1:2], [LineSteering("Two big")])
        assert browser.find_element(By.ID, "translation").text == expected.texts[0]
        assert expected.texts[0].startswith("Two big")


def test_browser_without_onnx_or_npm_is_refused_in_one_line(smoke_run, tmp_path) -> None:
    for overrides, env, says in (
        (["browser=true"], os.environ, "add onnx=true"),
        (["onnx=true", "browser=true"], {**os.environ, "PATH": str(tmp_path)}, "npm was not found"),
    ):
        proc = command(
            "export", f"run_dir={smoke_run}", f"out={tmp_path / 'r'}", *overrides, env=env
        )
        assert proc.returncode == 1 and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "r").exists()  # refused before anything is written


# search.js over stand-in graphs whose EOS is the most probable token at every step
FIRST_STEP = """
import { greedy, beam } from "%s";
const ids = { pad: 0, bos: 2, eos: 3 };
const step = async (prev) => {
  const word = (i) => (i %% 6 === 3 ? -0.1 : -3 - (i %% 6) / 10);
  const logProbs = new Float32Array(prev.length * 6).map((_, i) => word(i));
  return { logProbs, weights: new Float32Array(prev.length * 2).fill(0.5), state: null };
};
const encode = async () => ({ memory: null, state: null });
const graphs = { ids, heads: 1, encode, step, rows: (x) => x };
const cfg = { max_len_a: 1, max_len_b: 5, alpha: 0.6, beam_size: 3, nbest: 3 };
const out = {
  greedy: (await greedy(graphs, [4, 5, 3], cfg))[0].tokens,
  beam: (await beam(graphs, [4, 5, 3], cfg)).map((h) => h.tokens),
  limit0: (await beam(graphs, [4, 5, 3], { ...cfg, max_len_a: 0, max_len_b: 0 })).map(
    (h) => h.tokens,
  ),
};
console.log(JSON.stringify(out));
"""


def test_the_browser_search_ends_no_translation_at_the_first_step() -> None:
    """EOS cannot end a hypothesis at step 0 unless the length limit is 0, as in lite's search."""
    found = browser_search(FIRST_STEP)
    assert found["greedy"] == [1]  # the best word but EOS, then EOS
    assert len(found["beam"]) == 3 and all(len(tokens) == 1 for tokens in found["beam"])
    assert found["limit0"] == [[]]  # at a limit of 0 only EOS is left: the empty translation
