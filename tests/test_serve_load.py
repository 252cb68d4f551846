"""seq2seq-serve under load, through real processes: a full queue answers 503 with Retry-After,
a passed deadline 503 without decoding, a client that hangs up is dropped from the queue, and
/ready, /metrics and the access log say what happened."""

from __future__ import annotations

import concurrent.futures
import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from run_helpers import cli
from serve_helpers import SENTENCES, call, metrics, post, sample, server

# A batch waits this long for company, so that a request stays in the queue while a test acts.
HOLD = ("batch_wait_ms=1500", "batch_sentences=64")


@pytest.mark.slow
def test_a_full_queue_answers_503_and_ready_says_busy(smoke_run: Path) -> None:
    with server(smoke_run, *HOLD, "max_sentences=2", "max_queue_sentences=2") as (url, proc):
        assert call(f"{url}/ready") == (200, {"status": "ready", "queued": 0})
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(post, url, SENTENCES[:2])
            time.sleep(0.5)  # the first request now fills the queue
            request = urllib.request.Request(
                f"{url}/translate",
                json.dumps(SENTENCES[2:3]).encode(),
                {"Content-Type": "application/json"},
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 503
            assert int(refused.value.headers["Retry-After"]) >= 1
            assert "busy" in json.loads(refused.value.read())["error"]
            assert call(f"{url}/ready")[0] == 503
            assert call(f"{url}/health") == (200, {"status": "ok"})
            status, body = first.result()
        assert status == 200 and len(body["translations"]) == 2
        assert call(f"{url}/ready")[0] == 200
        seen = metrics(url)
        assert sample(seen, "seq2seq_requests_total", route="/translate", status="503") == 1
        assert sample(seen, "seq2seq_requests_total", route="/translate", status="200") == 1
        assert sample(seen, "seq2seq_sentences_decoded_total") == 2
        assert sample(seen, "seq2seq_queue_sentences") == 0
    log = proc.log()
    assert re.search(r"POST /translate 503 1 sentence [\d.]+ ms", log), log
    assert re.search(r"POST /translate 200 2 sentences [\d.]+ ms", log), log


@pytest.mark.slow
def test_a_request_past_its_deadline_is_answered_503_and_never_decoded(smoke_run: Path) -> None:
    with server(smoke_run, *HOLD, "request_timeout_s=0.3") as (url, _):
        start = time.monotonic()
        status, body = post(url, SENTENCES)
        waited = time.monotonic() - start
        assert status == 503 and "request_timeout_s=0.3" in body["error"]
        assert waited < 1.4  # answered at its deadline, not when the batch would have started
        time.sleep(1.5)  # past the batch's wait: nothing is left to decode
        seen = metrics(url)
        assert sample(seen, "seq2seq_sentences_decoded_total") == 0
        assert sample(seen, "seq2seq_dropped_sentences_total", reason="deadline") == 4
        assert post(url, SENTENCES[:1])[0] == 503  # the same deadline again: a consistent rule


@pytest.mark.slow
def test_a_client_that_hangs_up_is_dropped_from_the_queue(smoke_run: Path) -> None:
    with server(smoke_run, *HOLD) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(SENTENCES[:3]).encode()
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(
                b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            time.sleep(0.4)  # admitted, waiting for company
        time.sleep(2.0)  # past the batch's wait
        seen = metrics(url)
        assert sample(seen, "seq2seq_dropped_sentences_total", reason="disconnected") == 3
        assert sample(seen, "seq2seq_sentences_decoded_total") == 0
        assert post(url, SENTENCES[:1])[0] == 200  # and the server goes on


@pytest.mark.slow
def test_metrics_count_requests_batches_and_describe_the_model(smoke_run: Path) -> None:
    with server(smoke_run, "batch_wait_ms=50") as (url, _):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda s: post(url, [s]), SENTENCES))
        assert all(status == 200 for status, _ in answers)
        call(f"{url}/health")
        seen = metrics(url)
    assert sample(seen, "seq2seq_requests_total", route="/translate", status="200") == 4
    assert sample(seen, "seq2seq_requests_total", route="/health", status="200") >= 2
    assert sample(seen, "seq2seq_sentences_decoded_total") == 4
    batches = sample(seen, "seq2seq_batches_decoded_total")
    assert 1 <= batches <= 4
    assert sample(seen, "seq2seq_batch_sentences_count") == batches
    assert sample(seen, "seq2seq_batch_sentences_sum") == 4
    assert sample(seen, "seq2seq_request_seconds_count", route="/translate") == 4
    assert sample(seen, "seq2seq_queue_seconds_count") == 4
    assert sample(seen, "seq2seq_model_info", src_lang="de", tgt_lang="en", precision="fp32") == 1
    assert sample(seen, "process_resident_memory_bytes") > 10e6


@pytest.mark.slow
def test_limits_that_cannot_work_are_refused_at_start(smoke_run: Path) -> None:
    proc = subprocess.run(
        [
            *cli("serve"),
            f"run_dir={smoke_run}",
            "max_queue_sentences=8",
            "max_sentences=64",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "max_queue_sentences=8 is below max_sentences=64" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_prometheus_client_metrics_count_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from seq2seq.serving import metrics as module

    monkeypatch.setattr(module, "CollectorRegistry", None)
    unmeasured = module.Metrics()
    assert not unmeasured.available
    unmeasured.request("/translate", 200, 0.1)
    unmeasured.decoded(3, "run")
    unmeasured.dropped.labels("deadline").inc(2)
    unmeasured.describe_model("run", {"src_lang": "de"})
