"""End to end: `seq2seq-train experiment=smoke` for every attention choice, and resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ATTENTIONS = [
    ["model/attention=bahdanau"],
    ["model/attention=luong", "model.attention.score=dot"],
    ["model/attention=luong", "model.attention.score=general"],
    ["model/attention=luong", "model.attention.score=concat", "model.input_feed=false"],
    ["model/attention=luong", "model.attention.score=scaled_dot"],
    ["model/attention=multihead", "model.attention.heads=4"],
]


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory, multi30k_url: str) -> list[str]:
    """One download folder and cache for the module: the first run downloads, the rest reuse."""
    base = tmp_path_factory.mktemp("data")
    return [
        f"data.source={multi30k_url}",
        f"data.root={base / 'multi30k'}",
        f"data.cache_dir={base / 'cache'}",
    ]


def train(run_dir: Path, *overrides: str, wait: bool = True) -> subprocess.Popen | str:
    """Run `python -m seq2seq.train` in its own process, as a user would."""
    cmd = [
        sys.executable,
        "-m",
        "seq2seq.train",
        "experiment=smoke",
        f"hydra.run.dir={run_dir}",
        "log.progress=false",
        *overrides,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        return proc
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    return out


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _name(overrides: list[str]) -> str:
    return "-".join(o.split("=")[1] for o in overrides)


@pytest.mark.parametrize("attention", ATTENTIONS, ids=_name)
def test_smoke_training_learns(tmp_path: Path, data_dirs: list[str], attention: list[str]) -> None:
    run = tmp_path / "run"
    train(run, *data_dirs, *attention)
    for name in ("best.pt", "last.pt", "config.yaml", "src.model", "tgt.model", "train.log"):
        assert (run / name).is_file(), name
    losses = scalars(run, "valid/loss")
    assert len(losses) >= 2
    assert losses[-1][1] < losses[0][1], losses
    state = torch.load(run / "best.pt", weights_only=True)
    assert state["step"] > 0 and state["best_bleu"] >= 0


def test_interrupted_run_resumes_where_it_stopped(tmp_path: Path, data_dirs: list[str]) -> None:
    full = tmp_path / "full"
    train(full, *data_dirs)
    expected = torch.load(full / "last.pt", weights_only=True)

    run = tmp_path / "run"
    proc = train(run, *data_dirs, wait=False)
    deadline = time.time() + 300
    while not (run / "last.pt").exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    stopped = torch.load(run / "last.pt", weights_only=True)
    assert 0 < stopped["step"] < expected["step"]

    out = train(run, *data_dirs, "train.resume=true")
    assert f"resumed from last.pt: step {stopped['step']}" in out
    final = torch.load(run / "last.pt", weights_only=True)
    assert (final["step"], final["epoch"]) == (expected["step"], expected["epoch"])
    steps = [step for step, _ in scalars(run, "valid/loss")]
    assert steps == sorted(set(steps)), "a validation step was repeated"


def test_existing_run_is_not_overwritten(tmp_path: Path, data_dirs: list[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "last.pt").write_bytes(b"precious")
    proc = train(run, *data_dirs, wait=False)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "train.resume=true" in out
    assert (run / "last.pt").read_bytes() == b"precious"


def test_misspelled_override_fails_loudly(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "seq2seq.train", f"hydra.run.dir={tmp_path}", "train.lr_rate=1"],
        capture_output=True,
        text=True,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )
    assert proc.returncode != 0
    assert "lr_rate" in proc.stderr + proc.stdout
