"""ONNX graphs of every attention of the registry, and the torch-free search over them: the
graphs give the torch model's numbers at other batch sizes and source lengths than traced, and
the lite search (numpy) gives the torch search's hypotheses, scores and attention."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest
import torch
from model_helpers import SETUPS, tiny_model
from seq2seq_lite.release import Graphs, read_spec
from seq2seq_lite.search import beam, greedy

from seq2seq.config import DecodeConfig
from seq2seq.decoding.beam import beam_search
from seq2seq.decoding.search import greedy_search
from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import ATTENTION_CONFIGS
from seq2seq.runtime.onnx_export import export_graphs, require_exporter

pytestmark = pytest.mark.slow

# each registry name with its defaults (tiny), and the flows and options the names leave out
SETTINGS = {
    name: {"size": 8} | ({"heads": 2} if name == "multihead" else {}) for name in ATTENTION_CONFIGS
}
EXTRA = (
    "conditional-coverage",
    "luong-nofeed",
    "bahdanau-sparsemax",
    "luong-entmax15",
    "luong-tied",
    "conditional-stacked",  # three decoder layers: the state gains ``lower``
    "luong-nofeed-stacked",
)


def _model(setup: str):
    if setup in ATTENTION_CONFIGS:
        return tiny_model(attention=ATTENTION_CONFIGS[setup](**SETTINGS[setup]))
    return tiny_model(**SETUPS[setup])


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three sentences of 7, 4 and 2 pieces (EOS included): other sizes than the trace's."""
    src = torch.tensor([[4, 9, 7, 12, 5, 11, 3], [6, 8, 13, 3, 0, 0, 0], [10, 3, 0, 0, 0, 0, 0]])
    return src, (src != 0).sum(1)


@pytest.fixture(scope="module", params=[*ATTENTION_CONFIGS, *EXTRA])
def exported(request, tmp_path_factory):
    model = _model(request.param)
    release = tmp_path_factory.mktemp("release")
    export_graphs(model, release / "onnx", DecodeConfig(), {})
    return request.param, model, release


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_the_graphs_compute_the_torch_models_numbers(exported, variant) -> None:
    name, model, release = exported
    graphs = Graphs(release, read_spec(release), variant, threads=1)
    src, lengths = _batch()
    with torch.no_grad():
        enc = model.encode(src, lengths)  # the packed encoder: what training and search run
        state = model.decoder.init_state(enc)
        memory, lite_state = graphs.encode(src.numpy())
        prev = torch.full((3,), 2)
        tolerance = 1e-5 if variant == "fp32" else 0.15  # int8 weights: close, not equal
        for _ in range(4):
            log_probs, state, weights = model.decoder.step(prev, state, enc)
            lite = graphs.step(prev.numpy(), lite_state, memory)
            lite_log_probs, lite_state, lite_weights = lite
            assert np.abs(lite_log_probs - log_probs.numpy()).max() < tolerance * 10, name
            assert np.abs(lite_weights - weights.numpy()).max() < tolerance, name
            for field, value in lite_state.items():
                expected = getattr(state, field).numpy()
                assert np.abs(value.astype(np.float64) - expected).max() < tolerance * 10, field
            prev = log_probs.argmax(-1)  # the torch model's choice for both


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_lite_search_finds_the_torch_searchs_hypotheses(exported, beam_size) -> None:
    name, model, release = exported
    graphs = Graphs(release, read_spec(release), "fp32", threads=1)
    src, lengths = _batch()
    cfg = DecodeConfig(beam_size=beam_size, nbest=beam_size, max_len_a=1.0, max_len_b=4)
    settings = {
        k: getattr(cfg, k) for k in ("beam_size", "nbest", "alpha", "max_len_a", "max_len_b")
    }
    if beam_size == 1:
        expected = [[h] for h in greedy_search(model, src, lengths, cfg)]
        found = [[h] for h in greedy(graphs, src.numpy(), lengths.numpy(), settings)]
    else:
        expected = beam_search(model, src, lengths, cfg)
        found = beam(graphs, src.numpy(), lengths.numpy(), settings)
    for want, got in zip(expected, found, strict=True):
        assert [h.tokens for h in got] == [h.tokens for h in want], name
        for a, b in zip(want, got, strict=True):
            assert abs(a.score - b.score) < 1e-4, name
            assert np.abs(a.attention.numpy() - b.attention).max() < 1e-5, name


def test_a_missing_exporter_is_named_in_one_line(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # import onnxscript fails
    with pytest.raises(Seq2SeqError, match=r"pip install -e '\.\[onnx\]'"):
        require_exporter()


def test_writing_the_graphs_says_what_it_does(tmp_path, caplog) -> None:
    """The exporter's and the quantizer's chatter (an INFO line per optimisation pass, advice
    on pre-processing images) stays out of the command's output: a line before, one after."""
    with caplog.at_level(logging.DEBUG):
        export_graphs(_model("bahdanau"), tmp_path / "onnx", DecodeConfig(), {"attention": "x"})
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [
        "writing the ONNX graphs of x (encoder, decoder step; fp32, int8)",  # the long part
        f"wrote the ONNX graphs (fp32, int8) of x into {tmp_path / 'onnx'}",
    ]
