"""Attention variants: masking, normalisation, documented shapes, keys projected once per batch."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from seq2seq.commands.keys import check_command_line
from seq2seq.commands.rules import check_config
from seq2seq.config import DecodeConfig
from seq2seq.decoding.search import greedy_search
from seq2seq.errors import Seq2SeqError
from seq2seq.model import build_model
from seq2seq.model.attention import LuongAttention, MultiHeadAttention
from seq2seq.model.config import (
    BahdanauConfig,
    LocalMConfig,
    LocalPConfig,
    LuongConfig,
    ModelConfig,
    MultiHeadConfig,
)
from seq2seq.model.registry import build_attention, describe_attention
from seq2seq.runtime.migrate import upgrade_saved_config

QUERY, MEMORY = 6, 10
# the model part of a run folder's config.yaml written before Luong scores were scaled
OLD_LUONG = {
    "data": {"kind": "multi30k"},
    "precision": "fp32",
    "model": {
        "emb_size": 8,
        "hidden_size": 12,
        "encoder_layers": 1,
        "dropout": 0.0,
        "tie_embeddings": False,
        "attention": {"name": "luong", "size": 8, "score": "general", "input_feed": True},
    },
}
LENGTHS = torch.tensor([5, 3, 1])

VARIANTS = {
    "bahdanau": BahdanauConfig(size=8),
    "luong-dot": LuongConfig(size=8, score="dot"),
    "luong-general": LuongConfig(size=8, score="general"),
    "luong-concat": LuongConfig(size=8, score="concat"),
    "multihead": MultiHeadConfig(size=8, heads=2),
    "local_m": LocalMConfig(size=8, window=1),
    "local_p": LocalPConfig(size=8, window=1),
    "bahdanau-coverage": BahdanauConfig(size=8, coverage=True),
    "bahdanau-sparsemax": BahdanauConfig(size=8, normalizer="sparsemax"),
    "luong-entmax15": LuongConfig(size=8, normalizer="entmax15"),
    "multihead-sparsemax": MultiHeadConfig(size=8, heads=2, normalizer="sparsemax"),
}
# local_p multiplies its weights by a Gaussian around p_t (as the paper does): they sum to <= 1
SUMS_TO_ONE = [name for name in VARIANTS if name != "local_p"]


def make(cfg, query_size: int = QUERY, memory_size: int = MEMORY):
    torch.manual_seed(0)
    return build_attention(cfg, query_size, memory_size)


def inputs(query_shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    memory = torch.randn(3, 5, MEMORY, generator=gen)  # [B, S, M]
    mask = torch.arange(5) < LENGTHS[:, None]  # [B, S]
    return torch.randn(*query_shape, generator=gen), memory, mask


@pytest.mark.parametrize("name", SUMS_TO_ONE)
def test_step_mode_shapes_masking_and_normalisation(name: str) -> None:
    attention = make(VARIANTS[name])
    query, memory, mask = inputs((3, QUERY))
    keys, values = attention.precompute(memory)
    context, weights = attention(query, keys, values, mask)
    assert context.shape == (3, attention.context_size)
    assert weights.shape == (3, attention.heads, 5)
    assert torch.all(weights.masked_select(~mask[:, None]) == 0)  # exactly zero, not tiny
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, attention.heads))
    assert torch.all(weights[2, :, 0] == 1)  # a single real token takes all the weight


@pytest.mark.parametrize("name", VARIANTS)
def test_sequence_mode_equals_steps(name: str) -> None:
    attention = make(VARIANTS[name])
    query, memory, mask = inputs((3, 4, QUERY))
    keys, values = attention.precompute(memory)
    context, weights = attention(query, keys, values, mask)
    assert context.shape == (3, 4, attention.context_size)
    assert weights.shape == (3, attention.heads, 4, 5)
    assert torch.all(weights.masked_select(~mask[:, None, None]) == 0)
    total = weights.sum(-1)
    if name in SUMS_TO_ONE:
        torch.testing.assert_close(total, torch.ones(3, attention.heads, 4))
    assert torch.all((total > 0) & (total <= 1 + 1e-6))
    for t in range(4):
        step = attention(query[:, t], keys, values, mask, position=torch.tensor(t))
        step_context, step_weights = step
        torch.testing.assert_close(step_context, context[:, t])
        torch.testing.assert_close(step_weights, weights[:, :, t])


def test_padding_does_not_change_attention() -> None:
    attention = make(VARIANTS["bahdanau"])
    query, memory, mask = inputs((3, QUERY))
    context, weights = attention(query, *attention.precompute(memory), mask)
    alone = memory[1:2, :3]  # sentence 1 without its two padded positions
    context1, weights1 = attention(query[1:2], *attention.precompute(alone), mask[1:2, :3])
    torch.testing.assert_close(context1[0], context[1])
    torch.testing.assert_close(weights1[0], weights[1, :, :3])


@pytest.mark.parametrize(("scale", "divisor"), [(False, 1.0), (True, MEMORY**0.5)])
def test_luong_dot_without_projection_when_sizes_match(scale: bool, divisor: float) -> None:
    attention = make(LuongConfig(score="dot", scale=scale), query_size=MEMORY)
    query, memory, mask = inputs((3, MEMORY))
    keys, values = attention.precompute(memory)
    assert attention.key_layer is None and keys is memory
    _, weights = attention(query, keys, values, mask)
    scores = torch.einsum("bq,bsq->bs", query, memory) / divisor
    torch.testing.assert_close(weights[:, 0], scores.masked_fill(~mask, float("-inf")).softmax(-1))


def test_config_reaches_constructor() -> None:
    assert make(LuongConfig(score="dot")).scale == pytest.approx(QUERY**-0.5)
    assert isinstance(make(VARIANTS["multihead"]), MultiHeadAttention)
    assert make(VARIANTS["multihead"]).heads == 2
    with pytest.raises(Seq2SeqError, match="divisible"):
        MultiHeadAttention(9, 2, QUERY, MEMORY)
    model_cfg = ModelConfig(attention=MultiHeadConfig(size=9, heads=2))
    with pytest.raises(Seq2SeqError, match="divisible"):  # not wrapped by Hydra
        build_model(OmegaConf.structured(model_cfg), 20, 20)
    with pytest.raises(ValueError):
        LuongAttention(8, QUERY, MEMORY, score="cosine")


@pytest.mark.parametrize("name", VARIANTS)
def test_keys_projected_once_per_batch(name: str) -> None:
    torch.manual_seed(0)
    cfg = OmegaConf.structured(ModelConfig(emb_size=8, hidden_size=12, attention=VARIANTS[name]))
    model = build_model(cfg, 20, 20).eval()
    attention = model.decoder.attention
    calls = {"keys": 0, "steps": 0}

    def count(key: str):
        def hook(*_) -> None:
            calls[key] += 1

        return hook

    attention.key_layer.register_forward_hook(count("keys"))
    weights = attention.weights  # what every step asks, with or without the context

    def counted(*args, **kwargs):
        count("steps")()
        return weights(*args, **kwargs)

    attention.weights = counted
    src = torch.randint(4, 20, (2, 6))
    greedy_search(model, src, torch.tensor([6, 6]), DecodeConfig(max_len_a=0.0, max_len_b=7))
    assert calls["steps"] >= 2  # several decoder steps ran ...
    assert calls["keys"] == 1  # ... on keys projected once


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        (["model.attention.score=dot"], True),
        (["model.attention.score=dot", "model.encoder_size=32"], False),
        (["model.attention.score=general"], False),
    ],
)
def test_a_dot_score_that_becomes_general_says_so(
    overrides: list[str], warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose("config", ["experiment=smoke", "model/attention=luong", *overrides])
    with caplog.at_level("WARNING", logger="seq2seq.config"):
        check_config(cfg)
    said = [r.getMessage() for r in caplog.records if "general score" in r.getMessage()]
    assert bool(said) == warned
    if warned:  # smoke: hidden 64, so a plain dot needs two directions of 32
        assert "model.encoder_size=32" in said[0]


@pytest.mark.parametrize("name", ["local_m", "local_p"])
def test_local_attention_is_zero_outside_its_window(name: str) -> None:
    window = 1
    attention = make(VARIANTS[name])
    query, memory, mask = inputs((3, 4, QUERY))
    memory = torch.randn(3, 9, MEMORY)
    mask = torch.arange(9) < torch.tensor([9, 6, 1])[:, None]
    _, weights = attention(query, *attention.precompute(memory), mask)  # [B, 1, T, S]
    centres = attention.centres(query, torch.arange(4), mask.sum(-1))  # [B, T]
    if name == "local_m":  # p_t = t, but never past the sentence's last position
        expected = torch.minimum(torch.arange(4.0), mask.sum(-1, keepdim=True) - 1.0)
        torch.testing.assert_close(centres, expected)
    distance = (torch.arange(9.0) - centres.unsqueeze(-1)).abs()  # [B, T, S]
    outside = (distance > window) | ~mask[:, None]
    assert torch.all(weights[:, 0][outside] == 0)  # exactly zero, not tiny
    assert torch.all(weights[:, 0][~outside & (weights[:, 0] > 0)] > 0)
    assert (weights[:, 0] > 0).sum(-1).max() <= 2 * window + 1


def test_local_p_weights_are_the_window_softmax_times_a_gaussian() -> None:
    attention = make(LocalPConfig(size=8, window=4))
    query, memory, mask = inputs((3, 2, QUERY))
    keys, values = attention.precompute(memory)
    _, weights = attention(query, keys, values, mask)
    centres = attention.centres(query, torch.arange(2), mask.sum(-1))
    assert torch.all((centres >= 0) & (centres <= mask.sum(-1, keepdim=True)))
    distance = torch.arange(5.0) - centres.unsqueeze(-1)  # [B, T, S]
    inside = mask[:, None] & (distance.abs() <= 4)
    scores = attention.scores(query, keys).masked_fill(~inside, float("-inf"))
    gauss = torch.exp(-(distance**2) / (2 * 2.0**2))  # sigma = window / 2
    torch.testing.assert_close(weights[:, 0], scores.softmax(-1) * gauss)


@pytest.mark.parametrize("normalizer", ["sparsemax", "entmax15"])
def test_sparse_normalizers_give_exact_zeros_and_sum_to_one(normalizer: str) -> None:
    from seq2seq.model.normalizers import normalizer as make_normalizer

    normalize = make_normalizer(normalizer)
    gen = torch.Generator().manual_seed(3)
    scores = (4 * torch.randn(6, 7, 12, generator=gen)).requires_grad_()
    mask = torch.arange(12) < torch.randint(1, 13, (6, 1, 1), generator=gen)
    weights = normalize(scores, mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 7))
    assert torch.all(weights[~mask.expand_as(weights)] == 0)  # masks exact
    real_zeros = (weights == 0) & mask
    assert real_zeros.sum() > 0  # sparse by construction: real positions at exactly 0
    assert torch.all(weights[:, :, 0][mask[:, :, 0].expand(6, 7) & (mask.sum(-1) == 1)] == 1)
    weights[..., 0].sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.all(
        scores.grad[~mask.expand_as(weights)] == 0
    )


def test_softmax_is_the_default_and_sparse_needs_its_package(monkeypatch) -> None:
    import builtins

    from seq2seq.model.normalizers import masked_softmax, normalizer

    assert make(VARIANTS["bahdanau"]).normalize is masked_softmax
    real_import = builtins.__import__

    def no_entmax(name, *args, **kwargs):
        if name == "entmax":
            raise ImportError("No module named 'entmax'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_entmax)
    with pytest.raises(Seq2SeqError, match=r"pip install -e '\.\[sparse\]'"):
        normalizer("sparsemax")


def test_coverage_enters_the_score() -> None:
    attention = make(VARIANTS["bahdanau-coverage"])
    query, memory, mask = inputs((3, QUERY))
    keys, values = attention.precompute(memory)
    _, fresh = attention(query, keys, values, mask, coverage=torch.zeros(3, 5))
    _, plain = attention(query, keys, values, mask)
    torch.testing.assert_close(fresh, plain)  # no coverage yet is zero coverage
    covered = torch.zeros(3, 5)
    covered[:, 0] = 3.0
    _, later = attention(query, keys, values, mask, coverage=covered)
    assert not torch.allclose(later[0], fresh[0])
    assert torch.all(later.masked_select(~mask[:, None]) == 0)


@pytest.mark.parametrize(
    ("cfg", "words"),
    [
        (BahdanauConfig(), "bahdanau"),
        (BahdanauConfig(coverage=True, normalizer="entmax15"), "bahdanau (coverage, entmax15)"),
        (BahdanauConfig(conditional=True), "bahdanau (conditional GRU)"),
        (LuongConfig(), "luong (general, scaled)"),
        (LuongConfig(score="concat", input_feed=False), "luong (concat, no input feeding)"),
        (LocalPConfig(window=4), "local_p (general, scaled, window 4)"),
        (MultiHeadConfig(heads=4), "multihead (4 heads)"),
        # a run folder written before the scaled default reads as unscaled (upgrade_saved_config)
        (
            upgrade_saved_config(OmegaConf.create(OLD_LUONG))["model"]["attention"],
            "luong (general)",
        ),
    ],
)
def test_logs_and_cards_describe_the_attention(cfg, words: str) -> None:
    assert describe_attention(cfg) == words


def test_an_old_run_keeps_its_unscaled_luong_score() -> None:
    old = upgrade_saved_config(OmegaConf.create(OLD_LUONG))
    model = build_model(old.model, 20, 20)
    assert model.decoder.attention.scale == 1.0
    today = build_model(OmegaConf.structured(ModelConfig(attention=LuongConfig())), 20, 20)
    assert today.decoder.attention.scale == pytest.approx(512**-0.5)


def test_a_saved_scaled_dot_score_is_read_as_a_scaled_dot() -> None:
    """``score=scaled_dot``, an old spelling: refused on a command line, read from a saved run."""
    saved = {**OLD_LUONG, "model": {**OLD_LUONG["model"], "attention": {"name": "luong"}}}
    saved["model"]["attention"]["score"] = "scaled_dot"
    attention = upgrade_saved_config(OmegaConf.create(saved)).model.attention
    assert (attention.score, attention.scale) == ("dot", True)
    with pytest.raises(Seq2SeqError, match="scaled_dot"):
        check_command_line("config", ["model/attention=luong", "model.attention.score=scaled_dot"])
