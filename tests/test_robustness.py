"""Nothing lost, nothing unsafe: one writer per run folder, damaged files detected, interrupted
writes, bad input and bad settings each answered with one clear line, logs that fit a file."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from run_helpers import TRAIN_TIMEOUT, cli, finish, interrupted

from seq2seq.commands.configs import ExportConfig
from seq2seq.config import DecodeConfig, LogConfig, TrainConfig
from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.inference import Translator
from seq2seq.errors import DataError, Seq2SeqError
from seq2seq.runtime.checkpoint import (
    CheckpointWriter,
    keep,
    kept_steps,
    load_checkpoint,
    save_checkpoint,
)
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import load_run
from seq2seq.storage.rundir import (
    KEPT_DIR,
    KEPT_INDEX,
    LOCK,
    MANIFEST,
    not_a_run,
    unused_run_folder,
)
from seq2seq.vocab import EOS

SMOKE = ["experiment=smoke", "log.progress=false"]


def start(command: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*cli(command), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run(command: str, *args: str, timeout: float = TRAIN_TIMEOUT) -> tuple[int, str]:
    proc = start(command, *args)
    out = finish(proc, timeout)
    return proc.returncode, out


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + TRAIN_TIMEOUT
    while not path.exists() or not path.stat().st_size:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} never appeared:\n{proc.communicate()[0]}")
        time.sleep(0.05)


def assert_one_line_error(code: int, out: str, *expected: str) -> None:
    assert code != 0, out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if "ERROR" in line or "seq2seq-train:" in line]
    assert len(errors) == 1, out
    for text in expected:
        assert text in errors[0], out


# -- one writer per run folder -------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_training_in_a_busy_folder_is_refused(tmp_path: Path, data_dirs) -> None:
    folder = tmp_path / "run"
    first = start("train", *SMOKE, "train.validate_every=10", f"hydra.run.dir={folder}", *data_dirs)
    wait_for(folder / LOCK, first)
    holder = json.loads((folder / LOCK).read_text())
    assert holder["pid"] == first.pid
    # both at once, while the first trains: a new start and a resume
    second = [
        start("train", *SMOKE, f"hydra.run.dir={folder}", *data_dirs, *extra)
        for extra in ([], ["train.resume=true"])
    ]
    for proc in second:
        out = finish(proc, TRAIN_TIMEOUT)
        assert_one_line_error(proc.returncode, out, "is in use", f"process {first.pid} on")
    wait_for(folder / "last.pt", first)  # training, past its first validation: then stopped
    first.send_signal(signal.SIGTERM)
    assert finish(first, TRAIN_TIMEOUT) and first.returncode == 128 + signal.SIGTERM
    assert (folder / LOCK).read_text() == ""  # released
    assert load_checkpoint(folder / "last.pt")["step"] > 0


@pytest.mark.slow
def test_a_lock_left_by_a_killed_training_is_taken_over(tmp_path: Path, data_dirs) -> None:
    folder = tmp_path / "run"
    # last.pt at the first validation (update 10); resumed, five updates more
    short = [*SMOKE, "train.validate_every=10", f"hydra.run.dir={folder}", *data_dirs]
    first = start("train", *short)
    wait_for(folder / "last.pt", first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert json.loads((folder / LOCK).read_text())["pid"] == first.pid  # left behind
    stopped = load_checkpoint(folder / "last.pt")["step"]
    code, out = run("train", *short, "train.resume=true", f"train.max_steps={stopped + 5}")
    assert code == 0, out
    assert f'"pid": {first.pid}' in out and "took over" in out


# -- damaged files -------------------------------------------------------------------------------


@pytest.mark.slow
def test_damaged_caches_are_rebuilt(tmp_path: Path, multi30k_url: str) -> None:
    cache = tmp_path / "cache"
    common = [*SMOKE, "train.max_steps=2", "data.train_limit=500", "data.valid_limit=10"]
    common += [f"data.source={multi30k_url}"]
    common += [f"data.root={tmp_path / 'multi30k'}", f"data.cache_dir={cache}"]
    code, out = run("train", *common, f"hydra.run.dir={tmp_path / 'a'}")
    assert code == 0, out
    ids = sorted((cache / "corpus").glob("*/src_ids.npy"))
    models = sorted((cache / "tokenizers").glob("*.model"))
    assert ids and models
    for path in (*ids, *models):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # truncated
    code, out = run("train", *common, f"hydra.run.dir={tmp_path / 'b'}")
    assert code == 0, out
    assert out.count("are damaged") == len(ids) and "encoding again" in out
    assert out.count("is damaged") == len(models) and "training it again" in out


@pytest.mark.parametrize("name", ["src.model", "config.yaml", "best.pt"])
def test_a_damaged_run_file_stops_translate_with_one_line(
    smoke_run: Path, tmp_path: Path, name: str
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("tensorboard", "eval"))
    path = folder / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3] + b"\xff junk")
    proc = subprocess.run(
        [*cli("translate"), f"run_dir={folder}"],
        input="Ein Hund.\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Traceback" not in proc.stderr
    [error] = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert name in error


def test_a_checkpoint_of_another_run_says_so(smoke_run: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("tensorboard", "eval"))
    state = load_checkpoint(folder / "best.pt")
    state["vocab"] = [8000, 7931]
    save_checkpoint(folder / "best.pt", state)
    with pytest.raises(Seq2SeqError, match="vocabularies of 8000/7931 pieces.*another run"):
        load_run(folder)


# -- interrupted and failed writes ---------------------------------------------------------------


def test_a_kill_between_write_and_rename_keeps_the_old_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1, "w": torch.zeros(4)})
    child = (
        "import os, signal, torch, sys\n"
        "from pathlib import Path\n"
        "from seq2seq.runtime.checkpoint import save_checkpoint\n"
        "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # dies before renaming\n"
        f"save_checkpoint(Path({str(path)!r}), {{'step': 2, 'w': torch.ones(4)}})\n"
    )
    proc = subprocess.run([sys.executable, "-c", child], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert load_checkpoint(path)["step"] == 1  # the old one, whole


def test_a_full_disk_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1})

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(Seq2SeqError, match="No space left on device; the previous last.pt is kept"):
        save_checkpoint(path, {"step": 2})
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1 and not list(tmp_path.glob("*.tmp"))


# -- bad corpora ---------------------------------------------------------------------------------


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_bom_crlf_and_control_characters_are_read(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", "\ufeffEin Hund.\r\nZwei\x07 Katzen.\r\n".encode())
    tgt = write(tmp_path / "a.en", b"A dog.\nTwo\x1b cats.\n")
    assert read_parallel(src, tgt) == (
        ["Ein Hund.", "Zwei\x07 Katzen."],
        ["A dog.", "Two\x1b cats."],
    )


@pytest.mark.parametrize(
    ("src", "tgt", "message"),
    [
        (b"", b"", "is empty"),
        (b"a\nb\n", b"a\n", "differ in length"),
        (b"a\n\xff\xfe\n", b"a\nb\n", "line 2: invalid UTF-8"),
    ],
)
def test_broken_corpora_are_refused(tmp_path: Path, src: bytes, tgt: bytes, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_parallel(write(tmp_path / "x.de", src), write(tmp_path / "x.en", tgt))


@pytest.mark.slow
def test_overlong_and_odd_training_lines_are_dropped_and_counted(
    tmp_path: Path, multi30k_dir: Path
) -> None:
    """A custom corpus with a BOM, CRLF ends, control characters and a 100,000-character line
    trains; the long pair is dropped and counted."""
    src, tgt = read_parallel(multi30k_dir / "train.de.gz", multi30k_dir / "train.en.gz", 400)
    src[5] = "Hund " * 20_000  # 100,000 characters
    src[7] += "\x07\x1b"
    (tmp_path / "train.de").write_bytes(("\ufeff" + "\r\n".join(src) + "\r\n").encode())
    (tmp_path / "train.en").write_text("\n".join(tgt) + "\n")
    for lang, lines in (("de", src[:20]), ("en", tgt[:20])):
        (tmp_path / f"val.{lang}").write_text("\n".join(lines) + "\n")
    code, out = run(
        "train",
        *SMOKE,
        "data=custom",
        f"data.train={tmp_path / 'train'}",
        f"data.valid={tmp_path / 'val'}",
        "train.max_steps=3",
        "data.max_len=400",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert code == 0, out
    assert "dropped 1 of 400 pairs (0 empty, 1 longer than max_len)" in out


# -- bad settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.hidden_size=-8"], "model.hidden_size=-8 must be positive"),
        (["model.dropout=1.5"], "model.dropout=1.5 must be at least 0 and below 1"),
        (["data.tgt_lang=de"], "data.src_lang and data.tgt_lang are both 'de'"),
        (["data.src_lang=xx"], "has no language 'xx'"),
        (["precision=fp16", "device=cpu"], "fp16 needs CUDA"),
        (["device=tpu"], "unknown device 'tpu'"),
        (["train.batch_tokens=0"], "train.batch_tokens=0 must be positive"),
        (["data.source=TMP/none", "data.root=TMP/root"], "data.source=TMP/none holds no train"),
    ],
)
def test_bad_settings_stop_before_any_work(tmp_path: Path, overrides: list[str], message: str):
    """One line, and no run folder left behind (nor a corpus folder made for nothing)."""
    folder = tmp_path / "run"
    overrides = [o.replace("TMP", str(tmp_path)) for o in overrides]
    code, out = run("train", *SMOKE, f"hydra.run.dir={folder}", *overrides, timeout=300)
    assert_one_line_error(code, out, message.replace("TMP", str(tmp_path)))
    assert list(tmp_path.iterdir()) == []  # nothing was started


def test_a_refused_start_removes_the_folders_it_made_and_keeps_the_others(tmp_path: Path):
    """The default runs/ made for a refused first start goes with its run folder; a folder that
    was there before stays, empty or not."""
    refused = [*cli("train"), *SMOKE, "train.batch_tokens=0"]
    proc = subprocess.run(refused, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "train.batch_tokens=0 must be positive" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no runs/ left
    kept = tmp_path / "kept"
    kept.mkdir()
    code, out = run("train", *SMOKE, f"hydra.run.dir={kept / 'new' / 'run'}", "train.lr=-1")
    assert_one_line_error(code, out, "train.lr=-1.0 must be positive")
    assert list(tmp_path.iterdir()) == [kept] and list(kept.iterdir()) == []


def test_a_folder_of_runs_given_as_a_run_names_the_newest_inside(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert not_a_run(runs, "run_dir=runs").endswith("folder: it does not exist")
    runs.mkdir()
    assert not_a_run(runs, "run_dir=runs") == (
        "run_dir=runs is not a training run or release folder (no config.yaml)"
    )
    for i, name in enumerate(["a", "multirun_b/0_x", "c"]):  # c the newest, a sweep's inside
        (runs / name).mkdir(parents=True)
        (runs / name / ".hydra").mkdir()  # Hydra's copy of the config: not a run
        for config in (runs / name / "config.yaml", runs / name / ".hydra" / "config.yaml"):
            config.write_text("{}\n")
        os.utime(runs / name / "config.yaml", (1e9 + i, 1e9 + i))
    said = not_a_run(runs, "run_dir=runs")
    assert said.endswith(f"; it holds 3 run(s), the newest {runs / 'c'}: give that folder")


def test_only_a_folder_a_training_never_used_is_removed_after_a_refusal(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    (folder / ".hydra").mkdir(parents=True)
    (folder / "train.log").write_text("[ERROR] - train.lr=-1.0 must be positive\n")
    assert unused_run_folder(folder)
    (folder / "config.yaml").write_text("x: 1\n")  # no lock: the user's, no start claimed it
    assert not unused_run_folder(folder)
    (folder / LOCK).write_text("")  # claimed: the config is the start's
    assert unused_run_folder(folder)
    (folder / "src.model").write_text("")  # a tokenizer: work done
    assert not unused_run_folder(folder)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.lrate=1"], "train.lrate: no such key; did you mean train.lr?"),
        (["train.batch_tokens=many"], "train.batch_tokens=many: expected an integer"),
    ],
)
def test_unknown_keys_and_wrong_types_are_one_line(tmp_path, overrides, message) -> None:
    code, out = run("train", *SMOKE, f"hydra.run.dir={tmp_path}", *overrides, timeout=300)
    assert_one_line_error(code, out, message)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing was started


# -- numerical trouble and logs ------------------------------------------------------------------


@pytest.mark.slow
def test_non_finite_updates_are_skipped_then_stop_the_run(tmp_path: Path, data_dirs) -> None:
    """A learning rate of 1e300 overflows fp32 in the first update: every later loss is inf."""
    code, out = run("train", *SMOKE, f"hydra.run.dir={tmp_path}", *data_dirs, "train.lr=1e300")
    assert code == 1, out
    assert out.count("non-finite loss; skipped") == 5
    assert_one_line_error(code, out, "5 updates in a row", "train.lr=1e+300")


@pytest.mark.slow
def test_logs_in_a_file_have_no_progress_bar_and_stdout_is_the_run_folder(
    tmp_path: Path, data_dirs
) -> None:
    """stderr is a pipe here, as under nohup or a cluster's job log: plain lines, no bars. The
    log goes to stderr and train.log; stdout holds the run folder alone, for scripts."""
    proc = subprocess.run(
        [
            *cli("train"),
            "experiment=smoke",
            "train.max_epochs=1",
            f"hydra.run.dir={tmp_path}",
            *data_dirs,
        ],
        capture_output=True,
        text=True,
        timeout=TRAIN_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{tmp_path}\n"
    assert "\r" not in proc.stderr and "\x1b[" not in proc.stderr
    assert "epoch 1, update 50/56 (step 50): loss" in proc.stderr
    # the whole run's ETA beside the epoch's, and the limit that ends the run
    eta = r", epoch ETA 0:00:\d\d, run ETA 0:00:\d\d \(train.max_epochs\)\n"
    assert re.search(eta, proc.stderr), proc.stderr
    logged = (tmp_path / "train.log").read_text().splitlines()
    assert logged and set(logged) <= set(proc.stderr.splitlines())


@pytest.mark.slow
def test_on_a_terminal_log_lines_print_above_the_progress_bar(tmp_path: Path, data_dirs) -> None:
    """A validation in the middle of an epoch logs while the bar shows: its line starts on a line
    of its own, not after the bar's text."""
    args = ["experiment=smoke", "train.max_steps=20", "train.validate_every=10", *data_dirs]
    child = pexpect.spawn(
        cli("train")[0],
        [*cli("train")[1:], f"hydra.run.dir={tmp_path}", *args],
        encoding="utf-8",
        timeout=TRAIN_TIMEOUT,
        dimensions=(24, 120),
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    lines = child.before.replace("\r\n", "\n").split("\n")  # a terminal ends lines in \r\n
    said = [line.split("\r")[-1] for line in lines if "valid loss" in line]
    assert len(said) == 2 and all(line.startswith("[20") for line in said), said
    assert "epoch 1:" in child.before  # the bar showed


# -- any text in, one line out -------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator(smoke_run: Path) -> Translator:
    return Translator.from_run(load_run(smoke_run), DecodeConfig(beam_size=2))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(max_size=60), min_size=1, max_size=6))
def test_any_unicode_gives_one_line_per_line(translator: Translator, lines: list[str]) -> None:
    lines = [line.replace("\n", " ") for line in lines]  # one input line each
    translations = translator.translate(lines)
    assert len(translations) == len(lines)
    for line, translation in zip(lines, translations, strict=True):
        text = translator.best_text(translation)
        assert "\n" not in text and "\r" not in text
        # blank in, blank out: blank is what the tokenizer keeps nothing of (ESC alone, say)
        kept = translator.src_tok.encode(line.strip())
        assert bool(translation.hypotheses) == bool(kept)


def test_control_characters_alone_are_a_blank_line(translator: Translator) -> None:
    blank, text = translator.translate(["\x1b\x07", "ein \x1bHund"])
    assert blank.hypotheses == [] and translator.best_text(blank) == ""
    assert text.hypotheses and text.source_ids[-1] == EOS


def test_ctrl_c_ends_a_command_in_one_line(smoke_run: Path) -> None:
    """seq2seq-translate on a pipe, interrupted after its first answer: exit 130, no traceback."""
    args = [*cli("translate"), f"run_dir={smoke_run}"]
    status, answer, said = interrupted(args, "Ein Hund läuft.")
    assert status == 130 and answer.strip()
    assert said.strip().splitlines()[-1].endswith("interrupted") and "Traceback" not in said


def test_an_interrupted_export_leaves_no_release(smoke_run: Path, tmp_path: Path, monkeypatch):
    """A release is whole or absent: Ctrl-C before its manifest leaves nothing (not a folder a
    rerun refuses as not empty and a server as without its manifest)."""
    from seq2seq.commands import export as export_command

    def stop(*args: object) -> None:
        raise KeyboardInterrupt

    out = tmp_path / "release"
    cfg = OmegaConf.structured(ExportConfig(run_dir=str(smoke_run), out=str(out)))
    monkeypatch.setattr(export_command, "write_manifest", stop)
    with pytest.raises(KeyboardInterrupt):
        export_command.export(cfg)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    out.mkdir()  # an empty folder of that name is taken
    export_command.export(cfg)
    assert (out / MANIFEST).is_file() and list(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("text", ["garbage{", "[1, 2]", '"10"', '{"10": "x"}'])
def test_a_damaged_index_of_kept_checkpoints_is_one_line(tmp_path: Path, text: str) -> None:
    """seq2seq-average names the damaged index; training starts a new one and goes on."""
    index = tmp_path / KEPT_DIR / KEPT_INDEX
    index.parent.mkdir()
    index.write_text(text)
    with pytest.raises(Seq2SeqError, match=f"{KEPT_INDEX} is damaged"):
        kept_steps(tmp_path)
    writer = CheckpointWriter()
    try:
        keep(writer, tmp_path, 5, 1.5, {"model": {"w": torch.zeros(1)}}, 2)
    finally:
        writer.close()
    assert kept_steps(tmp_path) == {5: 1.5}


def test_a_file_that_is_no_checkpoint_is_one_line_without_unsafe_advice(tmp_path: Path) -> None:
    text = tmp_path / "sentences.de"
    text.write_text("Ein Hund läuft.\n")
    with pytest.raises(Seq2SeqError, match="not a checkpoint this program wrote") as error:
        load_checkpoint(text)
    assert "\n" not in str(error.value) and "weights_only" not in str(error.value)


def test_a_validation_split_without_a_line_to_translate_is_refused_before_training() -> None:
    """All blank, or all over max_source_len: refused before any update (it ended the first
    epoch in a traceback, without a checkpoint)."""
    from types import SimpleNamespace

    from seq2seq.training.validation import check_validation_lines

    tok = SimpleNamespace(encode_batch=lambda lines: [line.split() for line in lines])
    search = DecodeConfig(max_source_len=3)
    cases = ((["", " "], "2 lines are blank;"), (["a b c d", ""], "2 lines are blank or over"))
    for lines, says in cases:
        with pytest.raises(DataError, match=f"no line to translate: its {says}"):
            check_validation_lines(SimpleNamespace(src_tok=tok, valid_src=lines), search)
    check_validation_lines(SimpleNamespace(src_tok=tok, valid_src=["", "a b"]), search)


def test_validation_blanks_lines_over_max_source_len_and_says_so_once(monkeypatch, caplog):
    """Every validation translates the same lines: those over max_source_len are found, blanked
    and reported at the first validation only."""
    from types import SimpleNamespace

    from seq2seq.training import validation

    tok = SimpleNamespace(encode_batch=lambda lines: [line.split() for line in lines])
    data = SimpleNamespace(src_tok=tok, valid_src=["a b c d", "a b", ""])
    given = []
    monkeypatch.setattr(
        validation, "validate", lambda model, data, sources, *rest: given.append(sources)
    )
    cfg = OmegaConf.create(
        {
            "train": TrainConfig(),
            "log": LogConfig(),
            "data": {"tgt_lang": "en", "bleu_tokenize": None},
        }
    )
    validator = validation.Validator(cfg, Engine.create("cpu"))
    validator.search.max_source_len = 3
    with caplog.at_level("WARNING", logger="seq2seq.train"):
        validator(None, data)
        validator(None, data)
    assert given == [["", "a b", ""]] * 2
    said = [r.getMessage() for r in caplog.records if "max_source_len" in r.getMessage()]
    assert said == ["1 validation lines have more than max_source_len=3 subwords: not translated"]


@pytest.mark.slow
def test_a_refused_resume_leaves_the_runs_config(tmp_path: Path, data_dirs) -> None:
    """A resume refused for another epoch plan (in the middle of an epoch) changes nothing in
    the folder: config.yaml still says what ran (it said the refused values)."""
    folder = tmp_path / "run"
    out = finish(
        start("train", *SMOKE, "train.max_steps=5", f"hydra.run.dir={folder}", *data_dirs),
        TRAIN_TIMEOUT,
    )
    assert (folder / "last.pt").is_file(), out
    before = (folder / "config.yaml").read_bytes()
    again = ["train.resume=true", "train.max_steps=10", "train.seed=7"]
    proc = start("train", *SMOKE, *again, f"hydra.run.dir={folder}", *data_dirs)
    out = finish(proc, TRAIN_TIMEOUT)
    assert proc.returncode == 1 and "train.seed 1234 (now 7)" in out, out
    assert (folder / "config.yaml").read_bytes() == before


def test_a_tokenizer_of_blank_lines_says_why_it_cannot_be_trained(tmp_path: Path) -> None:
    """sentencepiece's reason is its own code's condition: said in words (it was empty)."""
    from seq2seq.data.tokenizer import _train_one

    text = tmp_path / "blank.txt"
    text.write_text("\n\n\n\n")
    settings = {"model_type": "unigram", "vocab_size": 100}
    with pytest.raises(DataError, match="on 4 lines: no line with text \\(all are blank\\)$"):
        _train_one(text, 4, settings, "src")
