"""The learning-rate schedule (warm-up, inverse square root, reduce on plateau) and subword
sampling, as units and in training."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from run_helpers import composed, run, scalars

from seq2seq.commands.rules import check_config
from seq2seq.config import ScheduleName, SchedulerConfig
from seq2seq.errors import Seq2SeqError
from seq2seq.training.schedule import LearningRate


def schedule(**settings) -> tuple[LearningRate, torch.optim.Optimizer]:
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    return LearningRate(optimizer, 0.01, SchedulerConfig(**settings)), optimizer


def lr_of(optimizer: torch.optim.Optimizer) -> float:
    return optimizer.param_groups[0]["lr"]


def test_inverse_square_root_after_a_linear_warmup() -> None:
    lr, optimizer = schedule(name=ScheduleName.inverse_sqrt, warmup=4)
    seen = []
    for step in (1, 2, 4, 16, 64):
        lr.before_update(step)
        seen.append(lr_of(optimizer))
    assert seen == pytest.approx([0.0025, 0.005, 0.01, 0.005, 0.0025])
    lr.after_validation(0.0)  # validation leaves it alone
    assert lr_of(optimizer) == pytest.approx(0.0025) and lr.state_dict() == {}


def test_plateau_after_warmup_moves_only_with_validation() -> None:
    lr, optimizer = schedule(warmup=2, patience=1, factor=0.5)
    lr.before_update(1)
    assert lr_of(optimizer) == pytest.approx(0.005)
    lr.before_update(2)
    assert lr_of(optimizer) == pytest.approx(0.01)
    lr.before_update(3)
    assert lr_of(optimizer) == pytest.approx(0.01)
    for bleu in (10.0, 9.0, 9.0):  # better, then two without improvement: more than patience
        lr.after_validation(bleu)
    lr.before_update(4)
    assert lr_of(optimizer) == pytest.approx(0.005)
    again, optimizer2 = schedule(warmup=2, patience=1, factor=0.5)  # resumed
    again.load_state_dict(lr.state_dict())
    optimizer2.param_groups[0]["lr"] = lr_of(optimizer)
    again.after_validation(8.0)
    again.after_validation(8.0)
    assert lr_of(optimizer2) == pytest.approx(0.0025)


def test_inverse_sqrt_needs_a_warmup() -> None:
    cfg = composed("train.scheduler.name=inverse_sqrt")
    with pytest.raises(Seq2SeqError, match="needs train.scheduler.warmup"):
        check_config(cfg)
    with pytest.raises(Seq2SeqError, match="warmup=-1 must not be negative"):
        check_config(composed("train.scheduler.warmup=-1"))
    check_config(composed("train.scheduler.name=inverse_sqrt", "train.scheduler.warmup=10"))
    assert OmegaConf.select(composed(), "train.scheduler.name") == ScheduleName.plateau


@pytest.mark.slow
def test_training_follows_the_schedule(tmp_path: Path, data_dirs) -> None:
    folder = tmp_path / "run"
    run(
        "train",
        "experiment=smoke",
        "log.progress=false",
        f"hydra.run.dir={folder}",
        "train.max_steps=8",
        "train.log_every=2",
        "train.lr=0.004",
        "train.scheduler.name=inverse_sqrt",
        "train.scheduler.warmup=4",
        *data_dirs,
    )
    rates = dict(scalars(folder, "train/lr"))
    assert rates == pytest.approx(
        {2: 0.002, 4: 0.004, 6: 0.004 * (4 / 6) ** 0.5, 8: 0.004 / 2**0.5}
    )


@pytest.mark.slow
def test_training_with_sampled_subwords(tmp_path: Path, data_dirs) -> None:
    """Subword regularisation trains, validates on the cached segmentation, and writes a
    checkpoint whose updates counted the sampled tokens."""
    folder = tmp_path / "run"
    out = run(
        "train",
        "experiment=smoke",
        "log.progress=false",
        f"hydra.run.dir={folder}",
        "train.max_steps=6",
        "train.validate_every=3",
        "data.sampling_alpha=0.2",
        *data_dirs,
    )
    losses = [loss for _, loss in scalars(folder, "valid/loss")]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), out
    with pytest.raises(Seq2SeqError, match="sampling_alpha=1.5 must be at least 0 and below 1"):
        check_config(composed("data.sampling_alpha=1.5"))
