"""Several processes under torchrun (gloo on the CPU): the same update as one process, one writer
of the run folder, a shared stop on a signal to any rank, and resume."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from distributed_step import TGT_LENGTHS, batch_of, update
from model_helpers import assert_same_update
from run_helpers import TRAIN_TIMEOUT, cli, finish, scalars

from seq2seq.data.batching import plan_updates, shard
from seq2seq.data.corpus import read_parallel
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import Engine

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
TORCHRUN += ["--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0", "--max-restarts=0"]


def torchrun(*args: str, wait: bool = True) -> subprocess.Popen | str:
    """``torchrun --nproc_per_node=2 ...`` from the checkout root, as the README says."""
    proc = subprocess.Popen(
        [*TORCHRUN, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if not wait:
        return proc
    out = finish(proc, TRAIN_TIMEOUT)
    assert proc.returncode == 0, out
    return out


def train_args(run_dir: Path, data_dirs: list[str], *overrides: str) -> list[str]:
    return [
        "-m",
        "seq2seq.commands.train",
        "experiment=smoke",
        f"hydra.run.dir={run_dir}",
        "log.progress=false",
        *data_dirs,
        *overrides,
    ]


# -- sharing an epoch out ------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_each_pair_once_per_epoch_in_equal_shares(world: int) -> None:
    rng = np.random.default_rng(0)
    batches = [
        np.arange(start, start + n) for start, n in [(0, 5), (5, 1), (6, 3), (9, 8), (17, 2)]
    ]
    order = [batches[i] for i in rng.permutation(len(batches))]
    shares = shard(order, world)
    assert len({len(share) for share in shares}) == 1  # every rank the same number of batches
    pairs = np.concatenate([ids for share in shares for ids in share])
    assert sorted(pairs.tolist()) == list(range(19))  # every pair exactly once
    if world == 1:
        assert [b.tolist() for b in shares[0]] == [b.tolist() for b in order]


def test_updates_know_the_tokens_of_every_rank() -> None:
    lengths = np.array([3, 4, 5, 6, 7, 8, 9, 10])
    batches = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5]), np.array([6, 7])]
    rank0 = plan_updates(batches, lengths, 0, 2, accumulate=2)
    rank1 = plan_updates(batches, lengths, 1, 2, accumulate=2)
    assert len(rank0) == len(rank1) == 1
    assert rank0[0].tokens == rank1[0].tokens == lengths.sum()
    assert [b.tolist() for b in rank0[0].batches] == [[0, 1], [4, 5]]
    assert [b.tolist() for b in rank1[0].batches] == [[2, 3], [6, 7]]
    single = plan_updates(batches, lengths)
    assert [u.tokens for u in single] == [7, 11, 15, 19]


def test_more_ranks_than_pairs_is_refused() -> None:
    with pytest.raises(Seq2SeqError, match="cannot be shared equally among 3 processes"):
        shard([np.array([0]), np.array([1])], 3)


# -- one update, split across processes ----------------------------------------------------------


@pytest.mark.slow
def test_two_ranks_with_half_the_batch_equal_one_process(tmp_path: Path) -> None:
    """Tolerance: 1e-6 absolute, 1e-4 relative on gradients and updated parameters (float
    sums in another order; the model is fp32)."""
    out = tmp_path / "ranks.pt"
    torchrun("tests/distributed_step.py", str(out))
    two_ranks = torch.load(out, weights_only=True)
    one_process = update(Engine.create("cpu"), [batch_of([0, 1, 2, 3])], sum(TGT_LENGTHS))
    assert_same_update(two_ranks, one_process)


def test_ctrl_c_on_rank_0_inside_from_main_stops_every_rank_at_once(tmp_path: Path) -> None:
    """Rank 1 waited inside the collective, where no signal reaches it: the group's close then
    hung for 30 s, until torchrun killed both."""
    torchrun("tests/distributed_interrupt.py", str(tmp_path))
    for rank in (0, 1):
        said, seconds = (tmp_path / f"rank{rank}").read_text().split()
        assert said == "interrupted" and float(seconds) < 15, (rank, said, seconds)


# -- training under torchrun ---------------------------------------------------------------------


def validation_lines(out: str) -> list[str]:
    return re.findall(r"step \d+ \(epoch \d+\): valid loss .*", out)


@pytest.fixture(scope="module")
def single_and_torchrun(tmp_path_factory, data_dirs: list[str]) -> dict:
    """One epoch of the smoke recipe in one process, then under torchrun with 2 processes."""
    base = tmp_path_factory.mktemp("ranks")
    runs = {}
    for name, launcher in (("single", [sys.executable]), ("torchrun", TORCHRUN)):
        run = base / name
        start = time.perf_counter()
        cmd = [*launcher, *train_args(run, data_dirs, "train.max_epochs=1")]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=TRAIN_TIMEOUT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs[name] = {
            "run": run,
            "seconds": time.perf_counter() - start,
            "out": proc.stdout + proc.stderr,
        }
    return runs


@pytest.mark.slow
def test_torchrun_trains_in_about_the_time_of_one_process(single_and_torchrun) -> None:
    """Two processes share the cores (a thread each), they do not fight over them: oversubscribed,
    the same run took many times longer. A loose bound: 2.5x."""
    single, ranks = single_and_torchrun["single"], single_and_torchrun["torchrun"]
    assert ranks["seconds"] < 2.5 * single["seconds"], (ranks["seconds"], single["seconds"])
    assert "2 processes, 1 thread" in ranks["out"]


@pytest.mark.slow
def test_torchrun_validates_after_half_the_updates_and_writes_everything_once(
    single_and_torchrun,
) -> None:
    single, ranks = single_and_torchrun["single"], single_and_torchrun["torchrun"]
    steps = {
        name: [s for s, _ in scalars(r["run"], "valid/loss")]
        for name, r in single_and_torchrun.items()
    }
    assert len(steps["single"]) == len(steps["torchrun"]) == 1
    assert steps["torchrun"][0] == math.ceil(steps["single"][0] / 2)
    # one validation line, in the output and in the log file, and one set of events
    assert len(validation_lines(ranks["out"])) == 1
    log_file = (ranks["run"] / "train.log").read_text()
    assert len(validation_lines(log_file)) == 1 and log_file.count("updates per epoch") == 1
    assert len(list((ranks["run"] / "tensorboard").iterdir())) == 1
    run_files = sorted(p.name for p in ranks["run"].iterdir())
    assert run_files == sorted(p.name for p in single["run"].iterdir())
    assert {"best.pt", "last.pt", "config.yaml", "src.model", "tgt.model"} <= set(run_files)
    assert not any(REPO.glob("*.log")) and not (REPO / ".hydra").exists()  # nothing from rank 1


@pytest.mark.slow
def test_torchrun_checkpoint_evaluates_to_its_validation_bleu(
    single_and_torchrun, multi30k_dir: Path, tmp_path: Path
) -> None:
    """One prediction path: seq2seq-evaluate on the smoke run's validation lines (the first 100
    of val, greedy) gives the BLEU that validation recorded for best.pt."""
    run = single_and_torchrun["torchrun"]["run"]
    sources, references = read_parallel(multi30k_dir / "val.de.gz", multi30k_dir / "val.en.gz", 100)
    (tmp_path / "val.de").write_text("".join(line + "\n" for line in sources))
    (tmp_path / "val.en").write_text("".join(line + "\n" for line in references))
    cmd = [*cli("evaluate"), f"run_dir={run}", "beam_size=1"]
    cmd += [f"input={tmp_path / 'val.de'}", f"reference={tmp_path / 'val.en'}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    best = torch.load(run / "best.pt", weights_only=True)
    assert result["step"] == best["step"] and best["world_size"] == 2
    assert len(best["rng"]) == 2  # every rank's random state
    assert result["bleu"] == pytest.approx(best["best_bleu"], abs=1e-9)


def worker_pids(proc: subprocess.Popen) -> dict[int, int]:
    """{rank: pid} of torchrun's worker processes (read from /proc)."""
    workers = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent != proc.pid:
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                workers[int(item[5:])] = int(entry.name)
    return workers


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds workers in /proc")
def test_sigterm_to_one_rank_stops_all_and_resume_continues(
    tmp_path: Path, data_dirs: list[str]
) -> None:
    run = tmp_path / "run"
    # three short epochs left when the first one's checkpoint is written
    epochs = ["train.max_epochs=4", "data.train_limit=1000"]
    proc = torchrun(*train_args(run, data_dirs, *epochs), wait=False)
    deadline = time.monotonic() + TRAIN_TIMEOUT
    while not (run / "last.pt").exists():  # the first epoch's checkpoint: training is under way
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no last.pt before the run ended or timed out:\n{proc.communicate()[0]}")
        time.sleep(0.05)
    workers = worker_pids(proc)
    assert sorted(workers) == [0, 1], workers
    os.kill(workers[1], signal.SIGTERM)  # not rank 0: the ranks must agree to stop
    out = finish(proc, 300)
    assert proc.returncode != 0, out
    assert out.count("stopped by signal 15") == 1, out
    assert "rerun the same torchrun command with train.resume=true" in out  # its settings too
    stopped = torch.load(run / "last.pt", weights_only=True)
    per_epoch = int(re.search(r"(\d+) updates per epoch", out).group(1))
    assert per_epoch <= stopped["step"] < 4 * per_epoch

    out = torchrun(*train_args(run, data_dirs, *epochs, "train.resume=true"))
    assert f"resumed from last.pt: step {stopped['step']}" in out
    final = torch.load(run / "last.pt", weights_only=True)
    assert final["step"] == 4 * per_epoch and final["epoch"] == 4
    steps = [step for step, _ in scalars(run, "valid/loss")]
    assert steps == [per_epoch * e for e in range(1, 5)]  # each validation once, none lost


@pytest.mark.slow
def test_a_user_error_under_torchrun_is_one_line(tmp_path: Path, data_dirs: list[str]) -> None:
    """Rank 0 refuses a folder that holds a checkpoint; every rank stops, one message is shown."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "last.pt").write_bytes(b"precious")
    proc = torchrun(*train_args(run, data_dirs), wait=False)
    out = finish(proc, 300)
    assert proc.returncode != 0
    assert out.count("already holds a checkpoint") == 1, out
    assert "terminate called" not in out  # every rank left the process group cleanly
    assert (run / "last.pt").read_bytes() == b"precious"


@pytest.mark.slow
def test_a_warning_under_torchrun_is_said_once(tmp_path: Path) -> None:
    """An unknown language code is warned of by rank 0 alone (device=cuda then stops every rank
    on this CPU machine, before any training)."""
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(f"Ein Hund {i}.\tA dog {i}.\n" for i in range(50)))
    args = ["data=tsv", f"data.file={corpus}", "data.columns=[german,en]"]
    args += ["data.src_lang=german", "data.tgt_lang=en", "device=cuda"]
    proc = torchrun(*train_args(tmp_path / "run", [], *args), wait=False)
    out = finish(proc, 300)
    assert proc.returncode != 0
    assert out.count("data.src_lang=german is not a language code") == 1, out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "said"),
    [("train.lrr=1", "train.lrr: no such key"), ("train.lr=-1", "train.lr=-1.0 must be positive")],
)
def test_a_settings_error_under_torchrun_is_said_once(tmp_path: Path, override, said) -> None:
    """Every rank printed it (eight times on eight GPUs)."""
    proc = torchrun(*train_args(tmp_path / "run", [], override), wait=False)
    out = finish(proc, 300)
    assert proc.returncode != 0 and out.count(said) == 1, out
