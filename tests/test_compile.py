"""The compiled search step (decoding's compile=true) finds what eager does; train.compile, which
trained slower on a GPU and no faster on the CPU, is refused where given and dropped from a saved
run's config.

Tolerance: 1e-4 on the search scores (compiled kernels fuse and reorder float operations); the
same tokens.
"""

from __future__ import annotations

import copy

import pytest
from model_helpers import SETUPS, HandBatch, assert_same, tiny_model
from omegaconf import OmegaConf
from torch._dynamo.utils import counters

from seq2seq.commands.keys import check_command_line
from seq2seq.config import DecodeConfig
from seq2seq.decoding.search import beam_search, greedy_search
from seq2seq.errors import Seq2SeqError
from seq2seq.model import Seq2Seq
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.migrate import upgrade_saved_config


def searched(model: Seq2Seq) -> list[list]:
    model.eval()
    batch = HandBatch(seed=3)
    cfg = DecodeConfig(beam_size=3, alpha=0.6, nbest=3, max_len_a=1.0, max_len_b=4)
    greedy = greedy_search(model, batch.src, batch.src_lengths, cfg)
    return [[h] for h in greedy] + beam_search(model, batch.src, batch.src_lengths, cfg)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bahdanau", "luong-feed", "multihead"])
def test_compiled_steps_equal_eager(name: str) -> None:
    eager = tiny_model(**SETUPS[name])
    compiled = copy.deepcopy(eager)
    Engine.create("cpu").compile(compiled)
    counters.clear()
    got_all, want_all = searched(compiled), searched(eager)
    assert counters["stats"]["unique_graphs"] > 0  # the compiled path ran
    for got, want in zip(got_all, want_all, strict=True):
        for a, b in zip(got, want, strict=True):
            assert_same(a, b)


@pytest.mark.parametrize("value", ["true", "false"])
def test_train_compile_is_refused_with_what_to_use(value: str) -> None:
    with pytest.raises(Seq2SeqError, match=r"train.compile was removed: .*train.cuda_graphs"):
        check_command_line("config", [f"train.compile={value}"])


@pytest.mark.parametrize("value", [True, False])
def test_a_saved_config_with_train_compile_loads_without_it(value: bool) -> None:
    saved = OmegaConf.create(
        {"model": {"attention": {"name": "bahdanau"}}, "data": {}, "train": {}}
    )
    saved.train.compile = value
    assert "compile" not in upgrade_saved_config(saved).train
