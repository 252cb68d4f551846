"""The training step: the optimizer, one update from this rank's micro-batches, and when updates
that were not finite stop training.

Forward (the model returns its loss), backward, gradient clipping and the optimizer step, with
fp16 loss scaling and, under torchrun, DistributedDataParallel over every rank.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seq2seq.config import Precision, TrainConfig
from seq2seq.data.batching import Batch
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import Engine
from seq2seq.storage.rundir import BEST, LAST

log = logging.getLogger("seq2seq.train")  # skipped updates are told in the training log

MAX_BAD_UPDATES = 5  # non-finite updates in a row that stop training


@dataclass
class StepResult:
    """One update: this rank's summed loss (a device tensor: read it rarely) and what happened."""

    loss_sum: Tensor
    grad_norm: float
    applied: bool  # False: non-finite gradients (or an fp16 overflow), parameters unchanged
    finite_loss: bool


def build_optimizer(
    model: nn.Module, tcfg: TrainConfig, device: torch.device, capturable: bool = False
) -> torch.optim.Adam:
    """Adam over all parameters; fused (one pass per tensor) where the device has the kernel;
    ``capturable``: its step counts stay on the device, for CUDA graphs."""
    return torch.optim.Adam(
        model.parameters(),
        lr=tcfg.lr,
        betas=tuple(tcfg.betas),
        weight_decay=tcfg.weight_decay,
        fused=device.type in ("cpu", "cuda"),
        capturable=capturable,
    )


class Updater:
    """The training step: forward (the model returns its loss), backward, gradient clipping and
    the optimizer step, over ``accumulate`` micro-batches and, under torchrun, every rank.

    The loss of an update is summed over all its target tokens and divided by their number (on
    every rank together), so an update is the same however its batch is split.
    """

    def __init__(self, engine: Engine, model: nn.Module, tcfg: TrainConfig) -> None:
        """The model on the engine's device (wrapped for DDP under torchrun), its optimizer."""
        self.engine, self.tcfg = engine, tcfg
        self.module = model.to(engine.device)
        if engine.distributed:  # broadcasts rank 0's parameters to every rank
            ids = [engine.device.index] if engine.device.type == "cuda" else None
            self.model: nn.Module = nn.parallel.DistributedDataParallel(
                self.module, device_ids=ids, gradient_as_bucket_view=True
            )
            torch.manual_seed(tcfg.seed + engine.rank)  # distinct dropout on every rank
        else:
            self.model = self.module
        self.optimizer = build_optimizer(self.module, tcfg, engine.device)
        fp16 = engine.precision == Precision.fp16
        self.scaler = torch.amp.GradScaler(engine.device.type, enabled=fp16)

    def step(self, batches: Sequence[Batch], tokens: int) -> StepResult:
        """One update from this rank's micro-batches; ``tokens``: target tokens of the update
        over all micro-batches of all ranks."""
        self.optimizer.zero_grad(set_to_none=True)
        scale = self.engine.world_size / tokens  # DDP averages gradients over the ranks
        loss_sum = torch.zeros((), device=self.engine.device)
        for i, batch in enumerate(batches):
            # DDP averages gradients in the backward of an update's last micro-batch only
            accumulating = self.engine.distributed and i < len(batches) - 1
            with self.model.no_sync() if accumulating else contextlib.nullcontext():
                with self.engine.compute():
                    loss, _ = self.model(
                        batch.src,
                        batch.src_lengths,
                        batch.tgt_in,
                        batch.tgt_out,
                        self.tcfg.label_smoothing,
                        batch.align,
                        self.tcfg.guided_weight,
                        self.tcfg.coverage_weight,
                    )
                self.scaler.scale(loss * scale).backward()
            loss_sum += loss.detach()
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.tcfg.clip_grad_norm)
        loss_value, grad_norm = torch.stack([loss_sum.float(), norm.float()]).tolist()  # the one
        applied = math.isfinite(grad_norm)  # host synchronisation of an update
        if applied:
            self.scaler.step(self.optimizer)
        self.scaler.update()
        return StepResult(loss_sum, grad_norm, applied, math.isfinite(loss_value))

    def summary(self) -> str | None:
        """What the run's log says of this updater at the end (`StaticUpdater`'s captures)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


class NonFiniteGuard:
    """Counts updates skipped for a non-finite loss or gradients, and stops training after
    several in a row that are not fp16's loss scale settling (a finite loss whose gradients
    overflowed)."""

    def __init__(self, engine: Engine, tcfg: TrainConfig, run_dir: Path) -> None:
        self.engine, self.tcfg, self.run_dir = engine, tcfg, run_dir
        self.bad_in_a_row = 0  # updates skipped for a non-finite loss, in a row

    def check_all(self, results: Sequence[tuple[int, StepResult]]) -> None:
        """`check` each (step, result) in order."""
        for step, result in results:
            self.check(result, step)

    def check(self, result: StepResult, step: int) -> None:
        """Count update ``step``'s ``result``; raise when too many in a row were skipped."""
        if result.applied:
            self.bad_in_a_row = 0
            return
        if result.finite_loss and self.engine.precision == Precision.fp16:
            return
        self.bad_in_a_row += 1
        what = "loss" if not result.finite_loss else "gradients"
        if self.engine.is_main:
            log.warning("update %d: non-finite %s; skipped", step, what)
        if self.bad_in_a_row >= MAX_BAD_UPDATES:
            tcfg = self.tcfg
            kept = [name for name in (BEST, LAST) if (self.run_dir / name).is_file()]
            raise Seq2SeqError(
                f"{self.bad_in_a_row} updates in a row had a non-finite {what} (step "
                f"{step}): lower the learning rate (train.lr={tcfg.lr}) or use a "
                f"wider precision (precision={self.engine.precision.value}); "
                + (
                    f"{' and '.join(kept)} keep the last validated state"
                    if kept
                    else "no checkpoint was written yet"
                )
            )
