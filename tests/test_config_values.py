"""Values a command's schema types allow but that cannot work, refused in one line by
commands/rules.py before the command starts; the defaults pass."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from run_helpers import command

from seq2seq.commands.configs import (
    SCHEMAS,
    AlignConfig,
    AverageConfig,
    BacktranslateConfig,
    EvaluateConfig,
    ExportConfig,
    ScoreConfig,
    TranslateConfig,
)
from seq2seq.commands.rules import FILES_READ, TRAINING_FILES_READ, check_config, check_files
from seq2seq.errors import Seq2SeqError
from seq2seq.serving.settings import ServeConfig


def _config(schema: type, values: dict[str, Any]) -> Any:
    """``schema``'s config with ``values``, each key it needs given (run_dir=x, ...)."""
    cfg = OmegaConf.structured(schema)
    return OmegaConf.merge(cfg, {key: "x" for key in OmegaConf.missing_keys(cfg)}, values)


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
        (AlignConfig, {"input": "p.txt", "output": "./p.txt"}, "output=./p.txt is also input="),
        (AlignConfig, {"src_file": "a", "tgt_file": "b", "weights": "b"}, "weights=b is also tgt"),
        (AlignConfig, {"input": "p", "output": "o", "weights": "o"}, "weights=o is also output="),
        (AlignConfig, {"input": "p", "symmetrize": "union"}, "symmetrize=union combines two"),
        (ScoreConfig, {"output": "x"}, "output=x is also src_file="),
        (AlignConfig, {"input": "p", "weights": "/"}, "weights=/ is a folder: give a file's name"),
        (AlignConfig, {"input": "p", "weights": "x/best.pt"}, "weights=x/best.pt would overwrite"),
        (AlignConfig, {"input": "p", "output": "./x/tensorboard/a"}, "output=./x/tensorboard/a wo"),
        (AlignConfig, {"input": "p", "output": "x/config.yaml"}, "output=x/config.yaml would ov"),
        (ScoreConfig, {"batch_tokens": 0}, "batch_tokens=0 must be positive"),
        (AverageConfig, {"n": 0}, "n=0 must be positive"),
        (BacktranslateConfig, {"ratios": []}, r"ratios=\[\] must be positive"),
        (BacktranslateConfig, {"ratios": [1.0, -2.0]}, r"ratios=\[1.0, -2.0\] must be positive"),
        (ExportConfig, {"browser": True}, "browser=true runs the ONNX graphs in the page"),
        (ServeConfig, {"batch_wait_ms": -1.0}, "batch_wait_ms=-1.0 must not be negative"),
        (ServeConfig, {"port": 99999}, "port=99999 must be at most 65535"),
        (ServeConfig, {"max_constraints": -1}, "max_constraints=-1 must not be negative"),
        (ServeConfig, {"beam_size": 12}, "beam_size=12 is above max_beam=10"),
        (ServeConfig, {"nbest": 6}, "nbest=6 needs at least as many beams: add beam_size=6"),
        (ServeConfig, {"compare_with": ["a"], "ensemble": ["b"]}, "compare_with= serves each"),
        (ServeConfig, {"backend": "onnx", "precision": "bf16"}, "backend=onnx serves the fp32"),
        (ServeConfig, {"backend": "onnx", "device": "cuda"}, "backend=onnx runs on the CPU"),
        (ServeConfig, {"backend": "onnx", "compile": True}, "backend=onnx has no compile="),
        (ServeConfig, {"backend": "onnx", "checkpoint": "last"}, "backend=onnx serves a release"),
        (ServeConfig, {"backend": "onnx", "ensemble": ["b"]}, "backend=onnx has no ensemble="),
        (EvaluateConfig, {"nbest": 6}, "nbest=6 needs at least as many beams"),
        (EvaluateConfig, {"sampling": True, "coverage_penalty": 0.2}, "coverage_penalty reranks"),
        (EvaluateConfig, {"terms": "t.tsv", "beam_size": 1}, r"the glossary's terms \(terms=t"),
        (ServeConfig, {"terms": "t.tsv", "beam_size": 1}, r"the glossary's terms \(terms=t"),
        (ServeConfig, {"alpha": float("nan")}, "alpha=nan must be a finite number"),
        (ServeConfig, {"max_len_a": float("inf")}, "max_len_a=inf must be a finite number"),
        (EvaluateConfig, {"min_len_a": float("nan")}, "min_len_a=nan must be a finite number"),
        (
            ServeConfig,
            {"request_timeout_s": float("nan")},
            "request_timeout_s=nan must be a finite",
        ),
        (EvaluateConfig, {"ensemble": ["b"], "checkpoint": "a/x.pt"}, "checkpoint=a/x.pt is one"),
        (ScoreConfig, {"ensemble": ["b"], "checkpoint": "x.pt"}, "checkpoint=x.pt is one model"),
        (TranslateConfig, {"sampling": True, "seed": 2**64}, "seed=18446744073709551616 must be"),
    ],
)
def test_a_value_that_cannot_work_is_refused_in_one_line(schema, values, message) -> None:
    with pytest.raises(Seq2SeqError, match=f"^{message}") as error:
        check_config(_config(schema, values))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.keep_checkpoints=-1", "train.keep_checkpoints=-1 must not be negative"),
        ("train.seed=-1", "train.seed=-1 must not be negative"),
        (
            "train.seed=9223372036854775808",
            r"train.seed=9223372036854775808 must be below 2\*\*63 \(9,2.*\)",
        ),
        ("train.scheduler.factor=2", "train.scheduler.factor=2.0 must be above 0 and below 1"),
        ("train.scheduler.patience=-1", "train.scheduler.patience=-1 must not be negative"),
        ("train.betas=[0.9,1.5]", r"train.betas=\[0.9, 1.5\] must each be at least 0 and below 1"),
        ("log.attention_samples=-2", "log.attention_samples=-2 must not be negative"),
    ],
)
def test_a_training_value_out_of_its_range_is_refused(override: str, message: str) -> None:
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose("config", ["experiment=smoke", override])
    with pytest.raises(Seq2SeqError, match=f"^{message}$"):
        check_config(cfg)


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        (EvaluateConfig, {"input": "x.de", "reference": "x.en"}),
        (AlignConfig, {"input": "p.txt", "threshold": 1.0}),
        (AlignConfig, {"src_file": "a", "tgt_file": "b"}),
        (AlignConfig, {"input": "p.txt", "output": "p.links", "weights": "p.json"}),
        (AverageConfig, {}),
        (EvaluateConfig, {"ensemble": ["b"], "checkpoint": "averaged"}),
        (BacktranslateConfig, {"ratios": [0.5, 3]}),
        (ExportConfig, {"browser": True, "onnx": True}),
        (ServeConfig, {"beam_size": 10, "no_repeat_ngram": 3, "nbest": 2}),
        (ServeConfig, {"backend": "onnx", "precision": "int8", "compare_with": ["a"]}),
        (ServeConfig, {"precision": "bf16", "device": "cuda", "compile": True}),  # torch's
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


@pytest.mark.parametrize(
    ("command", "overrides", "message"),
    [
        (
            "config",
            ["data=tsv"],
            "give data.file=<a tab-separated file: .tsv, .gz or .zip> data.columns=[",
        ),
        ("config", ["data=custom", "data.train=x"], "give data.valid=<prefix of the validation"),
        ("config", ["data=hf"], "give data.path=<a dataset on the hub"),
        ("serve", [], "give run_dir=<a run or release folder>$"),  # $: the whole line
        ("export", [], "give run_dir=<a training run folder> out=<a new folder for the release>$"),
        ("backtranslate", ["run_dir=x"], "give out=<a folder for the synthetic corpus> mono=<a"),
        ("distill", ["run_dir=x"], "give out=<a folder for the distilled corpus>$"),
        ("score", ["run_dir=x"], "give src_file=<sources, one sentence a line> tgt_file=<their"),
        ("average", [], "give run_dir=<a run trained with train.keep_checkpoints=N>$"),
    ],
)
def test_a_key_without_a_default_is_asked_for_in_one_line(command, overrides, message) -> None:
    """Before any work (a traceback of the reader, before): each key the command needs, in its
    schema's order, with what to give."""
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose(command, overrides)
    whole = message.endswith("$")
    pattern = "^" + re.escape(message.removesuffix("$")) + ("$" if whole else "")
    with pytest.raises(Seq2SeqError, match=pattern):
        check_config(cfg)


def test_a_rerun_from_a_saved_config_meets_its_commands_rules(tmp_path) -> None:
    """A run's config.yaml is saved resolved, without its schema (``--config-path <run>
    --config-name config``): the command's schema picks the rules."""
    with initialize_config_module("seq2seq.configs", version_base=None):
        saved = OmegaConf.create(OmegaConf.to_container(compose("config", ["experiment=smoke"])))
    assert OmegaConf.get_type(saved) is dict
    check_config(saved, SCHEMAS["config"])
    for values, message in (
        ({"precision": "int8"}, "precision=int8 is for inference"),
        ({"data": {"tgt_lang": "de"}}, "data.src_lang and data.tgt_lang are both 'de'"),
        ({"data": {"valid": None, "valid_size": 0}}, "data.valid_size must be positive where"),
    ):
        with pytest.raises(Seq2SeqError, match=f"^{re.escape(message)}"):
            check_config(OmegaConf.merge(saved, values), SCHEMAS["config"])
    configs = Path(__file__).resolve().parents[1] / "configs"
    assert set(SCHEMAS) == {p.stem for p in configs.glob("*.yaml")}  # every command's


def test_an_interpolation_to_nothing_is_one_line() -> None:
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose("export", ["out=${run_dir}/release"])
    with pytest.raises(Seq2SeqError, match="^out: MissingMandatoryValue") as error:
        check_config(cfg)
    assert "\n" not in str(error.value)
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose("evaluate", ["run_dir=x", "ensemble=[a,???]"])
    with pytest.raises(Seq2SeqError, match=r"^give ensemble=\.\.\.$"):  # the list, not its item
        check_config(cfg)


def test_align_refuses_to_write_over_its_input_by_another_name(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("a ||| b\n")
    (tmp_path / "link.txt").symlink_to(pairs)
    values = {"input": str(pairs), "output": str(tmp_path / "link.txt")}
    with pytest.raises(Seq2SeqError, match="is also input="):
        check_config(_config(AlignConfig, values))


def test_average_never_writes_over_a_file(tmp_path: Path) -> None:
    (tmp_path / "last.pt").write_bytes(b"x")
    with pytest.raises(Seq2SeqError, match="^out=.*last.pt exists: give a new file's name"):
        check_config(_config(AverageConfig, {"out": str(tmp_path / "last.pt")}))
    check_config(_config(AverageConfig, {"out": str(tmp_path / "new.pt")}))


@pytest.mark.parametrize("schema", [EvaluateConfig, TranslateConfig, AlignConfig, ServeConfig])
def test_a_file_a_command_reads_is_there_before_it_starts(schema, tmp_path, monkeypatch):
    """Every key of FILES_READ in the schema: a missing file or a folder refused by its key, in
    one line; files that are there pass."""
    monkeypatch.chdir(tmp_path)
    keys = [k for k in FILES_READ if k in OmegaConf.structured(schema)]
    assert keys
    check_files(_config(schema, {}))  # none given
    for key in keys:
        (tmp_path / key).mkdir()
        with pytest.raises(Seq2SeqError, match=f"^{key}=missing does not exist$"):
            check_files(_config(schema, {key: "missing"}))
        with pytest.raises(Seq2SeqError, match=f"^{key}={key} is a folder, not a file$"):
            check_files(_config(schema, {key: key}))
        (tmp_path / key).rmdir()
        (tmp_path / key).write_text("x\n")
    check_files(_config(schema, {k: k for k in keys}))
    os.mkfifo(tmp_path / "pipe")  # what a shell's <(...) gives
    with pytest.raises(Seq2SeqError, match=f"^{keys[0]}=pipe is a pipe or a device, not a file"):
        check_files(_config(schema, {keys[0]: "pipe"}))


def test_a_file_training_reads_is_there_before_the_tokenizers_train(tmp_path, monkeypatch):
    """The links for guided alignment and the gold set of the validation probe, refused by
    their keys before any work (else after the tokenizers and the encoding, in a run folder)."""
    monkeypatch.chdir(tmp_path)
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose("config", ["experiment=smoke"])
    check_files(cfg)  # none given
    here = re.escape(f"; relative paths are read from the current folder, {os.getcwd()}")
    for key in TRAINING_FILES_READ:  # often a recipe's path (../shared/...): where it looked
        given = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{key}=missing"]))
        with pytest.raises(Seq2SeqError, match=f"^{key}=missing does not exist{here}$"):
            check_files(given)
        absolute = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{key}={tmp_path}/missing"]))
        with pytest.raises(Seq2SeqError, match=f"^{key}=.*/missing does not exist$"):
            check_files(absolute)
    (tmp_path / "there").write_text("x\n")
    check_files(
        OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{k}=there" for k in TRAINING_FILES_READ]))
    )


@pytest.mark.parametrize(
    ("schema", "values", "warned"),
    [
        (TranslateConfig, {"temperature": 0.5}, "temperature=0.5 has no effect: shapes sampling"),
        (EvaluateConfig, {"top_k": 10, "seed": 3}, "top_k=10 has no effect"),
        (TranslateConfig, {"sampling": True, "beam_size": 7}, "beam_size=7 has no effect"),
        (BacktranslateConfig, {"nbest": 3, "beam_size": 5}, "nbest=3 has no effect"),
        (EvaluateConfig, {"coverage_penalty": 0.2, "beam_size": 1}, "coverage_penalty=0.2 has"),
        (AlignConfig, {"input": "p", "threshold": 0.5}, "threshold=0.5 has no effect: it is me"),
        (AlignConfig, {"input": "p", "reverse_shift": 1}, "reverse_shift=1 has no effect: add "),
        (AlignConfig, {"input": "p", "gold_one_based": False}, "gold_one_based=False has no"),
        (EvaluateConfig, {"input": "i", "reference": "r", "split": "val"}, "split=val has no"),
        (BacktranslateConfig, {"ratios": [7.5]}, "ratios=[7.5] has no effect: it mixes in par"),
    ],
)
def test_a_setting_that_does_nothing_is_warned_of(schema, values, warned, caplog) -> None:
    check_config(_config(schema, values))
    assert warned in caplog.text


def test_settings_that_act_are_not_warned_of(caplog) -> None:
    check_config(_config(TranslateConfig, {"sampling": True, "temperature": 0.5, "seed": 2}))
    check_config(_config(TranslateConfig, {"beam_size": 7}))
    check_config(_config(EvaluateConfig, {"beam_size": 2, "coverage_penalty": 0.2}))
    check_config(_config(AlignConfig, {"input": "p", "method": "threshold", "threshold": 0.5}))
    check_config(_config(EvaluateConfig, {"input": "i", "reference": "r"}))
    check_config(_config(EvaluateConfig, {"split": "val"}))
    check_config(_config(BacktranslateConfig, {"ratios": [7.5], "parallel": "p"}))
    check_config(_config(BacktranslateConfig, {}))
    assert "has no effect" not in caplog.text


def test_heads_that_do_not_divide_the_attention_size_are_refused_before_any_work(
    tmp_path: Path,
) -> None:
    """A rule, not the model's constructor: nothing is loaded and no run folder is left (a
    left folder made evaluate report the model's error instead of 'no checkpoint')."""
    with initialize_config_module("seq2seq.configs", version_base=None):
        cfg = compose("config", ["model/attention=multihead", "model.attention.heads=3"])
    message = "model.attention.size=512 is not divisible by model.attention.heads=3"
    with pytest.raises(Seq2SeqError, match=f"^{message}$"):
        check_config(cfg)
    folder = tmp_path / "mistake"
    args = ["model/attention=multihead", "model.attention.heads=3", f"hydra.run.dir={folder}"]
    done = command("train", *args, "data.source=/nonexistent")
    assert done.returncode != 0 and message in done.stderr
    assert not folder.exists()
