"""The learning rate over training: an optional linear warm-up, then reduce-on-plateau of the
validation score train.best_metric names (the default) or inverse square-root decay by update
(as fairseq and Joey NMT)."""

from __future__ import annotations

import math
from typing import Any

import torch

from seq2seq.config import ScheduleName, SchedulerConfig


class LearningRate:
    """Sets the optimizer's rate before each update and after each validation."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        lr: float,
        cfg: SchedulerConfig,
        higher_is_better: bool = True,
    ) -> None:
        self.optimizer, self.base, self.cfg = optimizer, lr, cfg
        self.name = ScheduleName(cfg.name)
        self.plateau = None
        if self.name == ScheduleName.plateau:
            self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer,
                mode="max" if higher_is_better else "min",
                factor=cfg.factor,
                patience=cfg.patience,
                min_lr=cfg.min_lr,
            )

    def rate(self, step: int) -> float | None:
        """The rate of update ``step`` (1-based) where the schedule fixes it by update; None
        after the warm-up of ``plateau``, whose rate moves only with validation."""
        warmup = self.cfg.warmup
        if self.name == ScheduleName.inverse_sqrt:
            return self.base * min(step / warmup, math.sqrt(warmup / step))
        return self.base * step / warmup if step <= warmup else None

    def before_update(self, step: int) -> None:
        rate = self.rate(step)
        if rate is not None:
            for group in self.optimizer.param_groups:
                if isinstance(group["lr"], torch.Tensor):  # read by a CUDA graph: in place
                    group["lr"].fill_(rate)
                else:
                    group["lr"] = rate

    def after_validation(self, score: float) -> None:
        if self.plateau is not None:
            self.plateau.step(score)

    def state_dict(self) -> dict[str, Any]:
        return self.plateau.state_dict() if self.plateau is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.plateau is not None and state:
            self.plateau.load_state_dict(state)
