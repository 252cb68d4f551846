"""What the model and search tests share: tiny models of every attention setup, a hand-built
batch, search settings, and comparisons of hypotheses and updates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from seq2seq.config import DecodeConfig
from seq2seq.data.batching import Batch
from seq2seq.decoding.search import Hypothesis
from seq2seq.model import Seq2Seq, build_model
from seq2seq.model.config import (
    BahdanauConfig,
    LocalMConfig,
    LocalPConfig,
    LuongConfig,
    ModelConfig,
    MultiHeadConfig,
)
from seq2seq.vocab import BOS, EOS

SRC_VOCAB, TGT_VOCAB = 20, 25
A, B = 1.0, 4  # max_len = src_len + 4

SETUPS = {
    "bahdanau": dict(attention=BahdanauConfig(size=10)),
    "luong-feed": dict(attention=LuongConfig(size=10, input_feed=True)),
    "luong-nofeed": dict(attention=LuongConfig(size=10, input_feed=False)),
    "luong-concat": dict(attention=LuongConfig(size=10, score="concat")),
    "multihead": dict(attention=MultiHeadConfig(size=8, heads=2)),
    "multihead-nofeed": dict(attention=MultiHeadConfig(size=8, heads=2, input_feed=False)),
    "local_m": dict(attention=LocalMConfig(size=10, window=2)),
    "local_p": dict(attention=LocalPConfig(size=10, window=2)),
    "local_p-nofeed": dict(attention=LocalPConfig(size=10, window=2, input_feed=False)),
    "bahdanau-coverage": dict(attention=BahdanauConfig(size=10, coverage=True)),
    "bahdanau-conditional": dict(attention=BahdanauConfig(size=10, conditional=True)),
    "conditional-coverage": dict(
        attention=BahdanauConfig(size=10, conditional=True, coverage=True)
    ),
    "bahdanau-sparsemax": dict(attention=BahdanauConfig(size=10, normalizer="sparsemax")),
    "luong-entmax15": dict(attention=LuongConfig(size=10, normalizer="entmax15")),
    "bahdanau-tied": dict(attention=BahdanauConfig(size=10), tie_embeddings=True),
    "luong-tied": dict(attention=LuongConfig(size=10), tie_embeddings=True),
    # stacked decoder GRUs: attention reads the top layer
    "bahdanau-stacked": dict(attention=BahdanauConfig(size=10), decoder_layers=2),
    "conditional-stacked": dict(
        attention=BahdanauConfig(size=10, conditional=True, coverage=True), decoder_layers=3
    ),
    "luong-stacked": dict(attention=LuongConfig(size=10, input_feed=True), decoder_layers=2),
    "luong-nofeed-stacked": dict(
        attention=LuongConfig(size=10, input_feed=False), decoder_layers=3
    ),
    "multihead-stacked": dict(attention=MultiHeadConfig(size=8, heads=2), decoder_layers=2),
}


def tiny_model(dropout: float = 0.0, **settings) -> Seq2Seq:
    torch.manual_seed(0)
    cfg = ModelConfig(emb_size=8, hidden_size=12, dropout=dropout, **settings)
    return build_model(OmegaConf.structured(cfg), SRC_VOCAB, TGT_VOCAB).eval()


class HandBatch:
    """Hand-built stand-in for seq2seq.data.batching.Batch (same field names)."""

    def __init__(self, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.src_lengths = torch.tensor([6, 3, 5])
        self.src = torch.randint(4, SRC_VOCAB, (3, 6), generator=gen)
        self.src[torch.arange(6) >= self.src_lengths[:, None]] = 0
        tgt_lengths = torch.tensor([4, 7, 2])
        self.tgt_out = torch.randint(4, TGT_VOCAB, (3, 7), generator=gen)
        self.tgt_out[torch.arange(7) >= tgt_lengths[:, None]] = 0
        self.tgt_in = torch.cat([torch.full((3, 1), 2), self.tgt_out[:, :-1]], 1)
        self.tgt_in[self.tgt_out == 0] = 0
        self.ids = torch.arange(3)
        self.ntokens = int(tgt_lengths.sum())


def hand_batch(seed: int, rows: int | None = None) -> Batch:
    """A `Batch` of HandBatch's pairs (rows cut to ``rows``, columns to their longest)."""
    hand = HandBatch(seed)
    rows = rows or hand.src.size(0)
    src_len, tgt_len = (
        int(hand.src_lengths[:rows].max()),
        int((hand.tgt_out[:rows] > 0).sum(1).max()),
    )
    tgt_out = hand.tgt_out[:rows, :tgt_len]
    return Batch(
        hand.src[:rows, :src_len],
        hand.src_lengths[:rows],
        hand.tgt_in[:rows, :tgt_len],
        tgt_out,
        hand.ids[:rows],
        int((tgt_out > 0).sum()),
    )


def loss_of(
    model: Seq2Seq, batch: HandBatch, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(smoothed loss sum, NLL sum) from the model's forward, as the training step calls it."""
    return model(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, smoothing)


ATTENTIONS = {
    "bahdanau": dict(attention=BahdanauConfig(size=10)),
    "luong": dict(attention=LuongConfig(size=10)),
    "luong-nofeed": dict(attention=LuongConfig(size=10, score="dot", input_feed=False)),
    "multihead": dict(attention=MultiHeadConfig(size=8, heads=2)),
    "bahdanau-sparsemax": dict(attention=BahdanauConfig(size=10, normalizer="sparsemax")),
    "local_p": dict(attention=LocalPConfig(size=10, window=2)),
    "bahdanau-coverage": dict(attention=BahdanauConfig(size=10, coverage=True)),
    "bahdanau-conditional": dict(attention=BahdanauConfig(size=10, conditional=True)),
}


def settings(
    beam_size: int = 1,
    alpha: float = 0.6,
    nbest: int = 1,
    a: float = A,
    b: int = B,
    coverage_penalty: float = 0.0,
) -> DecodeConfig:
    """The search settings of a call: ``beam_size`` beams, the ``nbest`` best, max_len a * S + b,
    Wu et al.'s coverage penalty of that beta."""
    return DecodeConfig(
        beam_size=beam_size,
        alpha=alpha,
        nbest=nbest,
        max_len_a=a,
        max_len_b=b,
        coverage_penalty=coverage_penalty,
    )


def peaky_model(name: str) -> Seq2Seq:
    """An untrained model with weights scaled up, so outputs are varied and not all empty."""
    torch.manual_seed(0)
    cfg = ModelConfig(emb_size=16, hidden_size=16, dropout=0.0, **ATTENTIONS[name])
    model = build_model(OmegaConf.structured(cfg), 20, 25).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(3)
    return model


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    lengths = torch.tensor([6, 3, 5, 1, 4])
    src = torch.randint(4, 20, (5, 6), generator=gen)
    src[torch.arange(6) >= lengths[:, None]] = 0
    src[torch.arange(5), lengths - 1] = 3  # EOS
    return src, lengths


def assert_same(a: Hypothesis, b: Hypothesis, exact: bool = False) -> None:
    assert a.tokens == b.tokens
    if exact:
        assert a.score == b.score and torch.equal(a.attention, b.attention)
    else:
        assert a.score == pytest.approx(b.score, abs=1e-4)
        torch.testing.assert_close(a.attention, b.attention)
    assert (a.head_attention is None) == (b.head_attention is None)


def assert_same_update(a: dict, b: dict) -> None:
    """Gradients (after clipping) and parameters (after Adam) agree to float rounding."""
    for kind, tolerance in (("grads", 1e-6), ("params", 1e-6)):
        for name, value in a[kind].items():
            torch.testing.assert_close(value, b[kind][name], atol=tolerance, rtol=1e-4, msg=name)


def forced_log_prob(model: Seq2Seq, src: torch.Tensor, tokens: list[int]) -> float:
    """Sum of the model's log-probabilities of ``tokens`` + EOS after ``src`` (teacher forcing)."""
    target = torch.tensor([*tokens, EOS])
    tgt_in = torch.cat([torch.tensor([BOS]), target[:-1]])
    with torch.no_grad():
        features, _ = model.features(src[None], torch.tensor([len(src)]), tgt_in[None])
        log_probs = torch.log_softmax(model.decoder.output_layer(features[0]), -1)  # [T, V]
    return float(log_probs.gather(1, target[:, None]).sum())


def exported_graphs(model: Seq2Seq, folder: Path):
    """The lite runtime's graphs of ``model``, exported into ``folder`` (needs onnxscript)."""
    pytest.importorskip("onnxscript")
    from seq2seq_lite.release import Graphs, read_spec

    from seq2seq.runtime.onnx_export import export_graphs

    export_graphs(model, folder / "onnx", DecodeConfig(), {})
    return Graphs(folder, read_spec(folder), "fp32", threads=1)
