"""Checkpoints: atomic replacement, ordinary file permissions, safe loading."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from run_helpers import composed

from seq2seq.commands.average import average
from seq2seq.commands.configs import AverageConfig
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.checkpoint import (
    CheckpointWriter,
    keep,
    load_checkpoint,
    save_checkpoint,
    start_or_resume,
)


def test_saved_checkpoint_loads_and_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        save_checkpoint(tmp_path / "run" / "last.pt", {"step": 3, "w": torch.ones(2)})
    finally:
        os.umask(old)
    path = tmp_path / "run" / "last.pt"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    state = load_checkpoint(path)
    assert state["step"] == 3 and torch.equal(state["w"], torch.ones(2))
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]


def test_failed_save_keeps_the_previous_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "best.pt"
    save_checkpoint(path, {"step": 1})
    with pytest.raises(Exception):  # noqa: B017 - whatever torch.save raises for a lambda
        save_checkpoint(path, {"step": 2, "bad": lambda: None})
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["best.pt"]


def test_foreign_or_missing_file_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(Seq2SeqError, match="cannot read checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")
    with pytest.raises(Seq2SeqError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "none.pt")


@pytest.mark.parametrize("size", [0, 2, 100, 10_000])
def test_a_checkpoint_cut_short_is_said_to_be_so(tmp_path: Path, size: int) -> None:
    """A truncated copy: not torch's errno or zip library's reason, but what happened, and the
    size; a text file is no checkpoint, without the unpickler's detail."""
    path = tmp_path / "best.pt"
    save_checkpoint(path, {"w": torch.zeros(5000)})
    os.truncate(path, size)
    damaged = f"cannot read checkpoint {path}: it is damaged or cut short ({size:,} bytes)"
    with pytest.raises(Seq2SeqError, match=f"^{re.escape(damaged)}$"):
        load_checkpoint(path)
    path.write_text("# README\n\nA text.\n")
    with pytest.raises(Seq2SeqError, match="checkpoint this program wrote, or damaged$"):
        load_checkpoint(path)


def test_background_writer_saves_a_snapshot_and_reports_errors(tmp_path: Path) -> None:
    writer = CheckpointWriter()
    weights = torch.zeros(3)
    writer.save([tmp_path / "a.pt", tmp_path / "b.pt"], {"w": weights, "step": 1})
    weights += 1  # training goes on while the file is written
    writer.wait()
    for name in ("a.pt", "b.pt"):
        state = load_checkpoint(tmp_path / name)
        assert torch.equal(state["w"], torch.zeros(3)) and state["step"] == 1
    (tmp_path / "dir.pt").mkdir()  # a file cannot replace a folder
    writer.save([tmp_path / "dir.pt"], {"w": weights})
    with pytest.raises(Seq2SeqError, match="could not write .*dir.pt.*none was written"):
        writer.close()
    assert not list(tmp_path.glob("*.tmp"))


def test_average_takes_the_mean_of_the_best_or_latest_kept_weights(tmp_path: Path) -> None:
    def settings(**kwargs: object) -> AverageConfig:  # as Hydra hands it to the command
        return OmegaConf.structured(AverageConfig(**kwargs))

    writer = CheckpointWriter()
    for step, bleu in ((100, 30.0), (200, 33.0), (300, 31.0)):
        weights = {"model": {"w": torch.full((2,), float(step))}, "vocab": [5, 6]}
        keep(writer, tmp_path, step, bleu, weights, n=3)
    writer.close()
    best = load_checkpoint(average(settings(run_dir=str(tmp_path), n=2, select="best")))
    assert best["model"]["w"].tolist() == [250.0, 250.0]  # steps 200 and 300
    assert (best["step"], best["vocab"], best["averaged"]) == (
        300,
        [5, 6],
        {"200": 33.0, "300": 31.0},
    )
    out = tmp_path / "last2.pt"
    average(settings(run_dir=str(tmp_path), n=2, out=str(out)))
    assert load_checkpoint(out)["model"]["w"].tolist() == [250.0, 250.0]
    (tmp_path / "empty").mkdir()
    with pytest.raises(Seq2SeqError, match="empty is not a training run or release folder"):
        average(settings(run_dir=str(tmp_path / "empty")))
    (tmp_path / "empty" / "config.yaml").write_text("{}\n")
    with pytest.raises(Seq2SeqError, match="keeps no checkpoints"):
        average(settings(run_dir=str(tmp_path / "empty")))
    with pytest.raises(Seq2SeqError, match="run_dir=.*nowhere is not a folder"):
        average(settings(run_dir=str(tmp_path / "nowhere")))


def test_a_resume_with_other_model_settings_names_them(tmp_path: Path) -> None:
    saved = composed("experiment=smoke")
    state = {key: {} for key in ("model", "optimizer", "scheduler", "rng")}
    state["config"] = OmegaConf.to_container(saved, resolve=True, enum_to_str=True)
    save_checkpoint(tmp_path / "last.pt", state)
    now = composed("experiment=smoke", "train.resume=true", "model.hidden_size=128")
    says = r"differ from last.pt's: model.hidden_size \d+ \(now 128\)$"
    with pytest.raises(Seq2SeqError, match=says):
        start_or_resume(tmp_path, now)


def test_a_resume_from_weights_alone_is_one_line(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "last.pt", {"model": {}, "step": 10, "vocab": [8, 8]})
    now = composed("experiment=smoke", "train.resume=true")
    with pytest.raises(Seq2SeqError, match="is no training's state .*lacks optimizer, sched"):
        start_or_resume(tmp_path, now)
