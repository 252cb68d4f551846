"""train.init_from: a new run that starts from a trained one takes its model config, tokenizers
and weights, with a fresh optimizer, schedule, step count and early stopping unless
train.init_optimizer=true; the run folder and the release's card say where it started; a model
that cannot take the weights is refused in one line naming the keys."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from run_helpers import TRAIN_TIMEOUT, cli, composed
from serve_helpers import export

from seq2seq.storage.manifest import write_manifest
from seq2seq.training.warm_start import DEFAULT_ATTENTION

SMOKE_LR = 0.003  # experiment=smoke's train.lr: no Adam step moves a weight by more


def train(run_dir: Path, data: list[str], *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *cli("train"),
            "log.progress=false",
            f"hydra.run.dir={run_dir}",
            *data,
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=TRAIN_TIMEOUT,
    )


@pytest.fixture(scope="module")
def data(smoke_run: Path, multi30k_url: str) -> list[str]:
    """The smoke run's corpus settings, so the new runs read the same data without downloading."""
    cfg = OmegaConf.load(smoke_run / "config.yaml").data
    return [
        "experiment=smoke",
        f"data.source={multi30k_url}",
        f"data.root={cfg.root}",
        f"data.cache_dir={cfg.cache_dir}",
    ]


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def first_step(path: Path) -> float:
    """Adam's step count of the first parameter in a checkpoint: updates this optimizer made."""
    state = torch.load(path, map_location="cpu", weights_only=False)["optimizer"]["state"]
    return float(state[0]["step"])


@pytest.mark.slow
def test_a_run_starts_from_the_weights_with_a_fresh_optimizer(smoke_run, data, tmp_path) -> None:
    run = tmp_path / "continued"
    # a default model (no model keys given): the folder's model is taken, dropout included
    proc = train(run, data[1:], f"train.init_from={smoke_run}", "train.max_steps=1")
    assert proc.returncode == 0, proc.stderr
    assert f"starting from {smoke_run.resolve()}" in proc.stdout + proc.stderr
    saved = OmegaConf.load(run / "config.yaml")
    assert saved.train.init_from == str(smoke_run.resolve())
    assert saved.model == OmegaConf.load(smoke_run / "config.yaml").model
    for name in ("src.model", "tgt.model"):
        assert (run / name).read_bytes() == (smoke_run / name).read_bytes()
    before, after = weights(smoke_run / "best.pt"), weights(run / "last.pt")
    moved = max((after[k] - before[k]).abs().max().item() for k in before)
    assert 0 < moved <= 2 * SMOKE_LR  # one Adam step from the folder's weights
    assert first_step(run / "last.pt") == 1  # a fresh optimizer
    state = torch.load(run / "last.pt", map_location="cpu", weights_only=False)
    assert state["step"] == 1 and state["epoch"] == 0  # the step count and the epochs: fresh
    card = (export(run, tmp_path / "release") / "README.md").read_text()
    assert f"started from | `{smoke_run.resolve()}`" in card


@pytest.mark.slow
def test_init_checkpoint_picks_the_weights(smoke_run, data, tmp_path) -> None:
    """Weights of a checkpoint file given by path (as averaged.pt, last.pt are by name)."""
    state = torch.load(smoke_run / "best.pt", map_location="cpu", weights_only=False)
    state["model"] = {k: v + 1 if v.is_floating_point() else v for k, v in state["model"].items()}
    torch.save(state, tmp_path / "shifted.pt")
    run, given = tmp_path / "picked", f"train.init_checkpoint={tmp_path / 'shifted.pt'}"
    proc = train(run, data, f"train.init_from={smoke_run}", given, "train.max_steps=1")
    assert proc.returncode == 0, proc.stderr
    after = weights(run / "last.pt")
    assert max((after[k] - state["model"][k]).abs().max().item() for k in after) <= 2 * SMOKE_LR
    assert OmegaConf.load(run / "config.yaml").train.init_checkpoint == str(tmp_path / "shifted.pt")
    card = (export(run, tmp_path / "release") / "README.md").read_text()
    assert f"(its {tmp_path / 'shifted.pt'} weights)" in card


@pytest.mark.slow
def test_init_optimizer_keeps_the_optimizer(smoke_run, data, tmp_path) -> None:
    run = tmp_path / "kept"
    overrides = [f"train.init_from={smoke_run}", "train.init_optimizer=true", "train.max_steps=1"]
    proc = train(run, data, *overrides)
    assert proc.returncode == 0, proc.stderr
    assert first_step(run / "last.pt") == first_step(smoke_run / "last.pt") + 1


@pytest.mark.slow
def test_what_cannot_start_from_the_folder_is_refused_in_one_line(smoke_run, data, tmp_path):
    release = export(smoke_run, tmp_path / "release")
    for overrides, says in (
        (["model/attention=multihead"], "model.attention.name (multihead here, bahdanau there)"),
        (["model.hidden_size=32"], "model.hidden_size (32 here, 64 there)"),
        (["train.init_optimizer=true"], "a release keeps none"),
    ):
        folder = release if "init_optimizer" in overrides[0] else smoke_run
        proc = train(tmp_path / "refused", data, f"train.init_from={folder}", *overrides)
        assert proc.returncode == 1 and says in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
    for folder, checkpoint, says in (
        (smoke_run, tmp_path / "none.pt", "none.pt does not exist"),
        (release, "last", "is a release: it holds one model"),
    ):
        overrides = [f"train.init_from={folder}", f"train.init_checkpoint={checkpoint}"]
        proc = train(tmp_path / "refused", data, *overrides)
        assert proc.returncode == 1 and says in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "refused" / "last.pt").exists()
    proc = train(tmp_path / "refused", data, f"train.init_from={tmp_path / 'nothing'}")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "is not a training run or release folder" in said


def test_tokenizer_settings_that_cannot_apply_are_refused(smoke_run, data, tmp_path) -> None:
    """train.init_from brings the folder's tokenizers: other data.tokenizer values, or another
    folder's tokenizers, would be recorded in config.yaml but never applied."""
    for overrides, says in (
        (["data.tokenizer.vocab_size=300"], "data.tokenizer.vocab_size (300 here, 500 there)"),
        ([f"data.tokenizer.from_folder={tmp_path}"], f"data.tokenizer.from_folder={tmp_path}"),
    ):
        proc = train(tmp_path / "refused", data, f"train.init_from={smoke_run}", *overrides)
        said = proc.stdout + proc.stderr
        assert proc.returncode == 1 and "brings its own tokenizers" in said and says in said, said
        assert "Traceback" not in said and not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_tokenizers_of_other_languages_are_warned_of(smoke_run, data, tmp_path) -> None:
    """A run of the other direction lends its tokenizers with a warning naming both (not a
    refusal: cross-lingual transfer is legitimate), through init_from and from_folder."""
    other = tmp_path / "en_de"
    shutil.copytree(smoke_run, other, ignore=shutil.ignore_patterns("tensorboard", "eval"))
    cfg = OmegaConf.load(other / "config.yaml")
    cfg.data.src_lang, cfg.data.tgt_lang = "en", "de"
    OmegaConf.save(cfg, other / "config.yaml")
    listed = json.loads((other / "manifest.json").read_text())
    write_manifest(other / "manifest.json", [other / name for name in listed])
    said = "translates en→de; this run is de→en: its tokenizers were trained on the other languages"
    for key in ("train.init_from", "data.tokenizer.from_folder"):
        proc = train(tmp_path / key, data, f"{key}={other}", "train.max_steps=1")
        assert proc.returncode == 0, proc.stderr
        assert f"{key}={other} {said}" in proc.stderr, proc.stderr
    proc = train(tmp_path / "same", data, f"train.init_from={smoke_run}", "train.max_steps=1")
    assert proc.returncode == 0 and "its tokenizers were trained" not in proc.stderr


def test_the_default_attention_is_the_configs() -> None:
    assert composed().model.attention.name == DEFAULT_ATTENTION


@pytest.mark.slow
def test_a_run_can_take_another_folders_tokenizers(smoke_run, data, tmp_path) -> None:
    run = tmp_path / "same_pieces"
    # 300 pieces asked: trained anew, they could not be the folder's 500-piece models
    take = [f"data.tokenizer.from_folder={smoke_run}", "data.tokenizer.vocab_size=300"]
    proc = train(run, data, *take, "train.max_steps=1")
    assert proc.returncode == 0, proc.stderr
    for name in ("src.model", "tgt.model"):
        assert (run / name).read_bytes() == (smoke_run / name).read_bytes()
    said = f"from_folder={smoke_run} brings its own models: data.tokenizer.vocab_size=300 not used"
    assert proc.stderr.count(said) == 1, proc.stderr  # the recipe's other keys: the folder's
    missing = train(tmp_path / "none", data, f"data.tokenizer.from_folder={tmp_path}")
    said = missing.stdout + missing.stderr
    assert missing.returncode == 1 and "data.tokenizer.from_folder" in said, said


@pytest.mark.slow
def test_only_a_run_that_would_go_on_stops_early(smoke_run, data, tmp_path) -> None:
    # weights that barely move: every validation after the first gives the same BLEU, no better
    same = [f"train.init_from={smoke_run}", "train.lr=1e-12", "train.validate_every=1"]
    same += ["data.valid_limit=20"]  # three validations a run
    for max_steps, stops_early in ((3, False), (6, True)):
        run = tmp_path / f"max_steps_{max_steps}"
        proc = train(run, data[1:], *same, "train.patience=2", f"train.max_steps={max_steps}")
        assert proc.returncode == 0, proc.stderr
        state = torch.load(run / "last.pt", map_location="cpu", weights_only=False)
        assert state["bad_validations"] == 2 and state["step"] == 3  # the third is the 2nd bad
        assert state["stopped_early"] is stops_early  # not when the third was the last anyway
        assert ("early stopping" in proc.stdout + proc.stderr) is stops_early
