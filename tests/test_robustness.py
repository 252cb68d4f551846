"""Nothing lost, nothing unsafe: one writer per run folder, damaged files detected, interrupted
writes, non-finite updates, logs that fit a file, and a command stopped or refused mid-way."""

from __future__ import annotations

import contextlib
import errno
import io
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
from omegaconf import OmegaConf
from run_helpers import (
    SMOKE_ARGS,
    TRAIN_TIMEOUT,
    as_on_a_terminal,
    assert_one_line_error,
    cli,
    finish,
    interrupted,
    outcome,
    started,
)

from seq2seq.commands.configs import ExportConfig
from seq2seq.data.tokenizer import fingerprints
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime import checkpoint
from seq2seq.runtime.checkpoint import (
    CheckpointWriter,
    keep,
    kept_steps,
    load_checkpoint,
    save_checkpoint,
)
from seq2seq.runtime.run_folder import load_run
from seq2seq.storage.rundir import (
    KEPT_DIR,
    KEPT_INDEX,
    MANIFEST,
)

# -- damaged files --------------------------------------------------------------------------------


@pytest.mark.slow
def test_damaged_caches_are_rebuilt(tmp_path: Path, multi30k_url: str) -> None:
    cache = tmp_path / "cache"
    common = [*SMOKE_ARGS, "train.max_steps=2", "data.train_limit=500", "data.valid_limit=10"]
    common += [f"data.source={multi30k_url}"]
    common += [f"data.root={tmp_path / 'multi30k'}", f"data.cache_dir={cache}"]
    code, out = outcome("train", *common, f"hydra.run.dir={tmp_path / 'a'}")
    assert code == 0, out
    ids = sorted((cache / "corpus").glob("*/src_ids.npy"))
    models = sorted((cache / "tokenizers").glob("*.model"))
    assert ids and models
    for path in (*ids, *models):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # truncated
    code, out = outcome("train", *common, f"hydra.run.dir={tmp_path / 'b'}")
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


def test_a_checkpoint_of_other_tokenizers_of_the_same_sizes_is_refused(
    smoke_run: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("tensorboard", "eval"))
    state = load_checkpoint(folder / "best.pt")
    run = load_run(folder)
    assert state["tokenizers"] == fingerprints(run.src_tok, run.tgt_tok)
    state["tokenizers"] = ["0" * 64, "1" * 64]  # another run's, its vocabularies as large
    save_checkpoint(tmp_path / "other.pt", state)
    with pytest.raises(Seq2SeqError, match="other tokenizers than those in .*another run"):
        load_run(folder, str(tmp_path / "other.pt"))


def test_a_resume_refuses_the_last_pt_of_another_run(smoke_run: Path, tmp_path: Path) -> None:
    """Another run's last.pt copied in (other tokenizers) is refused, not trained on and
    stamped with this folder's tokenizers: the rule seq2seq-evaluate applies."""
    folder = tmp_path / "run"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("tensorboard", "eval"))
    state = load_checkpoint(folder / "last.pt")
    state["tokenizers"] = ["0" * 64, "1" * 64]  # another run's, its vocabularies as large
    save_checkpoint(folder / "last.pt", state)
    before = (folder / "last.pt").read_bytes()
    code, out = outcome("train", f"hydra.run.dir={folder}", "train.resume=true")
    assert_one_line_error(
        code, out, "last.pt was trained with other tokenizers", "train.resume=true needs the run's"
    )
    assert (folder / "last.pt").read_bytes() == before


@pytest.mark.parametrize(
    ("other", "said", "kept"),
    [
        (  # the run keeps its tokenizers: these would be recorded as if they had applied
            ["data.tokenizer.vocab_size=300", "data.tokenizer.model_type=bpe"],
            [
                "the tokenizer settings differ from last.pt's",
                "data.tokenizer.model_type unigram (now bpe)",
                "data.tokenizer.vocab_size 500 (now 300)",
            ],
            ("config.yaml", "overrides.yaml"),
        ),
        (  # de->en resumed as en->de: English read by the German tokenizer, best.pt overwritten
            ["data.src_lang=en", "data.tgt_lang=de"],
            [
                "train.resume=true, but the languages differ from last.pt's",
                "data.src_lang de (now en); data.tgt_lang en (now de)",
            ],
            ("config.yaml", "best.pt"),
        ),
    ],
)
def test_a_resume_refuses_what_the_run_cannot_take_and_records_nothing(
    smoke_run: Path, tmp_path: Path, other: list[str], said: list[str], kept: tuple[str, ...]
) -> None:
    """Settings the run's model and tokenizers cannot follow are refused in one line, before
    anything in the folder changes; the lock is let go."""
    folder = tmp_path / "run"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("tensorboard", "eval"))
    before = {name: (folder / name).read_bytes() for name in kept}
    code, out = outcome("train", f"hydra.run.dir={folder}", "train.resume=true", *other)
    assert_one_line_error(code, out, *said)
    assert {name: (folder / name).read_bytes() for name in before} == before
    assert (folder / "train.lock").read_text() == ""  # let go: the next start takes no "over"


# -- interrupted and failed writes ----------------------------------------------------------------


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


def test_a_full_disk_inside_torchs_zip_writer_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """torch.save re-raises the file's ENOSPC as a RuntimeError ("unexpected pos ...")."""
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1})

    class Full(io.FileIO):
        def write(self, data) -> int:
            if self.tell() > 1000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(data)

    monkeypatch.setattr(checkpoint, "open", lambda file, mode: Full(file, mode), raising=False)
    with pytest.raises(Seq2SeqError, match="No space left on device; the previous last.pt is kept"):
        save_checkpoint(path, {"step": 2, "w": torch.zeros(10_000)})
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1 and not list(tmp_path.glob("*.tmp"))


# -- numerical trouble and logs -------------------------------------------------------------------


@pytest.mark.slow
def test_non_finite_updates_are_skipped_then_stop_the_run(tmp_path: Path, data_dirs) -> None:
    """A learning rate of 1e300 overflows fp32 in the first update: every later loss is inf."""
    code, out = outcome(
        "train", *SMOKE_ARGS, f"hydra.run.dir={tmp_path}", *data_dirs, "train.lr=1e300"
    )
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


# -- interruptions and damaged records of commands ------------------------------------------------


def test_ctrl_c_ends_a_command_in_one_line(smoke_run: Path) -> None:
    """seq2seq-translate on a pipe, interrupted after its first answer: exit 130, no traceback."""
    args = [*cli("translate"), f"run_dir={smoke_run}"]
    status, answer, said = interrupted(args, "Ein Hund läuft.")
    assert status == 130 and answer.strip()
    assert said.strip().splitlines()[-1].endswith("interrupted") and "Traceback" not in said


@pytest.mark.slow
def test_a_ctrl_c_while_the_data_workers_start_is_one_line(tmp_path: Path, multi30k_dir) -> None:
    """A terminal's Ctrl-C reaches the data workers' server too: while it imported its modules
    (the tokenizers' training has just begun) it printed their traceback, and a worker forked
    then, another; now the command's one line alone, exit 130."""
    if not Path("/proc/self/task").is_dir():
        pytest.skip("finds the workers' server in Linux's /proc")
    args = [*SMOKE_ARGS, f"data.source={multi30k_dir}", f"data.root={tmp_path / 'm30k'}"]
    proc = subprocess.Popen(
        [*cli("train"), *args, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,  # its own data/cache: the tokenizers are trained in a worker
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's foreground job
        preexec_fn=as_on_a_terminal,
    )
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:
        said.append(line)
        if "training src unigram tokenizer" in line:
            break
    while not _importing_forkserver(proc.pid) and proc.poll() is None:  # for about a second
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGINT)
    said += proc.stdout.readlines()
    assert proc.wait(60) == 130, "".join(said)
    assert "Traceback" not in "".join(said) and said[-1].rstrip().endswith("interrupted"), said


def _importing_forkserver(pid: int) -> bool:
    """Whether ``pid``'s forkserver has started and handles SIGINT (is importing; Linux's /proc)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                if b"forkserver" in Path(f"/proc/{child}/cmdline").read_bytes():
                    status = Path(f"/proc/{child}/status").read_text()
                    caught = int(status.split("SigCgt:")[1].split()[0], 16)
                    return bool(caught & 1 << (signal.SIGINT - 1))
    return False


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


@pytest.mark.slow
def test_a_refused_resume_leaves_the_runs_config(tmp_path: Path, data_dirs) -> None:
    """A resume refused for another epoch plan (in the middle of an epoch) changes nothing in
    the folder: config.yaml still says what ran (it said the refused values)."""
    folder = tmp_path / "run"
    out = finish(
        started("train", *SMOKE_ARGS, "train.max_steps=5", f"hydra.run.dir={folder}", *data_dirs),
        TRAIN_TIMEOUT,
    )
    assert (folder / "last.pt").is_file(), out
    before = (folder / "config.yaml").read_bytes()
    again = ["train.resume=true", "train.max_steps=10", "train.seed=7"]
    proc = started("train", *SMOKE_ARGS, *again, f"hydra.run.dir={folder}", *data_dirs)
    out = finish(proc, TRAIN_TIMEOUT)
    assert proc.returncode == 1 and "train.seed 1234 (now 7)" in out, out
    assert (folder / "config.yaml").read_bytes() == before
