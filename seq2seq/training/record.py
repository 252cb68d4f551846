"""What a run records of itself: the concrete choices made at its start (device, precision,
matrix products, threads, CUDA graphs) and the library versions, written into its config.yaml,
so that training again from that file takes the same paths (docs/training.md)."""

from __future__ import annotations

import copy
import json
import logging
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from seq2seq.runtime.engine import Engine
from seq2seq.storage.manifest import write_manifest
from seq2seq.storage.rundir import CONFIG_FILE, MANIFEST
from seq2seq.training.graphed import use_graphs

log = logging.getLogger("seq2seq.train")

# the distributions whose behaviour a run's numbers depend on
LIBRARIES = ("seq2seq", "torch", "numpy", "sentencepiece", "sacrebleu", "hydra-core", "entmax")


def library_versions() -> dict[str, str]:
    """Python's version and each installed one of LIBRARIES'."""
    found = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def record_choices(cfg: DictConfig, engine: Engine) -> list[str]:
    """Write the engine's concrete choices and today's library versions into ``cfg``; the
    versions that differ from those ``cfg`` named already (a rerun of a recorded run), as
    "name recorded -> now"."""
    recorded = dict(cfg.versions or {})
    cfg.device = engine.device.type if engine.distributed else str(engine.device)
    cfg.precision = engine.precision.value
    cfg.products = engine.products_in_use()
    cfg.train.threads = torch.get_num_threads()
    cfg.versions = library_versions()
    return [
        f"{name} {recorded[name]} -> {now}"
        for name, now in cfg.versions.items()
        if name in recorded and recorded[name] != now
    ]


def choose_and_record(
    cfg: DictConfig,
    engine: Engine,
    model: nn.Module,
    kept: dict[str, Any],
    vocab: list[int],
) -> None:
    """The engine's start-up choices for ``model`` (a resumed run's ``kept`` ones), written
    into ``cfg`` (`save_config` writes them into the run's config.yaml once the start is
    accepted)."""
    engine.choose_products(model, training=True, kept=kept.get("products"))
    normalizer = cfg.model.attention.get("normalizer", "softmax")

    def graphs() -> bool:
        return use_graphs(cfg.train.cuda_graphs, engine, cfg.train, normalizer)

    # precision=auto takes bf16 on CUDA for a graphed update, and graphs refuse fp16 (a resumed
    # run's choice may be): whether graphs would run before the precision is chosen, then after
    graphed, tokens = graphs(), cfg.train.batch_tokens
    engine.choose_precision(model, vocab, tokens, kept.get("precision"), graphed=graphed)
    cfg.train.cuda_graphs = "true" if graphs() else "false"  # what runs, for a rerun
    if changed := record_choices(cfg, engine):
        log.warning("the config names other library versions: %s", ", ".join(changed))


def save_config(cfg: DictConfig, run_dir: Path) -> None:
    """config.yaml written again, atomically, and the run's manifest made to match it."""
    path = run_dir / CONFIG_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    saved = copy.deepcopy(cfg)
    saved.train.resume = False  # how this start was asked for, not a setting of the run
    OmegaConf.save(saved, tmp, resolve=True)
    os.replace(tmp, path)
    manifest = run_dir / MANIFEST
    if manifest.is_file():
        write_manifest(manifest, [run_dir / name for name in json.loads(manifest.read_text())])
