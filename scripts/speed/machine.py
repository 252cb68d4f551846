"""The machine a benchmark runs on: its description, peak memory, the matrix-product peak
and the FLOP counter that the shares of it are computed from."""

from __future__ import annotations

import contextlib
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
    best = 0.0
    for m, (k, n) in itertools.product((64, 1000), ((h, 3 * h), (2 * h, a), (h, vocab))):
        x = torch.randn(m, k).to(engine.device, dtype)
        w = torch.randn(n, k).to(engine.device, dtype)
        linear(x, w)  # warm-up
        times: list[float] = []
        while len(times) < 2 or (sum(times) < seconds and len(times) < 200):
            engine.synchronize()
            start = time.perf_counter()
            linear(x, w)
            engine.synchronize()
            times.append(time.perf_counter() - start)
        best = max(best, 2 * m * k * n / min(times) / 1e9)
    return best


def gru_flops(x: Sequence[int], *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """FLOPs of ``aten.gru``, which runs as one op under inference mode (FlopCounterMode does not
    know it): 2 x positions x weight-matrix entries. Shapes: ``gru.input`` [B, T, in] (then hx,
    params), ``gru.data`` packed [positions, in] (then batch_sizes, hx, params)."""
    packed = len(x) == 2
    positions, params = (x[0], args[2]) if packed else (x[0] * x[1], args[1])
    return 2 * positions * sum(math.prod(p) for p in params if len(p) == 2)


def onednn_linear_flops(x: Sequence[int], weight: Sequence[int], *args: Any, **kwargs: Any) -> int:
    """FLOPs of oneDNN's linear: 2 x rows x in x out (x [..., in], weight [out, in])."""
    return 2 * math.prod(x) * weight[0]


def flop_counter() -> FlopCounterMode:
    """torch's FLOP counter (matrix products), taught the fused inference GRU and oneDNN's
    linear."""
    mapping = {torch.ops.aten.gru: gru_flops}
    if hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        mapping[torch.ops.mkldnn._linear_pointwise] = onednn_linear_flops
    return FlopCounterMode(display=False, custom_mapping=mapping)
