"""A full disk while training: one line naming what could not be written, the last good
checkpoint intact, no traceback. The failures are real OSErrors (ENOSPC) raised inside the
training process where the writes happen, injected through a sitecustomize module."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from run_helpers import TRAIN_TIMEOUT, cli, finish

from seq2seq.runtime.checkpoint import load_checkpoint

# Installed into the training process: after `SEQ2SEQ_FAIL_AFTER` successful calls, the patched
# function raises ENOSPC, as a full disk does.
SITECUSTOMIZE = textwrap.dedent(
    """
    import errno, os

    TARGET, AFTER = os.environ["SEQ2SEQ_FAIL"], int(os.environ.get("SEQ2SEQ_FAIL_AFTER", "0"))
    calls = [0]

    def full(*args, **kwargs):
        calls[0] += 1
        if calls[0] > AFTER:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(*args, **kwargs)

    if TARGET == "tensorboard":
        from tensorboard.summary.writer import record_writer
        original = record_writer.RecordWriter.write
        record_writer.RecordWriter.write = lambda self, *a, **k: full(self, *a, **k)
    elif TARGET == "checkpoint":
        import torch
        original = torch.save
        torch.save = full
    elif TARGET == "log":
        import logging
        original = None
        logging.FileHandler._open = lambda self: open("/dev/full", "w", encoding="utf-8")
    """
)


def train_with_a_full_disk(tmp_path: Path, data_dirs: list[str], target: str, after: int):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        "SEQ2SEQ_FAIL": target,
        "SEQ2SEQ_FAIL_AFTER": str(after),
    }
    run_dir = tmp_path / "run"
    cmd = [
        *cli("train"),
        "experiment=smoke",
        "log.progress=false",
        f"hydra.run.dir={run_dir}",
        "train.max_steps=20",
        "train.validate_every=10",
        "train.log_every=5",
        *data_dirs,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    return proc, finish(proc, TRAIN_TIMEOUT), run_dir


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_log_file_on_a_full_disk_goes_on_on_the_terminal(tmp_path, data_dirs) -> None:
    proc, out, run_dir = train_with_a_full_disk(tmp_path, data_dirs, "log", 0)
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "Logging error" not in out, out
    assert out.count("cannot write the log file") == 1, out
    assert "finished after 20 updates" in out and (run_dir / "last.pt").is_file()


@pytest.mark.slow
def test_tensorboard_on_a_full_disk_training_goes_on_without_it(tmp_path, data_dirs) -> None:
    proc, out, run_dir = train_with_a_full_disk(tmp_path, data_dirs, "tensorboard", 3)
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "Exception in thread" not in out, out
    assert out.count("TensorBoard events could not be written") == 1, out
    assert "No space left on device" in out
    assert load_checkpoint(run_dir / "last.pt")["step"] == 20


@pytest.mark.slow
def test_checkpoint_on_a_full_disk_stops_and_keeps_the_last_good_one(tmp_path, data_dirs) -> None:
    # Validation at update 10 writes best.pt and last.pt; the writes of update 20 fail.
    proc, out, run_dir = train_with_a_full_disk(tmp_path, data_dirs, "checkpoint", 2)
    assert proc.returncode == 1, out
    assert "Traceback" not in out, out
    assert "could not write" in out and "No space left on device" in out
    assert "is kept" in out
    for name in ("best.pt", "last.pt"):
        assert load_checkpoint(run_dir / name)["step"] == 10
    assert not list(run_dir.glob("*.tmp"))
