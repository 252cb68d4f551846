"""seq2seq-serve under an overload of clients that never back off (issue 52): a full queue
refuses a request before its sentences are tokenized, so that a flood of refusals leaves the
event loop free, and every request is answered 200 or 503, none lost."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from serve_helpers import SENTENCES, asgi_call, metrics, sample, server
from starlette.types import ASGIApp

from seq2seq.serving.app import create_app
from seq2seq.serving.models import ServedModel
from seq2seq.serving.settings import ServeConfig

REPO = Path(__file__).resolve().parents[1]
LONG = "long"  # the stand-in tokenizer makes this sentence 2,000 subwords


class CountingTokenizer:
    """Counts the batches it encodes and the threads each asked for."""

    def __init__(self) -> None:
        self.threads: list[int | None] = []

    def encode_batch(self, texts: list[str], threads: int | None = None) -> list[list[int]]:
        self.threads.append(threads)
        return [[5] * (2000 if text == LONG else len(text.split())) for text in texts]


def overload_app(tokenizer: CountingTokenizer) -> ASGIApp:
    """The app of one stand-in model, its settings a DictConfig as the command gives them; no
    lifespan runs, so nothing is decoded and an admitted request waits for its deadline."""
    cfg = OmegaConf.structured(
        ServeConfig(run_dir="unused", max_queue_sentences=64, request_timeout_s=1.0)
    )
    model = ServedModel("m", {"name": "m"}, tokenizer, "cpu", lambda search: None, 500)  # type: ignore[arg-type]
    return create_app([model], cfg, ThreadPoolExecutor(1))


def test_a_full_queue_refuses_a_request_before_tokenizing_it() -> None:
    async def scenario() -> None:
        tokenizer = CountingTokenizer()
        app = overload_app(tokenizer)
        first = asyncio.create_task(asgi_call(app, "POST", "/translate", ["ein Hund"] * 64))
        while (await asgi_call(app, "GET", "/ready"))[0] != 503:  # the first fills the queue
            await asyncio.sleep(0.01)
        assert tokenizer.threads == [1]  # the admitted request was checked, on one thread
        for refused in (SENTENCES[:1], [LONG]):
            status, headers, body = await asgi_call(app, "POST", "/translate", refused)
            assert status == 503 and "busy" in body["error"]
            assert int(headers["retry-after"]) >= 1
        assert tokenizer.threads == [1]  # neither refusal was tokenized
        status, _, body = await first
        assert status == 503 and "request_timeout_s=1" in body["error"]  # never decoded
        status, _, body = await asgi_call(app, "POST", "/translate", ["ein Hund", LONG])
        assert status == 413 and "sentence 1" in body["error"]  # room again: checked as before

    asyncio.run(scenario())


@pytest.mark.slow
def test_clients_that_never_back_off_are_each_answered_200_or_503(
    smoke_run: Path, tmp_path: Path
) -> None:
    """Issue 52's overload, smaller: 12 clients of 64 sentences at beam 10 against a queue of
    128, sending again at once after each 503, through scripts/serve_bench.py."""
    source = tmp_path / "source.de"
    source.write_text("\n".join(SENTENCES * 16) + "\n", encoding="utf-8")
    report = tmp_path / "bench.json"
    short = ("max_len_a=0", "max_len_b=8", "max_queue_sentences=128")  # quick batches
    with server(smoke_run, *short) as (url, _):
        bench = subprocess.run(
            [
                sys.executable,
                str(REPO / "scripts" / "serve_bench.py"),
                url,
                *("--input", str(source), "--clients", "12", "--per-request", "64"),
                *("--beam-size", "10", "--beam-share", "1", "--seconds", "4"),
                *("--overload-seconds", "0", "--no-backoff", "--timeout", "120"),
                *("--json-out", str(report)),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert bench.returncode == 0, bench.stderr
        seen = metrics(url)
    phase = json.loads(report.read_text())["phases"][0]
    assert phase["lost"] == 0 and phase["other_status"] == 0, phase["first_errors"]
    assert phase["answered_200"] >= 1 and phase["answered_503"] >= 1, phase
    assert phase["answered_200"] + phase["answered_503"] == phase["requests"]
    assert phase["health_probes"] >= 1 and phase["health_failures"] == 0, phase
    counted = {
        s: sample(seen, "seq2seq_requests_total", route="/translate", status=s)
        for s in ("200", "503")
    }
    assert counted == {"200": phase["answered_200"], "503": phase["answered_503"]}
