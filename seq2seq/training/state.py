"""What a training checkpoint holds: where training stands (`Progress`), the weights, optimizer,
schedule and random state, and how a resumed run puts them back.
The files themselves: `seq2seq.runtime.checkpoint`."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from seq2seq.config_choices import BestMetric
from seq2seq.data.dataset import TokenizedCorpus
from seq2seq.data.tokenizer import Tokenizer, fingerprints
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import Engine
from seq2seq.storage.rundir import BEST, LAST
from seq2seq.training.schedule import LearningRate
from seq2seq.training.updater import Updater

train_log = logging.getLogger("seq2seq.train")  # resuming is told in the training log


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint and restored on resume."""

    step: int = 0  # updates so far
    epoch: int = 0  # epochs finished
    batch_in_epoch: int = 0  # updates of the current epoch done
    best_bleu: float = -1.0  # validation BLEU of best.pt
    best_metric: str = "bleu"  # train.best_metric, which chose best.pt (a resume keeps it)
    best_score: float | None = None  # best_metric's value at best.pt; None before validating
    bad_validations: int = 0  # in a row, without a better best_metric
    stopped_early: bool = False
    seconds: float = 0.0  # wall-clock seconds of training so far (validation included)
    validated_step: int = -1  # the step of the latest validation (an epoch's end validates once)
    validation: str = ""  # the split that scored best.pt (TrainingData.valid_record)


def improves(score: float, progress: Progress) -> bool:
    """Whether a validation's ``score`` (of ``progress.best_metric``) beats best.pt's."""
    if progress.best_score is None:
        return True
    if BestMetric(progress.best_metric).higher_is_better:
        return score > progress.best_score
    return score < progress.best_score


def count_validation(
    progress: Progress, bleu: float, score: float, patience: int, last: bool
) -> bool:
    """One validation's BLEU and ``score`` (of best_metric) counted: whether it makes the new
    best.pt; ``patience`` validations in a row without one stop training early, unless this is
    the ``last`` of a run that stops anyway."""
    improved = improves(score, progress)
    if improved:
        progress.best_score, progress.best_bleu, progress.bad_validations = score, bleu, 0
    else:
        progress.bad_validations += 1
    if progress.bad_validations >= patience and not last:
        train_log.info(
            "early stopping: no better %s in %d validations",
            progress.best_metric,
            progress.bad_validations,
        )
        progress.stopped_early = True
    return improved


def check_best_metric(state: dict[str, Any], metric: str) -> None:
    """A resumed run keeps the metric that chose its best.pt: scores of two metrics cannot be
    compared."""
    saved = state["best_metric"]  # runtime/migrate.py fills an old checkpoint's
    if saved != metric:
        raise Seq2SeqError(
            f"train.resume=true: {BEST} of this run was chosen by {saved}; resume with "
            f"train.best_metric={saved}, or start a new run"
        )


def epoch_plan(cfg: DictConfig, engine: Engine, train: TokenizedCorpus) -> dict[str, Any]:
    """What decides which pairs each update of an epoch holds: a resumed run must have the same
    in the middle of an epoch (else pairs would be dropped or repeated), and may change it at
    an epoch's end."""
    lengths = np.stack([train.src_lengths, train.tgt_lengths]).astype(np.int32)
    digest = hashlib.sha256(lengths.tobytes()).hexdigest()[:12]
    return {
        "train.seed": cfg.train.seed,
        "train.batch_tokens": cfg.train.batch_tokens,
        "train.accumulate": cfg.train.accumulate,
        "data.sampling_alpha": cfg.data.sampling_alpha,
        "processes": engine.world_size,
        "training pairs": f"{len(train):,} (lengths {digest})",
    }


def check_plan(saved: dict[str, Any], plan: dict[str, Any], progress: Progress) -> None:
    """Refuse a resume whose epoch plan differs from the checkpoint's in the middle of an
    epoch, naming what differs; at an epoch's end the new plan starts with the next epoch."""
    changed = [
        f"{key} {saved[key]} (now {value})"
        for key, value in plan.items()
        if key in saved and saved[key] != value
    ]
    if not changed:
        return
    where = f"{LAST} stopped {progress.batch_in_epoch} updates into epoch {progress.epoch + 1}"
    if progress.batch_in_epoch:
        raise Seq2SeqError(
            f"train.resume=true: {where} with other settings: {'; '.join(changed)}. Resume "
            "with the run's own settings (nothing is dropped or repeated), or start a new run"
        )
    train_log.warning("epoch %d starts with a new plan: %s", progress.epoch + 1, "; ".join(changed))


def training_state(
    updater: Updater,
    schedule: LearningRate,
    progress: Progress,
    rng: list[dict[str, Tensor]],
    toks: tuple[Tokenizer, Tokenizer],
    engine: Engine,
    cfg: DictConfig,
    plan: dict[str, Any],
) -> dict[str, Any]:
    """What last.pt and best.pt hold: weights, optimizer, schedule, every rank's random state
    (``rng``), the tokenizers' record (``toks``), progress, the epoch plan, and the config."""
    return {
        "model": updater.module.state_dict(),
        **updater.state_dict(),
        "scheduler": schedule.state_dict(),
        "rng": rng,  # one entry per rank
        **tokenizer_record(*toks),
        **asdict(progress),
        "world_size": engine.world_size,
        "accumulate": cfg.train.accumulate,
        "plan": plan,
        "products": engine.products_in_use(),  # a resumed run keeps them
        "precision": engine.precision.value,  # precision=auto's choice; kept as well
        "device": engine.describe(),  # where it trained, for the model card
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
    }


def tokenizer_record(src_tok: Tokenizer, tgt_tok: Tokenizer) -> dict[str, list]:
    """What ties a checkpoint to its run's tokenizers (runtime/run_folder.py checks it): their
    vocabulary sizes and fingerprints."""
    return {
        "vocab": [src_tok.vocab_size, tgt_tok.vocab_size],
        "tokenizers": fingerprints(src_tok, tgt_tok),
    }


def restore_training(
    state: dict[str, Any],
    updater: Updater,
    schedule: LearningRate,
    engine: Engine,
    plan: dict[str, Any],
    fresh: Progress,
) -> Progress:
    """Put a resumed run's ``training_state`` back (this rank's random state where the number
    of ranks is the same); its progress, once ``check_best_metric`` and ``check_plan`` have
    accepted today's metric (``fresh``'s) and ``plan``; another validation split than best.pt's
    is warned of."""
    check_best_metric(state, fresh.best_metric)
    defaults = asdict(Progress())  # keys a checkpoint from an older version may lack
    progress = Progress(**{key: state.get(key, value) for key, value in defaults.items()})
    check_plan(state["plan"], plan, progress)  # runtime/migrate.py fills an old one's
    other = progress.validation not in ("", fresh.validation) and progress.best_score is not None
    if other and engine.is_main:
        train_log.warning(
            "the validation split is not best.pt's (%s, now %s): its %s was scored on the other, "
            "so best.pt and early stopping now compare two splits; to score on this one alone, "
            "start a new run with train.init_from=<this run>",
            progress.validation,
            fresh.validation,
            best_said(progress),
        )
    progress.validation = fresh.validation
    updater.module.load_state_dict(state["model"])
    updater.load_state_dict(state)
    schedule.load_state_dict(state["scheduler"])
    if len(state["rng"]) == engine.world_size:
        engine.set_rng_state(state["rng"][engine.rank])
    train_log.info(
        "resumed from %s: step %d, epoch %d, batch %d, %s",
        LAST,
        progress.step,
        progress.epoch + 1,
        progress.batch_in_epoch,
        best_said(progress),
    )
    return progress


def best_said(progress: Progress) -> str:
    """best.pt's score for the log: "best BLEU 31.20", or "best loss 2.104 (BLEU 30.90)"."""
    if progress.best_metric == BestMetric.bleu.value or progress.best_score is None:
        return f"best BLEU {progress.best_bleu:.2f}"
    name = "chrF" if progress.best_metric == BestMetric.chrf.value else progress.best_metric
    return f"best {name} {progress.best_score:.3f} (BLEU {progress.best_bleu:.2f})"
