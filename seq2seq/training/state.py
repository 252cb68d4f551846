"""What a training checkpoint holds: where training stands (`Progress`), the weights, optimizer,
schedule and random state, and how a resumed run puts them back.
The files themselves: `seq2seq.runtime.checkpoint`."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from seq2seq.model.linear import current_products
from seq2seq.runtime.engine import Engine
from seq2seq.storage.rundir import LAST
from seq2seq.training.schedule import LearningRate
from seq2seq.training.updater import Updater

train_log = logging.getLogger("seq2seq.train")  # resuming is told in the training log


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint and restored on resume."""

    step: int = 0  # updates so far
    epoch: int = 0  # epochs finished
    batch_in_epoch: int = 0  # updates of the current epoch done
    best_bleu: float = -1.0
    bad_validations: int = 0  # in a row, without a better BLEU
    stopped_early: bool = False
    seconds: float = 0.0  # wall-clock seconds of training so far (validation included)


def training_state(
    updater: Updater,
    schedule: LearningRate,
    progress: Progress,
    rng: list[dict[str, Tensor]],
    vocab: list[int],
    engine: Engine,
    cfg: DictConfig,
) -> dict[str, Any]:
    """What last.pt and best.pt hold: weights, optimizer, schedule, every rank's random state
    (``rng``), vocabulary sizes, progress, how updates were split, and the run's config."""
    return {
        "model": updater.module.state_dict(),
        **updater.state_dict(),
        "scheduler": schedule.state_dict(),
        "rng": rng,  # one entry per rank
        "vocab": vocab,
        **asdict(progress),
        "world_size": engine.world_size,
        "accumulate": cfg.train.accumulate,
        "products": current_products(),  # fp32 products on the CPU; a resumed run keeps them
        "precision": engine.precision.value,  # precision=auto's choice; kept as well
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
    }


def kept_precision(state: dict[str, Any]) -> str | None:
    """The precision a resumed run trained in (its config's in checkpoints older than the
    key), None for a new run."""
    if "precision" in state:
        return state["precision"]
    return state.get("config", {}).get("precision")


def restore_training(
    state: dict[str, Any], updater: Updater, schedule: LearningRate, engine: Engine, accumulate: int
) -> Progress:
    """Put a resumed run's ``training_state`` back (this rank's random state where the number
    of ranks is the same); returns its progress, from the epoch's start if updates are split
    otherwise now (``accumulate``, the number of ranks)."""
    updater.module.load_state_dict(state["model"])
    updater.load_state_dict(state)
    schedule.load_state_dict(state["scheduler"])
    defaults = asdict(Progress())  # keys a checkpoint from an older version may lack
    progress = Progress(**{key: state.get(key, value) for key, value in defaults.items()})
    if len(state["rng"]) == engine.world_size:
        engine.set_rng_state(state["rng"][engine.rank])
    split = (state.get("world_size", 1), state.get("accumulate", 1))
    if split != (engine.world_size, accumulate):
        # its position counts updates of another split of the epoch
        train_log.warning("%s: %d processes, accumulate=%d; epoch starts over", LAST, *split)
        progress.batch_in_epoch = 0
    train_log.info(
        "resumed from %s: step %d, epoch %d, batch %d, best BLEU %.2f",
        LAST,
        progress.step,
        progress.epoch + 1,
        progress.batch_in_epoch,
        progress.best_bleu,
    )
    return progress
