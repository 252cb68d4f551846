"""The operator profile's summary: self time shares, matrix products, calls per unit."""

from __future__ import annotations

import torch

from seq2seq.runtime.profiling import describe, device_time, is_operator, profile_ops


def test_profile_counts_the_work_it_ran() -> None:
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    small = torch.randn(8)
    torch.mm(a, b), small.add(1.0)  # first calls pay one-off set-up outside the profile

    def work() -> int:
        for _ in range(3):
            torch.mm(a, b)  # 268 MFLOP each against 8 additions: the product dominates
        for _ in range(5):
            small.add(1.0)
        return 4  # units

    profile = profile_ops(work).to_dict()
    top = {row["name"]: row for row in profile["top"]}
    assert top["aten::mm"]["calls"] == 3 and top["aten::add"]["calls"] == 5
    assert profile["matrix_share"] > 0.5
    assert profile["outer_calls"] == 8 and profile["calls"] >= 8
    assert profile["calls_per_unit"] == profile["calls"] / 4
    lines = describe(profile, "work", "target tokens")
    assert "matrix products" in lines[0] and "per token" in lines[0]
    assert any(line.strip().startswith("aten::mm") for line in lines[2:])


def test_ranges_are_not_operators() -> None:
    assert is_operator("aten::mm") and is_operator("mkldnn::_linear_pointwise")
    assert not is_operator("autograd::engine::evaluate_function: MmBackward0")
    assert not is_operator("Optimizer.step#Adam.step")


def test_device_time_says_how_busy_the_device_kept() -> None:
    """Made-up kernels (CUDA's cannot run here): summed by name, against the wall time."""
    kernels = [("gemm", 300.0), ("gru_cell", 100.0), ("gemm", 300.0), ("Memcpy HtoD", 50.0)]
    device = device_time(kernels, wall_us=1500.0, top=2)
    assert device["busy_ms"] == 0.75 and device["wall_ms"] == 1.5 and device["busy_share"] == 0.5
    assert device["kernels"] == 4
    assert [row["name"] for row in device["top"]] == ["gemm", "gru_cell"]
    assert device["top"][0]["calls"] == 2 and device["top"][0]["share"] == 0.8
    profile = {**profile_ops(lambda: 1).to_dict(), "device": device}
    lines = describe(profile, "work", "target tokens")
    assert "the device busy 0.8 of 1.5 ms (50%)" in lines[-3]
    assert lines[-2].split()[0] == "gemm" and lines[-1].split()[0] == "gru_cell"


def test_a_cpu_profile_has_no_device_part() -> None:
    profile = profile_ops(lambda: 1).to_dict()
    assert profile["device"] == {}
    assert not any("device busy" in line for line in describe(profile, "work", "tokens"))
