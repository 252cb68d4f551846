"""train.best_metric: the validation score (BLEU, chrF or loss) that chooses best.pt, stops
training early, drives the plateau schedule and ranks kept checkpoints; a resume keeps it, and a
checkpoint from before the key was chosen by BLEU."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from run_helpers import TRAIN_TIMEOUT, cli

from seq2seq.commands.average import average
from seq2seq.commands.configs import AverageConfig
from seq2seq.config import SchedulerConfig
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.checkpoint import CheckpointWriter, keep, load_checkpoint
from seq2seq.runtime.migrate import upgrade_saved_state
from seq2seq.storage.rundir import KEPT_DIR
from seq2seq.training.schedule import LearningRate
from seq2seq.training.state import Progress, check_best_metric, count_validation


def counted(metric: str, scores: list[float], patience: int = 2) -> tuple[list[bool], Progress]:
    """Which validations of ``scores`` made best.pt (BLEU = 10 x the validation's number)."""
    progress = Progress(best_metric=metric)
    made = [
        count_validation(progress, 10.0 * i, score, patience, last=False)
        for i, score in enumerate(scores)
    ]
    return made, progress


def test_loss_is_better_lower_and_bleu_or_chrf_higher() -> None:
    made, progress = counted("loss", [5.0, 4.0, 4.5, 4.0])
    assert made == [True, True, False, False]  # an equal loss is no better
    assert (progress.best_score, progress.best_bleu, progress.stopped_early) == (4.0, 10.0, True)
    for metric in ("bleu", "chrf"):
        made, progress = counted(metric, [5.0, 4.0, 6.0])
        assert made == [True, False, True] and progress.best_score == 6.0
        assert progress.bad_validations == 0 and not progress.stopped_early


def test_a_resume_keeps_the_metric_and_old_checkpoints_were_chosen_by_bleu() -> None:
    check_best_metric({"best_metric": "loss"}, "loss")
    with pytest.raises(Seq2SeqError, match="chosen by loss; resume with train.best_metric=loss"):
        check_best_metric({"best_metric": "loss"}, "bleu")
    old = upgrade_saved_state({"step": 300, "best_bleu": 31.5, "config": {}})
    assert (old["best_metric"], old["best_score"]) == ("bleu", 31.5)
    unvalidated = upgrade_saved_state({"step": 3, "best_bleu": -1.0, "config": {}})
    assert unvalidated["best_score"] is None


def test_the_plateau_schedule_waits_for_a_lower_loss() -> None:
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.01)
    config = SchedulerConfig(patience=0, factor=0.5)
    schedule = LearningRate(optimizer, 0.01, config, higher_is_better=False)
    for loss in (5.0, 4.0):  # each lower: the rate stays
        schedule.after_validation(loss)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    schedule.after_validation(4.5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.005)


def test_kept_checkpoints_by_loss_average_the_lowest(tmp_path: Path) -> None:
    OmegaConf.save({"train": {"best_metric": "loss"}}, tmp_path / "config.yaml")
    writer = CheckpointWriter()
    for step, loss in ((100, 3.0), (200, 2.5), (300, 2.7), (400, 2.9)):
        weights = {"model": {"w": torch.full((2,), float(step))}, "vocab": [5, 6]}
        keep(writer, tmp_path, step, loss, weights, n=2, higher_is_better=False)
    writer.close()
    kept = sorted(p.name for p in (tmp_path / KEPT_DIR).glob("*.pt"))
    assert kept == ["step-200.pt", "step-300.pt", "step-400.pt"]  # 2 latest, 2 lowest
    out = average(OmegaConf.structured(AverageConfig(run_dir=str(tmp_path), n=2, select="best")))
    assert load_checkpoint(out)["averaged"] == {"200": 2.5, "300": 2.7}


@pytest.mark.slow
def test_a_run_chosen_by_loss_says_so_and_resumes_only_so(tmp_path: Path, data_dirs) -> None:
    args = [*cli("train"), "experiment=smoke", "log.progress=false", f"hydra.run.dir={tmp_path}"]
    args += [*data_dirs, "train.max_steps=20", "train.validate_every=10"]
    proc = subprocess.run(
        [*args, "train.best_metric=loss"], capture_output=True, text=True, timeout=TRAIN_TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(" (best), ppl ") >= 1 and ", BLEU 0" in proc.stderr
    assert "finished after 20 updates; best loss " in proc.stderr
    best = torch.load(tmp_path / "best.pt", weights_only=False)
    assert best["best_metric"] == "loss" and best["best_score"] < 10
    again = [*args, "train.resume=true", "train.max_steps=30"]
    resumed = subprocess.run([*again, "train.best_metric=bleu"], capture_output=True, text=True)
    assert resumed.returncode == 1 and "Traceback" not in resumed.stderr
    assert (
        resumed.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "train.resume=true: best.pt of this run was chosen by loss; resume with "
            "train.best_metric=loss, or start a new run"
        )
    )
    resumed = subprocess.run(again, capture_output=True, text=True)  # the run's own: by loss
    assert resumed.returncode == 0 and "finished after 30 updates; best loss " in resumed.stderr
