"""What the serving tests share: a seq2seq-serve process on a free port, JSON calls to it, the
command line's translations to compare with, releases, and a headless Chromium for the page."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from run_helpers import cli
from starlette.types import ASGIApp, Message

from seq2seq.serving.api import FIELDS

KNOWN = ", ".join(sorted(FIELDS))  # the request's fields, as a refusal names them
SENTENCES = [
    "Ein Hund läuft über die Wiese.",
    "Zwei Männer spielen Fußball.",
    "Eine Frau sitzt auf einer Bank.",
    "Kinder spielen im Sand am Strand.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict]:
    """(status, JSON) of a GET (no body) or POST."""
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post(url: str, payload: object, **headers: str) -> tuple[int, dict]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return call(f"{url}/translate", body, {"Content-Type": "application/json", **headers})


@contextlib.contextmanager
def server(run_dir: Path, *overrides: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """A server on a free port; its log (one access line per request) goes to a file, read
    back as ``proc.log()``: a pipe nobody reads would fill up and stall the server."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [
            *cli("serve"),
            f"run_dir={run_dir}",
            f"port={port}",
            *overrides,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    proc.log = lambda: Path(log.name).read_text(encoding="utf-8")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        with contextlib.suppress(OSError):
            if call(f"{url}/health")[0] == 200:
                break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"the server did not start:\n{proc.log()}")
        time.sleep(0.1)
    try:
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def cli_translations(run_dir: Path, lines: list[str], *overrides: str) -> list[str]:
    """What ``seq2seq-translate`` prints for ``lines``."""
    proc = subprocess.run(
        [*cli("translate"), f"run_dir={run_dir}", *overrides],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def export(run_dir: Path, out: Path, *overrides: str) -> Path:
    """``seq2seq-export`` of ``run_dir`` into ``out``: a release folder."""
    proc = subprocess.run(
        [
            *cli("export"),
            f"run_dir={run_dir}",
            f"out={out}",
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def chromium() -> tuple[str, str] | None:
    """(browser, driver) executables of the OS packages, if installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def _selenium() -> bool:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def headless_browser() -> Iterator[Any]:
    """A selenium driver of headless Chromium; skipped without one, except under CI=true."""
    found = chromium()
    if found is None or not _selenium():
        reason = "headless Chromium, chromedriver and selenium are needed (.ci/run installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(executable_path=found[1]), options=options)
    try:
        yield browser
    finally:
        browser.quit()


def metrics(url: str) -> dict[str, float]:
    """Every sample of /metrics, ``name{labels}`` -> value."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def sample(samples: dict[str, float], name: str, **labels: str) -> float:
    """The value of one series (0 when it has no sample yet)."""
    for key, value in samples.items():
        if key.split("{")[0] == name and all(f'{k}="{v}"' in key for k, v in labels.items()):
            return value
    return 0.0


async def asgi_call(
    app: ASGIApp, method: str, path: str, payload: Any = None, query: str = ""
) -> tuple[int, dict, Any]:
    """(status, headers, JSON) of one request (``path?query``) straight through the ASGI app,
    no server process; the client stays connected until its answer."""
    body = b"" if payload is None else json.dumps(payload).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "server": ("test", 80),
        "client": ("test", 1),
        "headers": [(b"content-length", str(len(body)).encode())],
    }
    sent: list[Message] = []
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # never hangs up
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    headers = {k.decode(): v.decode() for k, v in sent[0].get("headers", [])}
    return sent[0]["status"], headers, json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
