"""The whole run's ETA: from train.max_steps, max_minutes or max_epochs, whichever ends the run
first; a run of hours without a time limit is told how to set one."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from seq2seq.config import TrainConfig
from seq2seq.decoding.progress import clock
from seq2seq.training.report import long_run_hint, run_eta
from seq2seq.training.state import Progress


def train(**values: object):
    return OmegaConf.merge(OmegaConf.structured(TrainConfig), values)


@pytest.mark.parametrize(
    ("limits", "left", "limit"),
    [
        # 2 epochs of 100 updates, 30 done: 170 left at 0.5 s
        ({"max_epochs": 2}, 85.0, "train.max_epochs"),
        ({"max_epochs": 50, "max_steps": 40}, 5.0, "train.max_steps"),  # 10 left
        ({"max_epochs": 50, "max_minutes": 1}, 20.0, "train.max_minutes"),  # 40 s trained
        ({"max_epochs": 1, "max_minutes": 30}, 35.0, "train.max_epochs"),  # 70 left
        ({"max_epochs": 50, "max_steps": 20}, 0.0, "train.max_steps"),  # past it: never negative
    ],
)
def test_the_run_ends_at_its_first_limit(limits: dict, left: float, limit: str) -> None:
    progress = Progress(step=30, epoch=0, batch_in_epoch=30, seconds=40.0)
    assert run_eta(train(**limits), progress, 100, 0.5) == (pytest.approx(left), limit)


def test_a_resumed_run_counts_the_epochs_it_has_done() -> None:
    progress = Progress(step=130, epoch=1, batch_in_epoch=30, seconds=100.0)
    assert run_eta(train(max_epochs=3), progress, 100, 1.0) == (170.0, "train.max_epochs")


def test_clock_counts_hours_past_a_day() -> None:
    assert [clock(s) for s in (0, 59.6, 3600 + 61, 90_000)] == [
        "0:00:00",
        "0:01:00",
        "1:01:01",
        "25:00:00",
    ]


def test_a_run_of_hours_without_a_time_limit_is_told_how_to_cap_it() -> None:
    """The GPU recipe started on a CPU: 50 epochs, hours; one line says so and names the key."""
    hint = long_run_hint(train(max_epochs=50), 4 * 3600 + 5, "train.max_epochs")
    assert hint is not None
    assert "4:00:05" in hint and "train.max_epochs=50" in hint and "train.max_minutes=N" in hint
    assert long_run_hint(train(max_epochs=50), 3600, "train.max_epochs") is None  # an hour
    capped = train(max_epochs=50, max_minutes=600)  # a limit the user chose, however long
    assert long_run_hint(capped, 10 * 3600, "train.max_minutes") is None
