"""Where a step's time goes: torch.profiler's operators by self time, the share of that time in
matrix products, and operator calls per token; on CUDA also how busy the device kept and its
kernels by time (``scripts/benchmark.py --profile``).

A step that uses a small share of the matrix peak is bound by something else: casts, the
per-operator cost of the decoder's time steps, element-wise work, the loss, the optimizer. The
profile names it, so a speed lever is chosen from a measurement.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity

# the kernels that multiply matrices (fp32 and bf16, PyTorch's BLAS and oneDNN, GRU layers)
MATRIX_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addmv",
        "aten::mv",
        "aten::_addmm_activation",
        "aten::mkldnn_rnn_layer",
        "aten::mkldnn_rnn_layer_backward",
        "mkldnn::_linear_pointwise",
    }
)
# ranges the profiler records around operators (autograd's node wrappers, the optimizer's
# step): their self time is the engine's own overhead, but they are not operator calls
WRAPPERS = ("autograd::", "Optimizer.", "ProfilerStep", "cudaDeviceSynchronize")


@dataclass
class OpProfile:
    """One profiled piece of work: its operators' self time (ms), the share in matrix
    products, operator calls (every dispatched one, and those called from Python directly),
    per ``units`` (target tokens, or output pieces for decoding), and the top operators."""

    units: int
    self_ms: float
    matrix_share: float
    calls: int
    outer_calls: int
    top: list[dict[str, Any]]
    device: dict[str, Any] = field(default_factory=dict)  # `device_time`'s, profiled on CUDA

    @property
    def calls_per_unit(self) -> float:
        return self.calls / max(1, self.units)

    @property
    def outer_calls_per_unit(self) -> float:
        return self.outer_calls / max(1, self.units)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "calls_per_unit": self.calls_per_unit,
            "outer_calls_per_unit": self.outer_calls_per_unit,
        }


def is_operator(name: str) -> bool:
    """A dispatched operator (``aten::add``, ``mkldnn::...``), not a range around some."""
    return "::" in name and not name.startswith(WRAPPERS)


def ready_for_graphs() -> None:
    """Start and stop the profiler once before CUDA graphs are captured: a graph captured
    before its first start and replayed under it could crash (pytorch/pytorch#75504; PyTorch's
    own workaround, ``torch.profiler._utils._init_for_cuda_graphs``, does the same)."""
    with torch.autograd.profiler.profile():
        pass


def profile_ops(work: Callable[[], int], top: int = 12, cuda: bool = False) -> OpProfile:
    """Run ``work`` (which returns how many units it processed, the device done) under
    torch.profiler, and summarise its operators; with ``cuda``, its kernels too."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        units = work()
        wall_us = 1e6 * (time.perf_counter() - start)
    events = prof.events()
    kernels = [
        (event.name, event.time_range.end - event.time_range.start)
        for event in events
        if event.device_type == DeviceType.CUDA
    ]
    self_us: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    outer = 0
    for event in events:
        if event.device_type != DeviceType.CPU:  # a kernel ("void at::native::...") is no call
            continue
        name = event.name
        self_us[name] += event.self_cpu_time_total
        if is_operator(name):
            calls[name] += 1
            parent = event.cpu_parent
            outer += parent is None or not is_operator(parent.name)
    total = sum(self_us.values()) or 1.0
    matrix = sum(us for name, us in self_us.items() if name in MATRIX_OPS)
    rows = [
        {
            "name": name,
            "self_ms": us / 1e3,
            "share": us / total,
            "calls": calls[name],
            "calls_per_unit": calls[name] / max(1, units),
        }
        for name, us in self_us.most_common(top)
    ]
    device = device_time(kernels, wall_us, top) if cuda else {}
    return OpProfile(units, total / 1e3, matrix / total, sum(calls.values()), outer, rows, device)


def device_time(kernels: Iterable[tuple[str, float]], wall_us: float, top: int) -> dict[str, Any]:
    """How busy the device kept (kernel and copy time summed, µs, against the work's wall time:
    far below 1, the device waited on the host) and the ``top`` kernels by time."""
    busy: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for name, us in kernels:
        busy[name] += us
        count[name] += 1
    total = sum(busy.values())
    return {
        "busy_ms": total / 1e3,
        "wall_ms": wall_us / 1e3,
        "busy_share": total / max(wall_us, 1e-9),
        "kernels": sum(count.values()),
        "top": [
            {"name": name, "ms": us / 1e3, "share": us / (total or 1.0), "calls": count[name]}
            for name, us in busy.most_common(top)
        ],
    }


def describe(profile: dict[str, Any], what: str, unit: str) -> list[str]:
    """Lines for a reader of an ``OpProfile.to_dict()``: the summary, then the top operators."""
    one = unit.split()[-1].rstrip("s")
    lines = [
        f"profile of {what}: {profile['self_ms']:,.0f} ms of operator self time for "
        f"{profile['units']:,} {unit}; matrix products {profile['matrix_share']:.0%}; "
        f"{profile['calls_per_unit']:.1f} operator calls per {one} "
        f"({profile['outer_calls_per_unit']:.1f} not inside another operator)",
        f"  {'operator':<44}{'self ms':>10}{'share':>7}{'calls':>9}{'per ' + one:>12}",
    ]
    for row in profile["top"]:
        lines.append(
            f"  {row['name'][:43]:<44}{row['self_ms']:>10,.1f}{row['share']:>7.1%}"
            f"{row['calls']:>9,}{row['calls_per_unit']:>12.2f}"
        )
    device = profile.get("device")
    if device:
        lines.append(
            f"  the device busy {device['busy_ms']:,.1f} of {device['wall_ms']:,.1f} ms "
            f"({device['busy_share']:.0%}), {device['kernels']:,} kernels and copies; the top:"
        )
        lines += [
            f"  {row['name'][:60]:<62}{row['ms']:>9,.1f} ms{row['share']:>7.1%}{row['calls']:>8,}"
            for row in device["top"]
        ]
    return lines
