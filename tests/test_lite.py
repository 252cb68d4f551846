"""The torch-free translator in lite/: a release exported with onnx=true translates on a pipe as
seq2seq-translate does, in a process where torch cannot be imported; its distribution never
installs torch; a release it cannot use is refused in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from run_helpers import command, first_answer, interrupted, piping
from seq2seq_lite.release import GRAPHS
from serve_helpers import SENTENCES, cli_translations, export

REPO = Path(__file__).resolve().parents[1]
LITE = REPO / "lite"
# seq2seq-lite's entry point in a process whose "import torch" fails
WITHOUT_TORCH = "import sys; sys.modules['torch'] = None; from seq2seq_lite.cli import main; main()"


def lite(*args: str, text: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(LITE)}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, *map(str, args)],
        input=text,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow
def test_the_release_lists_its_graphs(onnx_release: Path) -> None:
    manifest = json.loads((onnx_release / "manifest.json").read_text())
    graphs = {
        "onnx/encoder.onnx",
        "onnx/step.onnx",
        "onnx/encoder.int8.onnx",
        "onnx/step.int8.onnx",
    }
    assert graphs | {"onnx/graphs.json"} <= set(manifest)
    assert (onnx_release / GRAPHS).is_file()  # lite reads what the export writes
    assert set(json.loads((onnx_release / "release.json").read_text())["onnx"]) >= graphs
    assert "## ONNX" in (onnx_release / "README.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 5])
def test_lite_translates_as_the_torch_command_does_without_torch(onnx_release, beam) -> None:
    lines = [*SENTENCES, "", "Ein Mann fährt Fahrrad."]
    proc = lite(onnx_release, "--beam", beam, text="".join(s + "\n" for s in lines))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == cli_translations(onnx_release, lines, f"beam_size={beam}")


@pytest.mark.slow
def test_lite_steers_as_the_torch_command_does(onnx_release: Path, tmp_path: Path) -> None:
    """--prefix, --constraints and --terms: the outputs of translate's prefix=, constraints=,
    terms= with the same files; a file of another line count is one line, exit 1."""
    files = {
        "prefix": "A\n\n",
        "constraints": "grass\n\tsmiling\n",
        "terms": "Männer\tguys\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    lines = SENTENCES[:2]
    proc = lite(
        onnx_release,
        "--beam",
        3,
        *[a for name in files for a in (f"--{name}", tmp_path / name)],
        text="".join(s + "\n" for s in lines),
    )
    assert proc.returncode == 0, proc.stderr
    given = [f"{name}={tmp_path / name}" for name in files]
    assert proc.stdout.splitlines() == cli_translations(onnx_release, lines, "beam_size=3", *given)
    proc = lite(onnx_release, "--prefix", tmp_path / "prefix", text="Ein Hund.\n")
    said = f"--prefix {tmp_path / 'prefix'} has 2 lines, standard input has 1: give one line"
    assert proc.returncode == 1 and said in proc.stderr


@pytest.mark.slow
def test_lite_nbest_lines_and_int8(onnx_release: Path) -> None:
    text = "".join(s + "\n" for s in SENTENCES)
    proc = lite(onnx_release, "--beam", 4, "--nbest", 3, text=text)
    assert proc.returncode == 0, proc.stderr
    expected = cli_translations(onnx_release, SENTENCES, "beam_size=4", "nbest=3")
    for got, want in zip(proc.stdout.splitlines(), expected, strict=True):
        got_c, want_c = got.split(" ||| "), want.split(" ||| ")
        assert [c.split("\t")[1] for c in got_c] == [c.split("\t")[1] for c in want_c]
        for g, w in zip(got_c, want_c, strict=True):
            assert abs(float(g.split("\t")[0]) - float(w.split("\t")[0])) <= 2e-4
    proc = lite(onnx_release, "--int8", "--threads", 1000, text=text)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == len(SENTENCES)
    cores = os.cpu_count()  # more threads than cores only wait for each other
    assert f"--threads 1000 is more than this machine's {cores} cores: using {cores}" in proc.stderr


@pytest.mark.slow
def test_lite_refuses_what_it_cannot_use_in_one_line(onnx_release, smoke_run, tmp_path) -> None:
    plain = export(smoke_run, tmp_path / "plain")  # no onnx=true
    proc = lite(plain, text="Ein Hund.\n")
    assert proc.returncode == 1 and "onnx=true" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    for option, value in (("--max-len-a", -1), ("--alpha", -1), ("--threads", -2)):
        proc = lite(onnx_release, option, value, text="Ein Hund.\n")  # as evaluate refuses
        assert proc.returncode == 1 and proc.stdout == "", option
        assert "must not be negative" in proc.stderr and "Traceback" not in proc.stderr
    proc = lite(onnx_release, "--max-source-len", 3, text="Ein Hund läuft über die Wiese.\n")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("seq2seq-lite: standard input, line 1 has ")
    damaged = tmp_path / "damaged"
    subprocess.run(["cp", "-r", str(onnx_release), str(damaged)], check=True)
    with open(damaged / "onnx" / "step.onnx", "ab") as f:
        f.write(b"\0")
    proc = lite(damaged, text="Ein Hund.\n")
    assert proc.returncode == 1 and "damaged: onnx/step.onnx" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_lite_refuses_more_settings_in_one_line(onnx_release: Path, tmp_path: Path) -> None:
    """A beam the vocabulary cannot fill, numbers that are not finite, a glossary at beam 1, a
    folder that is not there, no onnxruntime: one line each, exit 1, no traceback."""
    glossary = tmp_path / "g.tsv"
    glossary.write_text("Hund\tdog\n")
    for args, said in (
        (("--beam", 1000), "--beam 1000 is more than a target vocabulary of 500 subwords allows"),
        (("--alpha", "nan"), "--alpha nan must be a finite number"),
        (("--max-len-a", "inf"), "--max-len-a inf must be a finite number"),
        (("--beam", 1, "--terms", glossary), f"the glossary's terms (--terms {glossary}) need"),
    ):
        proc = lite(onnx_release, *args, text="Ein Hund.\n")
        assert proc.returncode == 1 and proc.stdout == "", args
        assert proc.stderr.startswith("seq2seq-lite: ") and said in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = lite(tmp_path / "nope", text="Ein Hund.\n")
    assert proc.stderr == f"seq2seq-lite: {tmp_path / 'nope'} does not exist\n"
    no_ort = WITHOUT_TORCH.replace("; from", "; sys.modules['onnxruntime'] = None; from")
    proc = subprocess.run(
        [sys.executable, "-c", no_ort, str(onnx_release)],
        input="Ein Hund.\n",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(LITE)},
    )
    assert proc.returncode == 1 and "pip install onnxruntime" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.slow
def test_lite_translate_takes_a_list_of_lines_not_a_str(onnx_release: Path) -> None:
    from seq2seq_lite import Translator

    with pytest.raises(TypeError, match="not a str"):
        Translator.load(onnx_release).translate("Ein Hund")  # type: ignore[arg-type]


def _requirements(name: str, seen: set[str]) -> set[str]:
    """``name`` and every distribution it requires, as installed here (extras left out)."""
    key = name.lower().replace("_", "-")
    if key in seen:
        return seen
    seen.add(key)
    for requirement in metadata.requires(name) or []:
        if "extra ==" in requirement:
            continue
        dependency = requirement.split(";")[0].split("[")[0]
        for mark in "<>=!~ (":
            dependency = dependency.split(mark)[0]
        _requirements(dependency.strip(), seen)
    return seen


def test_installing_lite_never_installs_torch() -> None:
    listed = re.search(r"^dependencies = \[(.*)\]$", (LITE / "pyproject.toml").read_text(), re.M)
    names = [re.split(r"[<>=!~ ]", d)[0] for d in re.findall(r'"([^"]+)"', listed.group(1))]
    assert set(names) == {"numpy", "onnxruntime", "sentencepiece"}
    closure: set[str] = set()
    for name in names:
        _requirements(name, closure)
    assert "torch" not in closure and "numpy" in closure


def test_lite_refuses_invalid_utf8_as_seq2seq_translate_does(onnx_release: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, str(onnx_release)],
        input="Ein Hund.\nZwei Männer.\n".encode() + b"\xff kaputt\n",
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(LITE)},
    )
    assert proc.returncode == 1 and len(proc.stdout.decode().splitlines()) == 2  # the lines before
    expected = "seq2seq-lite: standard input, line 3: invalid UTF-8 (invalid start byte)"
    assert proc.stderr.decode().splitlines() == [expected]


def test_lite_answers_each_line_as_it_arrives(onnx_release: Path) -> None:
    """A line written into the pipe is translated before the input ends (as seq2seq-translate
    answers a pipe), and a line too long after it is refused by its number in the input."""
    proc = piping(
        [sys.executable, "-c", WITHOUT_TORCH, str(onnx_release), "--max-source-len", "20"],
        env={**os.environ, "PYTHONPATH": str(LITE), "PYTHONUNBUFFERED": ""},  # it must flush
    )
    try:
        first = first_answer(proc, SENTENCES[0], 60)
        rest, err = proc.communicate(f"{' '.join(['Hund'] * 30)}\n".encode(), timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1 and first.strip() and rest == b""
    assert err.decode().startswith("seq2seq-lite: standard input, line 2 has "), err


def test_ctrl_c_ends_lite_in_one_line(onnx_release: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(LITE)}
    args = [sys.executable, "-c", WITHOUT_TORCH, str(onnx_release)]
    status, answer, said = interrupted(args, SENTENCES[0], env)
    assert status == 130 and answer.strip()  # the line answered before stays written
    assert said == "seq2seq-lite: interrupted\n"


@pytest.mark.slow
def test_an_onnx_export_says_a_few_lines(smoke_run: Path, tmp_path: Path) -> None:
    """What it writes and where, not its libraries' chatter (it printed 98 lines)."""
    proc = command("export", f"run_dir={smoke_run}", f"out={tmp_path / 'r'}", "onnx=true")
    assert proc.returncode == 0, proc.stderr
    said = (proc.stdout + proc.stderr).splitlines()
    assert len(said) <= 4, said
    assert proc.stdout == f"{tmp_path / 'r'}\n"  # the release folder, for scripts


def test_lite_help_is_plain_text_with_an_example() -> None:
    proc = lite("--help", text="")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: seq2seq-lite") and "Example: seq2seq-lite " in proc.stdout
    assert not re.search(r"``|\*\*|\[--beam K\]", proc.stdout)  # no reStructuredText markup


def test_the_first_step_cannot_end_a_translation_unless_at_the_limit() -> None:
    import numpy as np
    from seq2seq_lite.search import NEG_INF, restrict

    ids = {"pad": 0, "bos": 2, "eos": 3}
    log_probs = restrict(np.zeros((2, 6), dtype=np.float32), np.array([False, True]), ids, True)
    assert log_probs[0, 3] == NEG_INF and log_probs[0, 4] == 0.0  # EOS banned, words allowed
    assert log_probs[1, 3] == 0.0 and (np.delete(log_probs[1], 3) == NEG_INF).all()  # limit 0
    later = restrict(np.zeros((1, 6), dtype=np.float32), np.array([False]), ids, False)
    assert later[0, 3] == 0.0


@pytest.mark.slow
def test_lite_refuses_an_empty_glossary_at_beam_1_as_translate_does(onnx_release, tmp_path) -> None:
    """Report #10: --terms given at --beam 1 is refused, entries or not (translate and serve
    refuse terms= so), and a glossary with no entries is warned of."""
    empty = tmp_path / "g.tsv"
    empty.write_text("# nothing yet\n")
    proc = lite(onnx_release, "--beam", 1, "--terms", empty, text="Ein Hund.\n")
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines() == [
        f"seq2seq-lite: {empty} has no entries (blank or '#' lines only): it changes nothing",
        f"seq2seq-lite: the glossary's terms (--terms {empty}) need beam search: beam_size of 2 "
        "or more, no sampling",
    ]


def test_lite_messages_name_its_flags_and_a_missing_file_in_one_line(tmp_path: Path) -> None:
    """Report #17: a setting's key alone is said as its flag, and a --terms, --prefix or
    --constraints file that cannot be read is one line naming the flag and the file."""
    from argparse import Namespace

    from seq2seq_lite import ReleaseError
    from seq2seq_lite.cli import _as_flags, _steering

    assert _as_flags("no_repeat_ngram must not be negative, not -1") == (
        "--no-repeat-ngram must not be negative, not -1"
    )
    assert _as_flags("beam_size must be at least 1, not 0") == "--beam must be at least 1, not 0"
    assert _as_flags("batch_size must be at least 1") == "--batch-size must be at least 1"
    assert _as_flags("nbest=3 needs more: add beam_size=3") == "--nbest 3 needs more: add --beam 3"
    missing, folder = tmp_path / "nope.tsv", tmp_path
    for path, said in ((missing, "does not exist"), (folder, "is a folder, not a file")):
        args = Namespace(prefix=None, constraints=None, terms=str(path))
        with pytest.raises(ReleaseError) as e:
            _steering(args)
        assert str(e.value) == f"--terms {path} {said}"
