"""What the end-to-end tests share: running a command as a user would, with a time limit; what
its run folder's TensorBoard events hold; a real TensorBoard server over a folder; the sacrebleu
command line's scores."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from tensorboard.backend.event_processing.event_accumulator import (
    STORE_EVERYTHING_SIZE_GUIDANCE,
    EventAccumulator,
)

from seq2seq.storage.rundir import TENSORBOARD_DIR

# A guard against a hung run: a smoke run takes 1-2 minutes on two idle cores, but several
# times that on a machine shared with other jobs.
TRAIN_TIMEOUT = 1200


def sacrebleu_cli(reference: str | Path, hypotheses: str | Path, *options: str) -> str:
    """What the sacrebleu command line prints for a hypotheses file with ``-b`` (the scores
    alone) and ``options``."""
    cmd = [sys.executable, "-m", "sacrebleu", str(reference), "-i", str(hypotheses), "-b"]
    proc = subprocess.run([*cmd, *options], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def finish(proc: subprocess.Popen, timeout: float) -> str:
    """The output of `proc` once it exits; killed (and the test failed) if it takes too long."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"{proc.args} did not finish in {timeout} s; its output:\n{out}")
    return out


def as_on_a_terminal() -> None:
    """Ctrl-C interrupts, as in a user's shell, even when the tests run as a background job
    (which starts with SIGINT ignored, and Python keeps an ignored SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def piping(args: list[str], env: dict | None = None) -> subprocess.Popen:
    """A command started with pipes on its three streams (bytes), Ctrl-C interrupting it."""
    return subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=as_on_a_terminal,
    )


def first_answer(proc: subprocess.Popen, line: str, seconds: float = 120) -> str:
    """What ``proc`` writes for ``line``, written into its pipe, before the input ends."""
    proc.stdin.write(f"{line}\n".encode())
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    assert ready, "no answer to the first line before the input ended"
    return proc.stdout.readline().decode()


def interrupted(args: list[str], line: str, env: dict | None = None) -> tuple[int, str, str]:
    """A command reading a pipe, sent Ctrl-C (SIGINT) once it has answered ``line`` and waits
    for more: its exit status, the answer, what it said on stderr."""
    proc = piping(args, env)
    try:
        answer = first_answer(proc, line)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, answer, err.decode()


def events(run_dir: Path) -> EventAccumulator:
    """Everything TensorBoard's own reader finds in a run folder's events."""
    acc = EventAccumulator(str(run_dir / TENSORBOARD_DIR), STORE_EVERYTHING_SIZE_GUIDANCE)
    return acc.Reload()


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one scalar tag of a run folder."""
    return [(e.step, e.value) for e in events(run_dir).Scalars(tag)]


REPO = Path(__file__).resolve().parents[1]


def cli(command: str) -> list[str]:
    """The command line that starts ``seq2seq-<command>``: its installed script, as a user runs
    it (a ``python -m`` module would be imported again, torch and all, by each worker process
    of tokenizer training); the module where the scripts are not installed beside Python."""
    script = Path(sys.executable).with_name(f"seq2seq-{command}")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", f"seq2seq.commands.{command}"]


def run(module: str, *args: str) -> str:
    """The output of `seq2seq-<module> args` from the repository root; it must succeed."""
    proc = subprocess.Popen(
        [*cli(module), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    out = finish(proc, TRAIN_TIMEOUT)
    assert proc.returncode == 0, out
    return out


def command(
    module: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`seq2seq-<module> args`, its output captured, whether it succeeds or not."""
    return subprocess.run(
        [*cli(module), *args],
        capture_output=True,
        text=True,
        timeout=TRAIN_TIMEOUT,
        env=env,
    )


SMOKE_ARGS = ["experiment=smoke", "log.progress=false"]  # a training of seconds, no bar


def started(module: str, *args: str) -> subprocess.Popen:
    """`seq2seq-<module> args` started, stdout and stderr together in one pipe."""
    return subprocess.Popen(
        [*cli(module), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def outcome(module: str, *args: str, timeout: float = TRAIN_TIMEOUT) -> tuple[int, str]:
    """`seq2seq-<module> args` to its end: its exit code and its output, both streams."""
    proc = started(module, *args)
    out = finish(proc, timeout)
    return proc.returncode, out


def wait_for_file(path: Path, proc: subprocess.Popen) -> None:
    """Until ``proc`` has written something into ``path``; a failure if it ends first."""
    deadline = time.monotonic() + TRAIN_TIMEOUT
    while not path.exists() or not path.stat().st_size:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} never appeared:\n{proc.communicate()[0]}")
        time.sleep(0.05)


def assert_one_line_error(code: int, out: str, *expected: str) -> None:
    """A failure said in exactly one error line holding each of ``expected``, no traceback."""
    assert code != 0, out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if "ERROR" in line or "seq2seq-train:" in line]
    assert len(errors) == 1, out
    for text in expected:
        assert text in errors[0], out


def gz_lines(path: Path) -> list[str]:
    """The lines of a gzip-compressed text file (a written corpus)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def composed(*overrides: str):
    """The config the commands would get with these Hydra overrides (compose API)."""
    with initialize_config_module("seq2seq.configs", version_base=None):
        return compose("config", overrides=list(overrides))


SERVER_TIMEOUT = 40.0  # seconds for TensorBoard to start and load the runs


@contextlib.contextmanager
def tensorboard_server(logdir: Path, output: Path) -> Iterator[str]:
    """The real TensorBoard server over `logdir` on 127.0.0.1: its URL, and stopped afterwards;
    `output` receives the server's stderr."""
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
    with open(output, "wb") as stderr:
        server = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its own process group: the data server child goes too
        )
    try:
        deadline = time.monotonic() + SERVER_TIMEOUT
        url = None
        while url is None:
            text = output.read_text(errors="replace")
            found = [w for w in text.split() if w.startswith("http://127.0.0.1:")]
            url = found[0].rstrip("/") if found else None
            if url is None and (server.poll() is not None or time.monotonic() > deadline):
                pytest.fail(f"TensorBoard did not start; its output:\n{text}")
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy


def request(url: str, body: dict | None = None):
    """The JSON answer of a GET (or, with a body, a POST) to a local server."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    with _LOCAL.open(urllib.request.Request(url, data, headers), timeout=10) as response:
        return json.loads(response.read())


def poll(url: str, ready, body: dict | None = None):
    """`url`'s JSON once `ready(json)` holds; TensorBoard loads runs in the background."""
    deadline = time.monotonic() + SERVER_TIMEOUT
    while True:
        answer = request(url, body)
        if ready(answer):
            return answer
        if time.monotonic() > deadline:
            pytest.fail(f"{url} never became ready; last answer: {answer}")
        time.sleep(0.3)


def browser_search(script: str, *values: str) -> Any:
    """The JSON a node ``script`` prints, run on the exported search.js (its URI is the script's
    first ``%s``, ``values`` the others); skipped without node, a failure under CI=true."""
    if shutil.which("node") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is needed for the browser's search")
        pytest.skip("node is needed for the browser's search")
    search = resources.files("seq2seq").joinpath("static", "browser", "search.js")  # as exported
    proc = subprocess.run(
        ["node", "--input-type=module", "-e", script % (Path(str(search)).as_uri(), *values)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
