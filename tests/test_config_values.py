"""Values a command's schema types allow but that cannot work, refused in one line by
commands/rules.py before the command starts; the defaults pass."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from seq2seq.commands.configs import (
    AlignConfig,
    AverageConfig,
    BacktranslateConfig,
    EvaluateConfig,
    ExportConfig,
)
from seq2seq.commands.rules import check_config
from seq2seq.errors import Seq2SeqError
from seq2seq.serving.settings import ServeConfig


def _config(schema: type, values: dict[str, Any]) -> Any:
    return OmegaConf.merge(OmegaConf.structured(schema), values)


@pytest.mark.parametrize(
    ("schema", "values", "message"),
    [
        (EvaluateConfig, {"input": "x.de"}, "input=<source file> and reference=<reference file>"),
        (EvaluateConfig, {"reference": "x.en"}, "input=<source file> and reference="),
        (EvaluateConfig, {"log_attention": -1}, "log_attention=-1 must not be negative"),
        (AlignConfig, {}, "give the pairs as input="),
        (AlignConfig, {"input": "p.txt", "src_file": "a"}, "give the pairs as input="),
        (AlignConfig, {"src_file": "a"}, "give the pairs as input="),
        (AlignConfig, {"input": "p.txt", "threshold": 0.0}, "threshold=0.0 must be above 0 and"),
        (AlignConfig, {"input": "p.txt", "threshold": 1.5}, "threshold=1.5 must be above 0 and"),
        (AverageConfig, {"n": 0}, "n=0 must be positive"),
        (BacktranslateConfig, {"ratios": []}, r"ratios=\[\] must be positive"),
        (BacktranslateConfig, {"ratios": [1.0, -2.0]}, r"ratios=\[1.0, -2.0\] must be positive"),
        (ExportConfig, {"browser": True}, "browser=true runs the ONNX graphs in the page"),
        (ServeConfig, {"batch_wait_ms": -1.0}, "batch_wait_ms=-1.0 must not be negative"),
        (ServeConfig, {"beam_size": 12}, "beam_size=12 is above max_beam=10"),
        (ServeConfig, {"nbest": 6}, "nbest=6 needs at least as many beams: add beam_size=6"),
        (EvaluateConfig, {"nbest": 6}, "nbest=6 needs at least as many beams"),
        (EvaluateConfig, {"sampling": True, "coverage_penalty": 0.2}, "coverage_penalty reranks"),
        (EvaluateConfig, {"terms": "t.tsv", "beam_size": 1}, "terms=: "),
    ],
)
def test_a_value_that_cannot_work_is_refused_in_one_line(schema, values, message) -> None:
    with pytest.raises(Seq2SeqError, match=f"^{message}") as error:
        check_config(_config(schema, values))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        (EvaluateConfig, {"input": "x.de", "reference": "x.en"}),
        (AlignConfig, {"input": "p.txt", "threshold": 1.0}),
        (AlignConfig, {"src_file": "a", "tgt_file": "b"}),
        (AverageConfig, {}),
        (BacktranslateConfig, {"ratios": [0.5, 3]}),
        (ExportConfig, {"browser": True, "onnx": True}),
        (ServeConfig, {"beam_size": 10, "no_repeat_ngram": 3, "nbest": 2}),
        (EvaluateConfig, {"sampling": True, "nbest": 6}),  # draws, as many as asked
    ],
)
def test_values_that_work_pass(schema: type, values: dict[str, Any]) -> None:
    check_config(_config(schema, values))


def test_the_rules_are_the_schemas() -> None:
    """A command's rules are found by its config's class: the same keys in another command's
    config (or in an untyped one) meet only the ranges of their names."""
    as_plain = {"input": "x.de", "n": 0}
    check_config(OmegaConf.create(as_plain))
    with pytest.raises(Seq2SeqError, match="^input=<source file> and reference="):
        check_config(_config(EvaluateConfig, {"input": "x.de"}))
    with pytest.raises(Seq2SeqError, match="^n=0 must be positive"):
        check_config(_config(AverageConfig, {"n": 0}))
