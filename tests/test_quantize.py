"""int8 inference: the linear layers and the encoder's GRU become dynamically quantized modules,
the model's log-probabilities stay close to fp32's, search runs, and int8 is refused where it
cannot run (training, a GPU)."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from test_search import ATTENTIONS, peaky_model, settings, sources
from torch.ao.nn.quantized import dynamic as nnqd

from seq2seq.config import Precision
from seq2seq.config_rules import check_config
from seq2seq.decoding.search import beam_search, greedy_search
from seq2seq.errors import Seq2SeqError
from seq2seq.model import build_model
from seq2seq.model.config import BahdanauConfig, ModelConfig
from seq2seq.model.linear import Linear
from seq2seq.model.quantize import int8_available, quantize_int8
from seq2seq.runtime.engine import Engine, check_precision

pytestmark = pytest.mark.skipif(not int8_available(), reason="this torch has no quantized engine")


def log_probs(model: torch.nn.Module) -> torch.Tensor:
    src, lengths = sources()
    tgt_in = torch.randint(4, 25, (src.size(0), 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        features, _ = model.features(src, lengths, tgt_in)
        return torch.log_softmax(model.decoder.output_layer(features), -1)  # [B, T, V]


@pytest.mark.parametrize("name", list(ATTENTIONS))
def test_int8_converts_linears_and_the_encoder_gru_and_stays_close(name: str) -> None:
    model = peaky_model(name)
    before = log_probs(model)
    quantize_int8(model)
    kinds = {type(m) for m in model.modules()}
    assert Linear not in kinds and torch.nn.Linear not in kinds
    assert nnqd.Linear in kinds and isinstance(model.encoder.rnn, nnqd.GRU)
    assert type(model.decoder.flow.rnn) is torch.nn.GRU  # its recurrence reads the parameters
    after = log_probs(model)
    assert not torch.equal(before, after)  # quantized, not a no-op
    # the same distributions up to int8's rounding: a small share of the probability moves
    # (weights scaled up threefold make this model's outputs unusually sensitive)
    moved = (before.exp() - after.exp()).abs().sum(-1) / 2  # total variation, 0 to 1
    assert moved.max() < 0.25 and moved.mean() < 0.1
    src, lengths = sources()
    with torch.no_grad():
        greedy = greedy_search(model, src, lengths, settings())
        beams = beam_search(model, src, lengths, settings(beam_size=3, nbest=2))
    assert len(greedy) == len(beams) == src.size(0)
    assert all(len(nbest) == 2 for nbest in beams)


def test_the_engine_converts_a_model_for_int8_inference() -> None:
    engine = Engine.create("cpu", "int8")
    model = build_model(
        OmegaConf.structured(ModelConfig(8, 8, attention=BahdanauConfig(size=8))), 20, 20
    )
    model = engine.for_inference(model.eval())
    assert any(isinstance(m, nnqd.Linear) for m in model.modules())


def test_int8_is_refused_where_it_cannot_run() -> None:
    with pytest.raises(Seq2SeqError, match="int8 .*CPU"):
        check_precision(Precision.int8, torch.device("cuda"))
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose("config", ["experiment=smoke", "precision=int8"])
    with pytest.raises(Seq2SeqError, match="int8 is for inference"):
        check_config(cfg)
