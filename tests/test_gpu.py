"""On a CUDA GPU: smoke training in each precision, the same translations as on the CPU, and
checkpoints that move between devices. Marked ``gpu``; skipped where torch finds no CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from run_helpers import TRAIN_TIMEOUT, scalars

from seq2seq.config import DecodeConfig
from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.inference import Translator, load_run
from seq2seq.runtime.engine import Engine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; torch finds none"),
]
SENTENCES = 200  # test_2016_flickr lines decoded on both devices


def train_on_gpu(run: Path, data_dirs: list[str], precision: str) -> None:
    cmd = [sys.executable, "-m", "seq2seq.train", "experiment=smoke", "device=cuda"]
    cmd += [f"precision={precision}", f"hydra.run.dir={run}", "log.progress=false"]
    proc = subprocess.run([*cmd, *data_dirs], capture_output=True, text=True, timeout=TRAIN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def gpu_runs(tmp_path_factory, data_dirs: list[str]) -> dict[str, Path]:
    runs = {}
    for precision in ("fp32", "bf16", "fp16"):
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            continue
        runs[precision] = tmp_path_factory.mktemp(precision) / "run"
        train_on_gpu(runs[precision], data_dirs, precision)
    return runs


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_smoke_training_on_the_gpu(gpu_runs: dict[str, Path], precision: str) -> None:
    if precision not in gpu_runs:
        pytest.skip(f"{torch.cuda.get_device_name()} has no {precision}")
    run = gpu_runs[precision]
    losses = [loss for _, loss in scalars(run, "valid/loss")]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    state = torch.load(run / "best.pt", weights_only=True)
    assert all(t.device.type == "cpu" for t in state["model"].values())  # host tensors
    assert "cuda" in state["rng"][0]


def decode_test(run: Path, device: str, beam_size: int, multi30k_dir: Path) -> list:
    engine = Engine.create(device)
    trained = load_run(run, engine=engine)
    sources, _ = read_parallel(
        multi30k_dir / "test_2016_flickr.de.gz", multi30k_dir / "test_2016_flickr.en.gz", SENTENCES
    )
    search = DecodeConfig(beam_size=beam_size, nbest=1)
    translator = Translator.from_run(trained, search, engine=engine)
    return [t.hypotheses[0] for t in translator.translate(sources)]


@pytest.mark.parametrize("beam_size", [1, 5])
def test_gpu_translations_equal_the_cpus(smoke_run: Path, multi30k_dir: Path, beam_size: int):
    """Tolerance: scores within 1e-3 where the tokens agree; at most 1% of the sentences may
    differ (cuDNN's GRU and the GPU's reductions round differently, which can flip a near-tie)."""
    cpu = decode_test(smoke_run, "cpu", beam_size, multi30k_dir)
    gpu = decode_test(smoke_run, "cuda", beam_size, multi30k_dir)
    same = [(c, g) for c, g in zip(cpu, gpu, strict=True) if c.tokens == g.tokens]
    assert len(same) >= 0.99 * SENTENCES
    for c, g in same:
        assert g.score == pytest.approx(c.score, abs=1e-3)


def evaluate(run: Path, device: str) -> dict:
    cmd = [sys.executable, "-m", "seq2seq.evaluate", f"run_dir={run}", f"device={device}"]
    cmd += ["beam_size=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_checkpoints_move_between_devices(smoke_run: Path, gpu_runs: dict[str, Path]) -> None:
    on_gpu = evaluate(smoke_run, "cuda")  # trained on the CPU
    assert on_gpu["device"].startswith("cuda")
    assert on_gpu["bleu"] == pytest.approx(evaluate(smoke_run, "cpu")["bleu"], abs=0.5)
    on_cpu = evaluate(gpu_runs["fp32"], "cpu")  # trained on the GPU
    assert on_cpu["device"] == "cpu"
    assert on_cpu["bleu"] == pytest.approx(evaluate(gpu_runs["fp32"], "cuda")["bleu"], abs=0.5)
