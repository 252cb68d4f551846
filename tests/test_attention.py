"""Attention variants: masking, normalisation, documented shapes, keys projected once per batch."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from seq2seq.config import DecodeConfig
from seq2seq.config_rules import check_config
from seq2seq.decoding.search import greedy_search
from seq2seq.errors import Seq2SeqError
from seq2seq.model import build_model
from seq2seq.model.attention import LuongAttention, MultiHeadAttention
from seq2seq.model.config import BahdanauConfig, LuongConfig, ModelConfig, MultiHeadConfig
from seq2seq.model.registry import build_attention

QUERY, MEMORY = 6, 10
LENGTHS = torch.tensor([5, 3, 1])

VARIANTS = {
    "bahdanau": BahdanauConfig(size=8),
    "luong-dot": LuongConfig(size=8, score="dot"),
    "luong-general": LuongConfig(size=8, score="general"),
    "luong-concat": LuongConfig(size=8, score="concat"),
    "luong-scaled_dot": LuongConfig(size=8, score="scaled_dot"),
    "multihead": MultiHeadConfig(size=8, heads=2),
}


def make(cfg, query_size: int = QUERY, memory_size: int = MEMORY):
    torch.manual_seed(0)
    return build_attention(cfg, query_size, memory_size)


def inputs(query_shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    memory = torch.randn(3, 5, MEMORY, generator=gen)  # [B, S, M]
    mask = torch.arange(5) < LENGTHS[:, None]  # [B, S]
    return torch.randn(*query_shape, generator=gen), memory, mask


@pytest.mark.parametrize("name", VARIANTS)
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
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, attention.heads, 4))
    for t in range(4):
        step_context, step_weights = attention(query[:, t], keys, values, mask)
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


def test_luong_dot_without_projection_when_sizes_match() -> None:
    attention = make(LuongConfig(score="dot"), query_size=MEMORY)
    query, memory, mask = inputs((3, MEMORY))
    keys, values = attention.precompute(memory)
    assert attention.key_layer is None and keys is memory
    _, weights = attention(query, keys, values, mask)
    scores = torch.einsum("bq,bsq->bs", query, memory).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(weights[:, 0], scores.softmax(-1))


def test_config_reaches_constructor() -> None:
    assert make(LuongConfig(score="scaled_dot")).scale == pytest.approx(QUERY**-0.5)
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
    attention.register_forward_hook(count("steps"))
    src = torch.randint(4, 20, (2, 6))
    greedy_search(model, src, torch.tensor([6, 6]), DecodeConfig(max_len_a=0.0, max_len_b=7))
    assert calls["steps"] >= 2  # several decoder steps ran ...
    assert calls["keys"] == 1  # ... on keys projected once


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        (["model.attention.score=dot"], True),
        (["model.attention.score=scaled_dot"], True),
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
