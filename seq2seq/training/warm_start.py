"""A run that starts from a trained one (``train.init_from=<run or release folder>``): it takes
that folder's model config, tokenizers and weights, and trains on today's data and settings
with a fresh optimizer, schedule, step count and early stopping; ``train.init_checkpoint``
picks a run's weights (best.pt unless asked), ``train.init_optimizer=true`` keeps the optimizer's
moments and the learning rate of the run's last.pt instead."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from seq2seq.data.prepare import unapplied_tokenizer_keys
from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import ATTENTION_CONFIGS, ModelConfig
from seq2seq.runtime.checkpoint import load_checkpoint
from seq2seq.runtime.run_folder import load_run, read_config
from seq2seq.storage.rundir import (
    CHECKPOINTS,
    CONFIG_FILE,
    LAST,
    RELEASE_WEIGHTS,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    checkpoint_path,
    not_a_run,
)
from seq2seq.training.schedule import LearningRate
from seq2seq.training.updater import Updater

log = logging.getLogger("seq2seq.train")

# model keys a run may set otherwise than the folder it starts from: no weight's shape depends
# on them
FREE_KEYS = {"dropout"}
DEFAULT_ATTENTION = "luong"  # configs/config.yaml's model/attention (a test holds them equal)


def adopt_model(cfg: DictConfig) -> None:
    """Give ``cfg`` the model config of ``cfg.train.init_from`` (an absolute path from now on),
    if set. A model key set to another value than the schema's default, and than that folder's,
    is refused in one line naming the keys: today's model cannot hold the folder's weights.
    Tokenizers taken from a run of other languages (its, or from_folder's) are warned of."""
    if cfg.train.init_from:
        _adopt(cfg)
    warn_other_languages(cfg)


def _adopt(cfg: DictConfig) -> None:
    folder = Path(cfg.train.init_from).resolve()
    if not (folder / CONFIG_FILE).is_file():
        raise Seq2SeqError(not_a_run(folder, f"train.init_from={cfg.train.init_from}"))
    _check_checkpoint(folder, cfg.train.init_checkpoint)
    if cfg.train.init_optimizer and not (folder / LAST).is_file():
        raise Seq2SeqError(
            f"train.init_optimizer=true takes the optimizer of {folder / LAST}, which does not "
            "exist (a release keeps none): leave it out to start with a fresh one"
        )
    saved = read_config(folder / CONFIG_FILE)
    _check_tokenizer_keys(cfg, folder, saved)
    theirs = _plain(saved.model)
    ours = _plain(cfg.model)
    chosen = _flat(ours).items() - _flat(_defaults(ours)).items()
    clashes = sorted(
        f"model.{key} ({value} here, {_flat(theirs).get(key)} there)"
        for key, value in chosen
        if key not in FREE_KEYS and _flat(theirs).get(key) != value
    )
    if clashes:
        raise Seq2SeqError(
            f"train.init_from={folder} has another model: {', '.join(clashes)}; leave these "
            "keys out to train its model"
        )
    for key, value in chosen:  # dropout, where today's config sets it
        if key in FREE_KEYS:
            theirs[key] = value
    attention = ATTENTION_CONFIGS[theirs["attention"]["name"]]()
    schema = OmegaConf.structured(ModelConfig(attention=attention))
    with open_dict(cfg):
        cfg.model = OmegaConf.merge(schema, theirs)  # typed, as a composed model config is
        cfg.train.init_from = str(folder)
        if cfg.train.init_checkpoint not in CHECKPOINTS:  # a file's path, as init_from: absolute
            cfg.train.init_checkpoint = str(Path(cfg.train.init_checkpoint).resolve())
        cfg.data.tokenizer.from_folder = str(folder)  # its pieces: the embeddings belong to them


def _check_tokenizer_keys(cfg: DictConfig, folder: Path, saved: DictConfig) -> None:
    """The run takes the folder's tokenizers: a data.tokenizer key set to another value than
    the schema's default and than the folder's could not apply (config.yaml would record it as
    if it had), nor could another data.tokenizer.from_folder: refused in one line."""
    unapplied = unapplied_tokenizer_keys(
        cfg.data.tokenizer, OmegaConf.select(saved, "data.tokenizer")
    )
    clashes = [
        f"data.tokenizer.{key} ({here} here, {there} there)"
        for key, (here, there) in unapplied.items()
    ]
    given = cfg.data.tokenizer.from_folder
    if given and Path(given).resolve() != folder:
        clashes.append(f"data.tokenizer.from_folder={given}")
    if clashes:
        raise Seq2SeqError(
            f"train.init_from={folder} brings its own tokenizers: {', '.join(clashes)} cannot "
            "apply; leave these keys out"
        )


def warn_other_languages(cfg: DictConfig) -> None:
    """One warning where data.tokenizer.from_folder (train.init_from's, or given) translates
    other languages than this run: its pieces split this run's text badly (English in German
    pieces falls apart into letters). Not refused: cross-lingual transfer is legitimate."""
    given = cfg.data.tokenizer.from_folder
    if not given or not (Path(given) / CONFIG_FILE).is_file():
        return
    try:
        theirs = read_config(Path(given) / CONFIG_FILE).data
    except Seq2SeqError:  # a folder of tokenizers alone, with a config of something else
        return
    there = (str(theirs.src_lang), str(theirs.tgt_lang))
    here = (str(cfg.data.src_lang), str(cfg.data.tgt_lang))
    if [lang.lower() for lang in there] == [lang.lower() for lang in here]:
        return
    init = cfg.train.init_from and Path(cfg.train.init_from).resolve() == Path(given).resolve()
    key = (
        f"train.init_from={cfg.train.init_from}" if init else f"data.tokenizer.from_folder={given}"
    )
    if [lang.lower() for lang in there] == [lang.lower() for lang in reversed(here)]:
        which = "the other languages"
    else:
        sides = zip((SRC_TOKENIZER, TGT_TOKENIZER), there, here, strict=True)
        which = (
            "other languages ("
            + ", ".join(
                f"{name} on {a}, for {b} here" for name, a, b in sides if a.lower() != b.lower()
            )
            + ")"
        )
    log.warning(
        "%s translates %s→%s; this run is %s→%s: its tokenizers were trained on %s",
        key,
        *there,
        *here,
        which,
    )


def start_from(train: DictConfig, updater: Updater, schedule: LearningRate) -> None:
    """A new run's weights from ``train.init_from`` (a release's, or a run's
    ``train.init_checkpoint``); with ``train.init_optimizer``, the optimizer and learning rate of
    its last.pt (both checked by adopt_model)."""
    folder = train.init_from
    run = load_run(folder, train.init_checkpoint)
    log.info("starting from %s (%s, step %d)", folder, run.checkpoint.name, run.step)
    updater.module.load_state_dict(run.model.state_dict())
    if train.init_optimizer:
        saved = load_checkpoint(Path(folder) / LAST)
        updater.load_state_dict(saved)
        schedule.load_state_dict(saved["scheduler"])


def _check_checkpoint(folder: Path, checkpoint: str) -> None:
    """A release holds one set of weights; a run's chosen checkpoint must exist."""
    if (folder / RELEASE_WEIGHTS).is_file():
        if checkpoint != "best":
            raise Seq2SeqError(
                f"train.init_from={folder} is a release: it holds one model (leave out "
                "train.init_checkpoint)"
            )
    elif not (path := checkpoint_path(folder, checkpoint)).is_file():
        raise Seq2SeqError(
            f"train.init_checkpoint={checkpoint}: {path} does not exist (best, last, averaged "
            "after seq2seq-average, or a checkpoint file's path)"
        )


def _plain(model: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(model, resolve=True, enum_to_str=True)


def _defaults(model: dict[str, Any]) -> dict[str, Any]:
    """The schema's model config, as plain values: the attention's keys those of the attention
    ``model`` names, its name the default one."""
    defaults = _plain(OmegaConf.structured(ModelConfig))
    attention = ATTENTION_CONFIGS[model["attention"]["name"]]
    defaults["attention"] = _plain(OmegaConf.structured(attention)) | {"name": DEFAULT_ATTENTION}
    return defaults


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"attention.size": 64, ...}`` of a nested dict; lists as tuples."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[prefix + key] = tuple(value) if isinstance(value, list) else value
    return flat
