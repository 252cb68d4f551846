"""The machine a benchmark runs on: its description, peak memory, the matrix-product peak
and the FLOP counter that the shares of it are computed from."""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import platform
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from seq2seq.model.config import ModelConfig
from seq2seq.model.linear import linear
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.heap import allocator_setting
from seq2seq.runtime.precision import cpu_flags, native_bf16

# products timed back to back for the matrix peak on a GPU, where one takes about a launch
GPU_PEAK_CALLS = 20


def machine_info(engine: Engine) -> dict[str, Any]:
    """torch version, threads, CPU model and whether it multiplies bf16 natively; the device."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": cpu,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": native_bf16(),
        "amx": "amx_tile" in cpu_flags(),
        "device": engine.describe().split(",")[0],
        "memory": allocator_setting(),  # what Engine.create did with the allocator
    }


def reset_peak_rss() -> bool:
    """Restart the kernel's peak-RSS mark at the current RSS (Linux); False where impossible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def reset_peaks(engine: Engine) -> None:
    """A measurement's start: garbage collected, the peak-RSS and device-memory marks reset."""
    gc.collect()
    reset_peak_rss()
    engine.reset_peak_memory()


def peak_rss_mib() -> float:
    """Peak resident memory since the last reset (VmHWM), else of the whole process."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024


def matmul_peak(
    engine: Engine, dtype: torch.dtype, model: ModelConfig, vocab: int, seconds: float
) -> float:
    """The device's matrix-multiply limit in GFLOP/s: the best product of the model's own kind
    (``seq2seq.model.linear``) over its own shapes (64 rows: one decoder step; 1000 rows: a
    batch's tokens at once)."""
    h, a = model.hidden_size, model.attention.size
    calls = 1 if engine.device.type == "cpu" else GPU_PEAK_CALLS
    best = 0.0
    for m, (k, n) in itertools.product((64, 1000), ((h, 3 * h), (2 * h, a), (h, vocab))):
        x = torch.randn(m, k).to(engine.device, dtype)
        w = torch.randn(n, k).to(engine.device, dtype)
        linear(x, w)  # warm-up
        times: list[float] = []
        while len(times) < 2 or (calls * sum(times) < seconds and len(times) < 200):
            engine.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                linear(x, w)
            engine.synchronize()
            times.append((time.perf_counter() - start) / calls)
        best = max(best, 2 * m * k * n / min(times) / 1e9)
    return best


def rnn_pass_flops(x: Sequence[int], weights: Sequence[Sequence[int]], batch_sizes: Any) -> int:
    """One pass of an RNN over ``x``: 2 x positions x weight-matrix entries (biases left out).
    ``x`` packed [positions, in] where ``batch_sizes`` is given, else [T, B, in] or [B, T, in]."""
    positions = x[0] if len(batch_sizes) else x[0] * x[1]
    return 2 * positions * sum(math.prod(w) for w in weights if len(w) == 2)


def cudnn_rnn_flops(x: Sequence[int], weights: Any, *args: Any, **kwargs: Any) -> int:
    """FLOPs of ``aten._cudnn_rnn``, the GRU on CUDA (FlopCounterMode does not know it, and it
    does not decompose: it would count 0). ``args[12]``: the batch sizes of a packed input."""
    return rnn_pass_flops(x, weights, args[12])


def cudnn_rnn_backward_flops(x: Sequence[int], weights: Any, *args: Any, **kwargs: Any) -> int:
    """FLOPs of ``aten._cudnn_rnn_backward``: the data's gradients as a forward pass, and as
    much again for the weights' where asked (``args[19]``, the output mask's last)."""
    return rnn_pass_flops(x, weights, args[16]) * (1 + bool(args[19][3]))


def onednn_linear_flops(x: Sequence[int], weight: Sequence[int], *args: Any, **kwargs: Any) -> int:
    """FLOPs of oneDNN's linear: 2 x rows x in x out (x [..., in], weight [out, in])."""
    return 2 * math.prod(x) * weight[0]


def flop_counter() -> FlopCounterMode:
    """torch's FLOP counter (matrix products), taught cuDNN's GRU and oneDNN's linear (on the
    CPU the GRU decomposes into the products it counts)."""
    mapping: dict[Any, Any] = {
        torch.ops.aten._cudnn_rnn: cudnn_rnn_flops,
        torch.ops.aten._cudnn_rnn_backward: cudnn_rnn_backward_flops,
    }
    if hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        mapping[torch.ops.mkldnn._linear_pointwise] = onednn_linear_flops
    return FlopCounterMode(display=False, custom_mapping=mapping)
