"""int8 inference: the linear layers and the encoder's GRU become dynamically quantized modules,
the model's log-probabilities stay close to fp32's, search runs, and int8 is refused where it
cannot run (training, a GPU)."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module
from model_helpers import ATTENTIONS, peaky_model, settings, sources
from omegaconf import OmegaConf
from torch.ao.nn.quantized import dynamic as nnqd

from seq2seq.commands.rules import check_config
from seq2seq.config import Precision
from seq2seq.decoding.search import beam_search, greedy_search
from seq2seq.errors import Seq2SeqError
from seq2seq.model import build_model
from seq2seq.model.config import BahdanauConfig, ModelConfig
from seq2seq.model.linear import Linear
from seq2seq.model.quantize import quantize_int8
from seq2seq.runtime.engine import Engine, check_precision
from seq2seq.runtime.kernels import (
    fastest_int8_engine,
    int8_available,
    int8_engine,
    int8_engines,
    time_int8_engines,
)

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
    model = engine.for_inference(small_model())
    assert any(isinstance(m, nnqd.Linear) for m in model.modules())


def test_int8_is_refused_where_it_cannot_run() -> None:
    with pytest.raises(Seq2SeqError, match="int8 .*CPU"):
        check_precision(Precision.int8, torch.device("cuda"))
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose("config", ["experiment=smoke", "precision=int8"])
    with pytest.raises(Seq2SeqError, match="int8 is for inference"):
        check_config(cfg)


def small_model() -> torch.nn.Module:
    cfg = OmegaConf.structured(ModelConfig(8, 8, attention=BahdanauConfig(size=8)))
    return build_model(cfg, 20, 20).eval()


def test_the_int8_engine_is_timed_on_the_models_shapes_and_changes_nothing() -> None:
    saved = torch.backends.quantized.engine
    seconds = time_int8_engines(peaky_model("bahdanau"), repeats=1)
    assert set(seconds) == set(int8_engines()) and all(s > 0 for s in seconds.values())
    name, timed = fastest_int8_engine(peaky_model("bahdanau"))
    assert name in int8_engines() and torch.backends.quantized.engine == saved
    if len(int8_engines()) > 1:
        assert set(timed) == set(int8_engines())


@pytest.mark.parametrize("name", int8_engines())
def test_every_int8_engine_quantizes_close_to_fp32(name: str) -> None:
    saved = torch.backends.quantized.engine
    try:
        model = peaky_model("bahdanau")
        before = log_probs(model)
        engine = Engine.create("cpu", "int8", int8_engine=name)
        engine.for_inference(model)
        assert engine.choose_int8_engine(model) == name == engine.kernels.int8
        assert torch.backends.quantized.engine == saved  # in force inside engine.compute() only
        after = log_probs(model)
        moved = (before.exp() - after.exp()).abs().sum(-1) / 2
        assert 0 < moved.mean() < 0.1
    finally:
        torch.backends.quantized.engine = saved


def test_auto_chooses_once_for_an_ensemble_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    saved = torch.backends.quantized.engine
    try:
        engine = Engine.create("cpu", "int8")
        with caplog.at_level("INFO", logger="seq2seq.runtime.engine"):
            engine.for_inference(small_model())
            engine.for_inference(small_model())
        lines = [r.getMessage() for r in caplog.records if "int8 engine" in r.getMessage()]
        assert len(lines) == 1
        assert len(int8_engines()) == 1 or "timed on a decoding probe" in lines[0]
    finally:
        torch.backends.quantized.engine = saved


def test_an_int8_engine_this_torch_lacks_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("seq2seq.runtime.kernels.int8_engines", lambda: ["fbgemm"])
    engine = Engine.create("cpu", "int8", int8_engine="onednn")
    with pytest.raises(Seq2SeqError, match="int8_engine=onednn: this torch has fbgemm"):
        engine.for_inference(small_model())
    with pytest.raises(ValueError, match="not in this torch"), int8_engine("qnnpack"):
        pass
