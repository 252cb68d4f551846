"""Resuming and the epoch plan: the same plan in the middle of an epoch (else refused, naming
what differs), a new one from an epoch's end; older checkpoints read the same way."""

from __future__ import annotations

import logging

import pytest
from run_helpers import SMOKE_ARGS, outcome

from seq2seq.commands.train import saved_settings
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.migrate import upgrade_saved_state
from seq2seq.training.state import Progress, check_plan

RESUME = "train.resume=true"
PLAN = {"train.seed": 1, "train.batch_tokens": 2000, "processes": 1, "training pairs": "29,000"}


def test_the_same_plan_resumes_anywhere() -> None:
    check_plan(PLAN, dict(PLAN), Progress(step=7, batch_in_epoch=7))


def test_another_plan_in_the_middle_of_an_epoch_is_refused_naming_each_key() -> None:
    changed = PLAN | {"train.batch_tokens": 3000, "processes": 2}
    with pytest.raises(Seq2SeqError) as refused:
        check_plan(PLAN, changed, Progress(step=7, epoch=1, batch_in_epoch=7))
    message = str(refused.value)
    assert "7 updates into epoch 2" in message and "\n" not in message
    assert "train.batch_tokens 2000 (now 3000)" in message and "processes 1 (now 2)" in message
    assert "train.seed" not in message


def test_another_plan_at_an_epochs_end_starts_with_the_next_epoch(caplog) -> None:
    changed = PLAN | {"training pairs": "28,500"}
    with caplog.at_level(logging.WARNING, logger="seq2seq.train"):
        check_plan(PLAN, changed, Progress(step=56, epoch=1, batch_in_epoch=0))
    assert "epoch 2 starts with a new plan: training pairs 29,000 (now 28,500)" in caplog.text


def test_a_checkpoint_without_a_plan_is_read_from_its_config() -> None:
    old = {"world_size": 2, "accumulate": 4, "config": {"train": {"seed": 3, "batch_tokens": 900}}}
    saved = upgrade_saved_state(old)["plan"]
    assert saved == {
        "train.seed": 3,
        "train.batch_tokens": 900,
        "train.accumulate": 4,
        "data.sampling_alpha": 0.0,
        "processes": 2,
    }
    with pytest.raises(Seq2SeqError, match="processes 2 \\(now 1\\)"):
        check_plan(saved, saved | {"processes": 1}, Progress(step=3, batch_in_epoch=3))


def test_a_resume_repeats_the_runs_accepted_command_line_under_its_own(
    tmp_path, monkeypatch
) -> None:
    """The run's last accepted overrides come first, but for the keys this command sets; a
    folder without last.pt, or a start that is not a resume, adds nothing."""
    (tmp_path / "overrides.yaml").write_text("- experiment=smoke\n- +x.y=1\n- train.lr=0.1\n")
    (tmp_path / ".hydra").mkdir()  # Hydra's record: rewritten by refused starts too
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- train.batch_tokens=999\n")
    argv = ["train.resume=true", f"hydra.run.dir={tmp_path}", "train.lr=0.2", "-v"]
    assert saved_settings(argv, str(tmp_path)) == []  # no last.pt: nothing to resume
    (tmp_path / "last.pt").write_bytes(b"")
    assert saved_settings(argv, str(tmp_path)) == ["experiment=smoke", "+x.y=1"]
    assert saved_settings(argv[1:], str(tmp_path)) == []  # a new start (refused later)
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun: other machines cannot read the folder
    assert saved_settings(argv, str(tmp_path)) == []
    monkeypatch.delenv("WORLD_SIZE")
    (tmp_path / "overrides.yaml").unlink()  # a run of before the record: Hydra's
    assert saved_settings(argv, str(tmp_path)) == ["train.batch_tokens=999"]


@pytest.mark.slow
def test_a_resume_on_another_validation_split_is_warned_of(tmp_path, data_dirs) -> None:
    """best.pt's score stays the one to beat: a resume on another split compared two splits
    without a word."""
    run = [*SMOKE_ARGS, *data_dirs, f"hydra.run.dir={tmp_path / 'run'}", "train.validate_every=2"]
    code, out = outcome("train", *run, "train.max_steps=2", "data.valid_limit=60")
    assert code == 0, out
    code, out = outcome("train", *run, "train.max_steps=4", "data.valid_limit=60", RESUME)
    assert code == 0 and "resumed from last.pt: step 2" in out, out
    assert "validation split" not in out
    code, out = outcome("train", *run, "train.max_steps=6", "data.valid_limit=50", RESUME)
    assert code == 0, out
    assert out.count("the validation split is not best.pt's (60 pairs (") == 1, out
    assert "now 50 pairs (" in out
