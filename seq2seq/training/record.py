"""What a run records of itself: the concrete choices made at its start (device, precision,
matrix products, threads) and the library versions, written into its config.yaml, so that
training again from that file takes the same paths (docs/training.md)."""

from __future__ import annotations

import json
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from seq2seq.model.linear import current_products
from seq2seq.runtime.engine import Engine
from seq2seq.storage.manifest import write_manifest
from seq2seq.storage.rundir import CONFIG_FILE, MANIFEST

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
    cfg.products = current_products()
    cfg.train.threads = torch.get_num_threads()
    cfg.versions = library_versions()
    return [
        f"{name} {recorded[name]} -> {now}"
        for name, now in cfg.versions.items()
        if name in recorded and recorded[name] != now
    ]


def save_config(cfg: DictConfig, run_dir: Path) -> None:
    """config.yaml written again, atomically, and the run's manifest made to match it."""
    path = run_dir / CONFIG_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    OmegaConf.save(cfg, tmp, resolve=True)
    os.replace(tmp, path)
    manifest = run_dir / MANIFEST
    if manifest.is_file():
        write_manifest(manifest, [run_dir / name for name in json.loads(manifest.read_text())])
