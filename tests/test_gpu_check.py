"""scripts/gpu_check.sh, which only a lent GPU runs for real, parses and forms every command of
its steps: here it runs with a stand-in python3 that prints what it is given, so that a quoting
slip inside a step (a whole step is one quoted bash string) fails here, not on the GPU."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.speed.cli import parse_args
from seq2seq.commands.keys import check_command_line

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = """#!/bin/sh
echo "python3 $* (finished)"
"""


def test_the_shell_scripts_parse() -> None:
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script.name}: {proc.stderr}"


def run_with_stand_in(
    tmp_path: Path, steps: str, **env: str
) -> tuple[subprocess.CompletedProcess, Path]:
    """scripts/gpu_check.sh's ``steps`` run with the stand-in python3: its output and OUT_DIR."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STAND_IN)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "BUNDLE": str(tmp_path), **env}
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", "scripts/gpu_check.sh", str(out)],
        cwd=ROOT,
        env={**env, "STEPS": steps},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, out


@pytest.fixture
def stand_in_run(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    return run_with_stand_in(tmp_path, "tests peer ours recipe")


def test_gpu_check_forms_every_step(stand_in_run) -> None:
    proc, out = stand_in_run
    assert proc.stdout.rstrip().splitlines()[-1].startswith("failed:"), proc.stdout + proc.stderr
    for step in ("tests", "peer", "ours", "recipe"):
        assert f"== {step} " in proc.stdout
    assert "-m pytest -n0 -m gpu" in (out / "tests.log").read_text()
    peer = (out / "peer.log").read_text()
    assert "batch_type=tokens batch_size=8192" in peer and "large batches" in peer
    parts = (out / "parts.log").read_text()
    assert parts.count("-- python3 -m seq2seq.commands.train") == 1  # eager: OURS_EAGER=1
    assert parts.count("-- python3 scripts/benchmark.py") == 6
    profiled = [line for line in parts.splitlines() if line.startswith("-- ") and "profile" in line]
    assert len(profiled) == 1 and "--cuda-graphs true" in profiled[0]
    assert "--measure training,decoding" in profiled[0]  # one process: one set-up
    assert "--model peer --batch 8192 --precision bf16" in parts  # the 4x target in bf16 too
    assert parts.count("--cuda-graphs false,true") >= 3
    # the recipe's first seed trains (the stand-in says it finished), then its log is missing
    assert "experiment=multi30k_de_en device=cuda" in (out / "recipe.log").read_text()
    assert "scripts/gpu_table.py" in proc.stdout  # the table, last


def test_a_step_with_too_little_time_left_is_skipped_and_said(tmp_path: Path) -> None:
    """A call of a lent machine runs 10 minutes at most: a step that no longer fits in
    DEADLINE_S is skipped and named on the last line; the table is still made; COMMIT names
    the code where the copy has no .git."""
    proc, out = run_with_stand_in(tmp_path, "tests recipe", DEADLINE_S="70", COMMIT="abc1234")
    # bash's SECONDS counts whole seconds since the script began: one more may have ticked
    assert re.search(r"== tests skipped: (49|50)s left", proc.stdout), proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == "failed: tests(skipped) recipe(skipped)"
    assert "scripts/gpu_table.py" in proc.stdout and not (out / "tests.log").exists()
    assert (out / "commit.txt").read_text() == "abc1234\n"
    (tmp_path / "again").mkdir()
    proc, _ = run_with_stand_in(tmp_path / "again", "tests", DEADLINE_S="200", TESTS_S="300")
    assert re.search(r"== tests \(at most (179|180)s\)", proc.stdout)  # 300 s cut to what is left


def test_gpu_check_gives_its_commands_arguments_they_take(stand_in_run) -> None:
    """Each benchmark's flags parse, and each training's overrides name keys of the config with
    values of their types: a renamed flag or key fails here, not on the GPU."""
    _, out = stand_in_run
    lines = (out / "parts.log").read_text().splitlines() + (
        out / "recipe.log"
    ).read_text().splitlines()
    benchmarks = [
        line.split("scripts/benchmark.py ", 1)[1]
        for line in lines
        if line.startswith("-- python3 scripts/benchmark.py ")
    ]
    trainings = [
        line.removesuffix(" (finished)").split("seq2seq.commands.train ", 1)[1]
        for line in lines
        if line.startswith("python3 -m seq2seq.commands.train ")
    ]
    assert len(benchmarks) == 6 and len(trainings) == 2  # the recipe's first seed too
    for args in benchmarks:
        parse_args(shlex.split(args))
    for overrides in trainings:
        check_command_line("config", shlex.split(overrides))


def table(out: Path) -> dict[str, list[str]]:
    """scripts/gpu_table.py's rows for ``out``, by their first cell."""
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_table.py", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| ")]
    return {row[0].removeprefix("| "): [c.rstrip(" |") for c in row[1:]] for row in rows}


def train_log(rates: list[int]) -> str:
    return "".join(
        f"[t][seq2seq.train][INFO] - epoch 1, update {50 * (i + 1)}/441 (step {50 * (i + 1)}): "
        f"loss 4.0, {rate:,} tok/s, lr 0.001\n"
        for i, rate in enumerate(rates)
    )


def _made_up_peer_and_logs(folder: Path) -> None:
    """The peer's figures and the training and recipe logs a GPU run leaves, made up."""
    write = lambda name, text: (folder / name).write_text(text)  # noqa: E731
    peer = {"steady_tgt_tok_per_s_after_50": 19_000.0, "decode_beam5_sent_per_s": 769.0}
    write("peer.json", json.dumps({**peer, "decode_greedy_sent_per_s": 1000.0}))
    write("peer_8192.json", json.dumps({"steady_tgt_tok_per_s_after_50": 75_000.0}))
    closing = "[t][seq2seq.train][INFO] - CUDA graphs: 16 buckets captured, 1 eager update\n"
    refused = "[t][seq2seq.decoding.graphed][WARNING] - the search runs without CUDA graphs: x\n"
    rates = train_log([19_119, 90_000, 100_000, 110_000, 100_000, 100_000])
    write("ours_train.log", refused + rates + closing)
    write("recipe1_eval.json", json.dumps({"bleu": 39.59}))
    start = "[t][seq2seq.train][INFO] - on cuda:0 (NVIDIA H200), bf16, 16 threads; each update\n"
    write("recipe1_train.log", start)
    write("recipe2_eval.json", json.dumps({"bleu": 37.0}))


def _made_up_benchmark(folder: Path) -> None:
    """The benchmark's JSON line a GPU run leaves, made up: training and decoding rows."""
    graphed = {"cuda_graphs": "true"}
    train = [
        {"attention": "peer", "batch": "8192", **graphed, "precision": p, "tokens_per_s": r}
        for p, r in (("fp32", 237_372.0), ("bf16", 320_000.0))
    ]
    # a profiled row (fewer windows, for its kernels) is not a figure of the table
    train.append(
        {"attention": "peer", "batch": "8192", **graphed, "tokens_per_s": 9e5, "profile": {}}
    )
    train += [
        {
            "attention": "bahdanau",
            "batch": "16000",
            **graphed,
            "precision": p,
            "tokens_per_s": r,
            "max_memory_allocated_mib": 5_197.0,
        }
        for p, r in (("bf16", 423_126.0), ("fp32", 285_251.0))
    ]
    decode = [
        {
            "beam_size": b,
            "batch_size": n,
            **graphed,
            "precision": "fp32",
            "sentences_per_s": r,
            "ms_per_batch": 1000 * n / r,
        }
        for b, n, r in ((5, 64, 2_500.0), (1, 64, 7_000.0), (1, 1, 100.0))
    ]
    kernels = [{"name": "gemm", "share": 0.5}, {"name": "softmax", "share": 0.25}]
    device = {"busy_share": 0.4, "busy_ms": 8.0, "wall_ms": 20.0, "top": kernels}
    profiled = {"search": "greedy", "sentences_per_s": 2e4, "profile": {"device": device}}
    decode.append({**decode[1], **profiled})
    line = json.dumps({"torch": "2.11", "training": train, "decoding": decode})
    (folder / "parts.log").write_text("-- python3 ...\n" + line + "\n")


def test_the_gpu_table_says_which_targets_are_met(tmp_path: Path) -> None:
    """What the steps leave, made up: each target's ratio and whether it is met; a figure no
    step left is "–"."""
    _made_up_peer_and_logs(tmp_path)
    _made_up_benchmark(tmp_path)
    rows = table(tmp_path)
    span = rows["training, peer shape and batch: logged tok/s, updates 50–300"]
    assert span[1:] == ["99,598", "5.24×", "≥ 5×", "yes"]  # 5 / (1/90k + 1/100k x3 + 1/110k)
    assert rows["the same graphed: what capturing cost"][1] == "16 buckets captured, 1 eager update"
    assert rows["peer shape, 8,192-token batches (bf16, step alone)"][2:] == [
        "4.27×",
        "≥ 4×",
        "yes",
    ]
    assert rows["reference model, best batch (16000 tokens, bf16)"][-1] == "yes"
    bf16 = "reference model, {} tokens: bf16 / fp32 tok/s, graphed"
    assert rows[bf16.format("16,000")][1:3] == ["423,126 / 285,251", "1.48×"]
    assert rows[bf16.format("2,000 (the recipes')")][1:3] == ["– / –", "–"]
    assert rows["beam 5, batches of 64, sentences/s (graphed, fp32)"][2:] == [
        "3.25×",
        "≥ 3×",
        "yes",
    ]
    assert rows["greedy, batches of 64, sentences/s (graphed, fp32)"][2:] == ["7.00×", "≥ 8×", "no"]
    assert rows["greedy, one sentence at a time (graphed), ms"][1] == "10.0"
    assert rows["beam 5, batches of 64, sentences/s (eager, –)"][1:] == ["–", "–", "", ""]
    assert rows["GPU recipe in 1.5 minutes of training, seed 1 (bf16): test BLEU"][-1] == "yes"
    assert rows["GPU recipe in 1.5 minutes of training, seed 2: test BLEU"][-1] == "no"
    assert rows["decoding greedy 64 fp32, graphed"] == [
        "40% (8.0 ms of 20.0)",
        "gemm 50%; softmax 25%",
    ]
    nothing = table(tmp_path / "missing")  # no step ran: every figure "–", no error
    assert nothing["greedy, batches of 64, sentences/s (graphed, –)"][1:] == ["–", "–", "≥ 8×", "–"]


def test_the_gpu_tables_header_names_torch_cuda_and_the_gpu(tmp_path: Path) -> None:
    """The machine step's line, from a local build's version ("+cu130") or a wheel's (none)."""
    from scripts.gpu_table import machine_line

    log = tmp_path / "machine.log"
    for line in ("2.11.0+cu130 13.0 NVIDIA H200 True", "2.13.0 12.8 NVIDIA H100 80GB HBM3 True"):
        log.write_text(f"| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04 |\n{line}\n")
        assert machine_line(log) == line
    assert machine_line(tmp_path / "missing.log") == "–"


def test_gpu_check_trains_eagerly_too_when_asked(tmp_path: Path) -> None:
    """OURS_EAGER=1: the 300-update run again with train.cuda_graphs=false, its overrides valid."""
    _, out = run_with_stand_in(tmp_path, "ours", OURS_EAGER="1")
    lines = (out / "parts.log").read_text().splitlines()
    trainings = [line for line in lines if line.startswith("python3 -m seq2seq.commands.train ")]
    assert len(trainings) == 2 and "train.cuda_graphs=false" in trainings[1]
    overrides = trainings[1].removesuffix(" (finished)").split("seq2seq.commands.train ", 1)[1]
    check_command_line("config", shlex.split(overrides))
