"""The operator profile's summary: self time shares, matrix products, calls per unit."""

from __future__ import annotations

import torch

from seq2seq.runtime.profiling import describe, is_operator, profile_ops


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
