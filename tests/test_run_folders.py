"""One writer per run folder (a lock, taken over from a killed training), and a folder of its
own for each start."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from run_helpers import (
    SMOKE_ARGS,
    TRAIN_TIMEOUT,
    assert_one_line_error,
    cli,
    finish,
    outcome,
    scalars,
    started,
    wait_for_file,
)

from seq2seq.commands.train import _fresh_folder
from seq2seq.runtime.checkpoint import load_checkpoint
from seq2seq.storage.rundir import LOCK, RunLock, unused_run_folder


@pytest.mark.slow
def test_a_second_training_in_a_busy_folder_is_refused(tmp_path: Path, data_dirs) -> None:
    folder = tmp_path / "run"
    first = started(
        "train", *SMOKE_ARGS, "train.validate_every=10", f"hydra.run.dir={folder}", *data_dirs
    )
    wait_for_file(folder / LOCK, first)
    holder = json.loads((folder / LOCK).read_text())
    assert holder["pid"] == first.pid
    # both at once, while the first trains: a new start and a resume
    second = [
        started("train", *SMOKE_ARGS, f"hydra.run.dir={folder}", *data_dirs, *extra)
        for extra in ([], ["train.resume=true"])
    ]
    for proc in second:
        out = finish(proc, TRAIN_TIMEOUT)
        assert_one_line_error(proc.returncode, out, "is in use", f"process {first.pid} on")
    wait_for_file(folder / "last.pt", first)  # training, past its first validation: then stopped
    first.send_signal(signal.SIGTERM)
    assert finish(first, TRAIN_TIMEOUT) and first.returncode == 128 + signal.SIGTERM
    assert (folder / LOCK).read_text() == ""  # released
    assert load_checkpoint(folder / "last.pt")["step"] > 0


def test_a_refused_start_never_removes_a_folder_another_start_holds(tmp_path: Path) -> None:
    """Two starts in one folder at once: the one the lock refused removed the other's folder
    (what a start writes first looks unused), and the other then failed."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text("x: 1\n")
    holder = RunLock(folder)
    holder.acquire()
    try:
        assert not unused_run_folder(folder)
    finally:
        holder.release()
    assert unused_run_folder(folder)


def test_starts_in_the_same_second_get_folders_of_their_own(tmp_path: Path, monkeypatch) -> None:
    """The default folder is named by the second: two starts in one second took the same one."""
    monkeypatch.chdir(tmp_path)
    year = datetime.now().strftime("%Y")
    made = [_fresh_folder("runs/${now:%Y}") for _ in range(3)]
    assert made == [Path(f"runs/{year}"), Path(f"runs/{year}_2"), Path(f"runs/{year}_3")]
    assert all(folder.is_dir() for folder in made)
    assert _fresh_folder("runs/${hydra.job.name}") is None  # Hydra's to resolve


def test_a_command_that_trains_nothing_leaves_no_folder(tmp_path: Path) -> None:
    """The folder made before Hydra starts goes again; its override does not split the user's
    from a flag after them (``x=1 --cfg job``: 'unrecognized arguments')."""
    shown = (["--cfg", "job"], ["model/attention=multihead", "--cfg", "job"])
    shown += (["train.lr=1", "--help"],)
    for args in (*shown, ["train.max_step=3"], ["train.lr=-1"]):
        proc = subprocess.run([*cli("train"), *args], cwd=tmp_path, capture_output=True, text=True)
        assert (proc.returncode == 0) == (args in shown), (args, proc.stderr)
        assert not list(tmp_path.iterdir()), args


@pytest.mark.slow
def test_a_missing_extra_is_said_before_the_data_is_prepared(tmp_path: Path, data_dirs) -> None:
    """Sparse attention without the entmax package stopped after the tokenizers were trained
    and left a half-made run folder; it is said first, and no folder is left."""
    hidden = tmp_path / "hidden" / "entmax"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden.parent), *sys.path])}
    folder = tmp_path / "run"
    args = [*SMOKE_ARGS, "model.attention.normalizer=entmax15", f"hydra.run.dir={folder}"]
    proc = subprocess.run(
        [*cli("train"), *args, *data_dirs], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert_one_line_error(
        proc.returncode, proc.stderr, "the sparse attention normalizers need the entmax package"
    )
    assert not folder.exists() and "tokenizer" not in proc.stderr


@pytest.mark.slow
def test_a_recipe_started_without_its_data_says_how_to_make_it(tmp_path: Path) -> None:
    """experiment=hansards_en_fr_cpu reads ../shared/... and data/hansards_mix/ from the current
    folder: from elsewhere its first refusal names data.prepare's command and that folder (its
    gold, missing too, is said once the data is there); one line each, exit 1, no run folder."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    args = [*cli("train"), "experiment=hansards_en_fr_cpu", "train.max_steps=1"]
    proc = subprocess.run(args, cwd=checkout, capture_output=True, text=True)
    assert_one_line_error(
        proc.returncode,
        proc.stderr,
        "data.train=data/hansards_mix/train: neither data/hansards_mix/train.en nor",
        f"; relative paths are read from the current folder, {checkout}"
        "; this recipe's data is made by: python scripts/alignment_data.py --multi30k "
        "../shared/data/multi30k --pairs ../shared/data/alignment/en-fr.hansards.txt "
        "--out data/hansards_mix",
    )
    made = checkout / "data/hansards_mix"
    made.mkdir(parents=True)
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "fr"):
            (made / f"{split}.{lang}").write_text("a\n")
    proc = subprocess.run(args, cwd=checkout, capture_output=True, text=True)
    assert_one_line_error(
        proc.returncode,
        proc.stderr,
        "log.alignment_pairs=../shared/data/alignment/en-fr.hansards.txt does not exist",
        f"; relative paths are read from the current folder, {checkout}",
    )
    assert proc.stdout == "" and list(checkout.iterdir()) == [checkout / "data"]


@pytest.mark.slow
def test_a_lock_left_by_a_killed_training_is_taken_over(tmp_path: Path, data_dirs) -> None:
    folder = tmp_path / "run"
    # last.pt at the first validation (update 10); resumed, five updates more
    short = [*SMOKE_ARGS, "train.validate_every=10", f"hydra.run.dir={folder}", *data_dirs]
    first = started("train", *short)
    wait_for_file(folder / "last.pt", first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert json.loads((folder / LOCK).read_text())["pid"] == first.pid  # left behind
    stopped = load_checkpoint(folder / "last.pt")["step"]
    code, out = outcome("train", *short, "train.resume=true", f"train.max_steps={stopped + 5}")
    assert code == 0, out
    assert f'"pid": {first.pid}' in out and "took over" in out


@pytest.mark.slow
def test_a_rerun_from_a_runs_config_is_a_run_like_any_other(smoke_run: Path, tmp_path) -> None:
    """Trained again from a run's config.yaml (docs/training.md), the run logged to stdout,
    landed in Hydra's outputs/ and could not be resumed (the recipe was not in its overrides)."""
    config = tmp_path / "config"
    config.mkdir()
    shutil.copyfile(smoke_run / "config.yaml", config / "config.yaml")
    rerun = [*cli("train"), "--config-path", str(config), "--config-name", "config"]
    proc = subprocess.run(
        [*rerun, "train.max_steps=2", "train.validate_every=2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TRAIN_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    folder = Path(proc.stdout.strip())  # stdout: the run folder alone
    assert folder.parent == tmp_path / "runs" and (folder / "train.log").is_file()
    assert "finished after 2 updates" in proc.stderr
    resumed = [*cli("train"), f"hydra.run.dir={folder}", "train.resume=true", "train.max_steps=4"]
    proc = subprocess.run(resumed, capture_output=True, text=True, timeout=TRAIN_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert "resumed from last.pt: step 2" in proc.stderr and "finished after 4" in proc.stderr


@pytest.mark.slow
def test_a_new_start_hides_an_earlier_attempts_events(tmp_path, data_dirs) -> None:
    """A start after an attempt that ended before its first checkpoint (a preempted job given
    again with train.resume=true) drew both attempts' curves as one run's."""
    folder = tmp_path / "run"
    args = [*SMOKE_ARGS, *data_dirs, f"hydra.run.dir={folder}", "train.log_every=1"]
    code, out = outcome("train", *args, "train.max_steps=4")
    assert code == 0, out
    for name in ("last.pt", "best.pt"):  # as if it had been stopped before writing them
        (folder / name).unlink()
    code, out = outcome("train", *args, "train.max_steps=2", "train.resume=true")
    assert code == 0 and "starting afresh" in out, out
    assert [step for step, _ in scalars(folder, "train/loss")] == [1, 2]
