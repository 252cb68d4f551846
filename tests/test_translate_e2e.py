"""`seq2seq-translate` on a trained smoke run: piped lines in order, and the terminal prompt."""

from __future__ import annotations

import os
import select
import subprocess
from pathlib import Path

import numpy as np
import pexpect
import pytest
from run_helpers import as_on_a_terminal, cli

from seq2seq.decoding.alignment import alignment_view
from seq2seq.decoding.nbest import NBEST_SEPARATOR


def translate_cmd(run_dir: Path, *args: str) -> list[str]:
    return [*cli("translate"), f"run_dir={run_dir}", *args]


def pipe(run_dir: Path, data: bytes, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Translate `data` through a pipe, as `printf ... | seq2seq-translate run_dir=...` would."""
    return subprocess.run(
        translate_cmd(run_dir, *args), input=data, cwd=cwd, capture_output=True, timeout=300
    )


def test_piped_lines_keep_count_order_and_blank_lines(smoke_run: Path, tmp_path: Path) -> None:
    lines = [
        "Ein Hund läuft.".encode(),
        b"",
        b"   ",
        "Zwei Männer stehen vor einem Gebäude.".encode(),
        b"odd bytes, \xe6\x97\xa5\xe6\x9c\xac \xe2\x98\x83 \x07 unknown",
        ("Hund " * 150).encode(),  # more subwords than the model's data.max_len (100): read whole
        b"",
        b"Die letzte Zeile hat kein Zeilenende.",
    ]
    proc = pipe(smoke_run, b"\n".join(lines), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    for line, translation in zip(lines, out, strict=False):
        assert (translation == "") == (line.strip() == b""), (line, translation)
    assert b"subwords" not in proc.stderr  # no line refused, none cut
    assert not any(tmp_path.iterdir())


def test_piped_nbest_is_one_line_per_input(smoke_run: Path, tmp_path: Path) -> None:
    data = "Ein Hund läuft.\n\nZwei Männer.\n".encode()
    proc = pipe(smoke_run, data, "nbest=3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8").split("\n")[:-1]
    assert len(out) == 3 and out[1] == ""
    for line in (out[0], out[2]):
        candidates = [c.split("\t") for c in line.split(NBEST_SEPARATOR)]
        assert len(candidates) == 3 and all(len(c) == 2 and c[1] for c in candidates)
        scores = [float(score) for score, _ in candidates]
        assert scores == sorted(scores, reverse=True)


def test_pipe_is_answered_before_it_closes(smoke_run: Path, tmp_path: Path) -> None:
    """A line written into the pipe gets its translation while the writer keeps it open."""
    proc = subprocess.Popen(
        translate_cmd(smoke_run, "beam_size=1"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        for sentence in ("Ein Hund läuft.", "Zwei Männer."):
            proc.stdin.write(sentence.encode() + b"\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            assert ready, "no translation while the pipe is open"
            assert proc.stdout.readline().strip()
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read() == b""
    finally:
        proc.kill()
        proc.wait()


def spawn(run_dir: Path, home: Path, *args: str) -> pexpect.spawn:
    """The app on a pseudo-terminal 80 columns wide, with its history file in `home`."""
    cmd = translate_cmd(run_dir, *args)
    env = {**os.environ, "HOME": str(home), "TERM": "dumb"}
    return pexpect.spawn(
        cmd[0],
        cmd[1:],
        env=env,
        cwd=str(home),
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 80),
        preexec_fn=as_on_a_terminal,
    )


def test_prompt_translates_shows_alignment_and_quits(smoke_run: Path, tmp_path: Path) -> None:
    child = spawn(smoke_run, tmp_path, "show_alignment=true")
    child.expect_exact("de> ")
    child.sendline("Ein Hund läuft.")
    child.expect_exact("de> ")
    shown = child.before.replace("\r\n", "\n").split("\n")
    assert shown[0] == "Ein Hund läuft."  # the terminal's echo
    assert shown[1].strip(), "no translation"
    header = shown[2]
    assert header.split() == ["▁Ein", "▁Hund", "▁läuft", ".", "</s>"]
    assert any(shade in "".join(shown[3:]) for shade in "░▒▓█")
    assert "█ ≥0.7" in shown[-2]
    assert all(len(line) <= 80 for line in shown)
    child.sendline("")  # ignored: straight back to the prompt
    child.expect_exact("de> ")
    assert child.before.strip() == ""
    child.sendline(":help")  # a command it does not know: what it knows, nothing translated
    child.expect_exact("de> ")
    assert child.before.replace("\r\n", "\n").split("\n")[1] == (
        ":q or :quit leaves; any other line is translated"
    )
    child.sendline(":q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "Ein Hund läuft." in (tmp_path / ".seq2seq_history").read_text(encoding="utf-8")


@pytest.mark.parametrize("key", ["d", "c"], ids=["ctrl-d", "ctrl-c"])
def test_prompt_leaves_cleanly_on_ctrl_d_and_ctrl_c(
    smoke_run: Path, tmp_path: Path, key: str
) -> None:
    child = spawn(smoke_run, tmp_path)
    child.expect_exact("de> ")
    child.sendcontrol(key)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "Traceback" not in child.before


SOURCE_WORDS = "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche"
TARGET_WORDS = "Two young white males are outside near many bushes"


def test_alignment_view_fits_80_columns() -> None:
    rng = np.random.default_rng(0)
    words = {"de": SOURCE_WORDS.split(), "en": TARGET_WORDS.split()}
    source, target = ([f"▁{word}" for word in words[lang]] + ["."] for lang in ("de", "en"))
    for src, tgt in ((source, target), (source[:4], target[:4]), (source * 4, target)):
        src, tgt = [*src, "</s>"], [*tgt, "</s>"]
        weights = rng.dirichlet(np.ones(len(src)), size=len(tgt))
        view = alignment_view(src, tgt, weights, width=80).split("\n")
        assert all(len(line) <= 80 for line in view), view
        assert len(view) >= len(tgt)
