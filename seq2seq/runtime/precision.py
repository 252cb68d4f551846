"""``precision=auto``: train in bf16 where this CPU runs the model's training step faster in it,
or where a GPU replays the update from CUDA graphs; in fp32 elsewhere.

Whether bf16 pays depends on the CPU and the model: much faster on some CPUs with native bf16,
no faster on others, several times slower without it (docs/performance.md, by CPU). So the
choice is timed, once, at start-up: forward and backward passes of the model over a batch of the
run's size (at most ``TOKENS`` target pieces) in each precision. On a GPU the rule is measured
once (`off_cpu`); other devices train in fp32 unless told.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from seq2seq.config_choices import Precision

# bf16 must take at most this share of fp32's time: a tie keeps fp32's exact arithmetic
MARGIN = 0.95
LENGTH = 16  # pieces per synthetic sentence (Multi30k's captions: ~14 on average)
TOKENS = 1024  # at most this many target pieces per timed step: a few seconds in all
# a warm-up pass this many times fp32's step ends bf16's timing: where bf16 is emulated, the full
# timing took tens of seconds (docs/performance.md, "AVX2 only")
SLOW = 4.0


# the CPU flags of native bf16 products, as Linux's /proc/cpuinfo names them
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The flags of the first CPU in ``cpuinfo`` (empty where it cannot be read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX): torch's own probes
    where this torch has them (private functions), else the CPU's flags."""
    probes = [getattr(torch.cpu, name, None) for name in CPU_PROBES]
    if all(callable(probe) for probe in probes):
        return any(bool(probe()) for probe in probes)
    return bool(cpu_flags() & set(BF16_FLAGS))


CPU_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch's, private
NATIVE_BF16_CUDA = (8, 0)  # compute capability with bf16 tensor cores (Ampere on)


def off_cpu(device: torch.device, graphed: bool) -> tuple[Precision, str]:
    """``precision=auto`` on ``device`` (not the CPU), and why: on CUDA bf16 where the update is
    replayed from CUDA graphs and the GPU has bf16 tensor cores (on an H200, 1.5-1.8x fp32's
    tokens/s from 2,000 to 16,000 target tokens), fp32 where it runs eagerly (bf16's casts made
    it slower there) or without them; fp32 on other devices."""
    if device.type != "cuda":
        return Precision.fp32, f"on {device.type}, auto trains in fp32"
    if not graphed:
        return Precision.fp32, "the update runs eagerly on cuda, where bf16 autocast is slower"
    capability = tuple(torch.cuda.get_device_capability(device))
    if capability < NATIVE_BF16_CUDA:
        return Precision.fp32, f"no bf16 tensor cores (compute capability {capability})"
    return Precision.bf16, "the update is replayed from CUDA graphs, where bf16 is faster"


def _batch(vocab: tuple[int, int], tokens: int) -> tuple[torch.Tensor, ...]:
    """Random sentences of ``LENGTH`` pieces, as many as fill ``tokens``: src, lengths, in, out."""
    rows = max(1, tokens // LENGTH)
    src = torch.randint(4, vocab[0], (rows, LENGTH))  # [B, S]
    tgt = torch.randint(4, vocab[1], (rows, LENGTH + 1))  # [B, T + 1]
    return src, torch.full((rows,), LENGTH), tgt[:, :-1], tgt[:, 1:]


def time_training_step(
    model: nn.Module,
    vocab: tuple[int, int],
    tokens: int,
    dtype: torch.dtype | None,
    repeats: int,
    limit: float = math.inf,
) -> float:
    """Median seconds of forward + backward over a batch of ``tokens`` target pieces, under
    autocast to ``dtype`` (None: fp32), after one warm-up pass; a warm-up pass longer than
    ``limit`` seconds is the answer. Gradients are cleared after."""
    batch = _batch(vocab, min(tokens, TOKENS))
    laps: list[float] = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss, _ = model(*batch)
        loss.backward()
        laps.append(time.perf_counter() - start)
        if laps[0] > limit:
            break
    model.zero_grad(set_to_none=True)
    return statistics.median(laps[1:] or laps)


def fastest_precision(
    model: nn.Module, vocab: tuple[int, int], tokens: int, repeats: int = 2
) -> tuple[Precision, dict[str, float]]:
    """The faster training precision for ``model`` on this CPU, and the seconds per step it was
    chosen by (empty where bf16 is not native: fp32 without timing). The random state and the
    model's mode are left as they were."""
    if not native_bf16():
        return Precision.fp32, {}
    was_training = model.training
    model.train()
    with torch.random.fork_rng(devices=[]):
        fp32 = time_training_step(model, vocab, tokens, None, repeats)
        bf16 = time_training_step(model, vocab, tokens, torch.bfloat16, repeats, SLOW * fp32)
        seconds = {"fp32": fp32, "bf16": bf16}
    model.train(was_training)
    faster = seconds["bf16"] <= MARGIN * seconds["fp32"]
    return (Precision.bf16 if faster else Precision.fp32), seconds
