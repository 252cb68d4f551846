"""How training is told: the log lines, the progress bar and the TensorBoard records of training
and validation (rank 0's; the other ranks only add to sums). Where training stands (`Progress`)
lives in checkpoints."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

import torch
from omegaconf import DictConfig
from torch.optim import Optimizer
from tqdm import tqdm

from seq2seq.decoding.monitor import Monitor, run_hparams
from seq2seq.decoding.progress import clock
from seq2seq.model.registry import describe_attention
from seq2seq.runtime.engine import Engine
from seq2seq.training.graphed import PendingStep, resolve
from seq2seq.training.state import Progress
from seq2seq.training.updater import StepResult
from seq2seq.training.validation import Validation

log = logging.getLogger("seq2seq.train")

LONG_RUN_S = 2 * 3600  # a run that will take longer, with no time limit, is told how to set one


class Window:
    """Training loss and speed between two log lines, and the updates whose results are still
    on the device (`settle` reads them all at once)."""

    def __init__(self) -> None:
        self.loss: torch.Tensor | float = 0.0  # summed on this rank (a device tensor)
        self.tokens = 0  # target tokens of all ranks
        self.skipped = 0  # updates with non-finite gradients
        self.start = time.perf_counter()
        self.unsettled: list[tuple[int, StepResult | PendingStep]] = []
        self.last: StepResult | None = None  # the latest settled update

    def add(self, step: int, result: StepResult | PendingStep, tokens: int) -> None:
        self.loss = self.loss + result.loss_sum
        self.tokens += tokens
        self.unsettled.append((step, result))

    def settle(self) -> list[tuple[int, StepResult]]:
        """The updates added since the last call, on the host, with their step numbers."""
        steps = [step for step, _ in self.unsettled]
        results = resolve([result for _, result in self.unsettled])
        self.unsettled = []
        self.skipped += sum(not r.applied for r in results)
        self.last = results[-1] if results else self.last
        return list(zip(steps, results, strict=True))


def run_eta(tcfg: DictConfig, p: Progress, updates: int, per_update: float) -> tuple[float, str]:
    """Seconds until the run ends at the latest, and the limit that ends it first:
    ``train.max_steps``, ``train.max_minutes`` or ``train.max_epochs`` (early stopping may end
    it sooner); ``updates`` per epoch, ``per_update`` seconds each."""
    ends = {"train.max_epochs": ((tcfg.max_epochs - p.epoch) * updates - p.batch_in_epoch)}
    if tcfg.max_steps is not None:
        ends["train.max_steps"] = tcfg.max_steps - p.step
    left = {limit: max(steps, 0) * per_update for limit, steps in ends.items()}
    if tcfg.max_minutes is not None:
        left["train.max_minutes"] = max(60 * tcfg.max_minutes - p.seconds, 0.0)
    limit = min(left, key=left.get)
    return left[limit], limit


def long_run_hint(tcfg: DictConfig, left: float, limit: str) -> str | None:
    """One line for a run that will take hours with no time limit set (the GPU recipe started on a
    CPU, say): how long, and how to cap it; None for any other run."""
    if tcfg.max_minutes is not None or left < LONG_RUN_S:
        return None
    value = tcfg[limit.removeprefix("train.")]
    return (
        f"at this speed the run may take {clock(left)} more ({limit}={value}; early stopping "
        "may end it sooner): train.max_minutes=N ends it after N minutes, validated"
    )


class Report:
    """The log lines and TensorBoard records of one run."""

    def __init__(self, cfg: DictConfig, engine: Engine, monitor: Monitor | None) -> None:
        self.cfg, self.engine, self.monitor = cfg, engine, monitor
        self.hinted = False  # the long-run hint is told once

    def start(self, parameters: int, pairs: int, updates: int) -> None:
        tcfg, world = self.cfg.train, self.engine.world_size
        layers = self.cfg.model.get("decoder_layers", 1)
        log.info(
            "model: %s attention%s, %.2fM parameters; %d training pairs, %d updates per epoch",
            describe_attention(self.cfg.model.attention),
            f", {layers} decoder layers" if layers > 1 else "",
            parameters / 1e6,
            pairs,
            updates,
        )
        log.info(
            "on %s; each update: batch_tokens %d x accumulate %d x %d process%s = %d tokens",
            self.engine.describe(),
            tcfg.batch_tokens,
            tcfg.accumulate,
            world,
            "es" if world > 1 else "",
            tcfg.batch_tokens * tcfg.accumulate * world,
        )

    def training(
        self, p: Progress, window: Window, optimizer: Optimizer, bar: tqdm, updates: int
    ) -> None:
        """Loss and speed over all ranks since the last log line (``window``, settled): TensorBoard,
        and a log line where no progress bar shows them (every rank takes part in the sums)."""
        lr = float(optimizer.param_groups[0]["lr"])  # a device tensor under CUDA graphs
        loss_sum, skipped = self.engine.sum_over_ranks([float(window.loss), window.skipped])
        elapsed = time.perf_counter() - window.start
        loss, tok_s = loss_sum / window.tokens, window.tokens / elapsed
        if self.monitor is None:
            return
        if skipped:
            log.warning(
                "%d of the last %d updates were skipped (non-finite gradients)",
                skipped,
                self.cfg.train.log_every,
            )
        scalars = {
            "loss": loss,
            "lr": lr,
            "tokens_per_s": tok_s,
            "grad_norm": window.last.grad_norm,
        }
        self.monitor.scalars(p.step, {f"train/{name}": v for name, v in scalars.items()})
        per_update = elapsed / self.cfg.train.log_every
        run_left, limit = run_eta(self.cfg.train, p, updates, per_update)
        run = f"{clock(run_left)} ({limit})"
        if not self.hinted and (hint := long_run_hint(self.cfg.train, run_left, limit)):
            log.info(hint)
        self.hinted = True
        if not bar.disable:
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tok_s:,.0f}", run_ETA=run)
            return
        log.info(
            "epoch %d, update %d/%d (step %d): loss %.3f, %s tok/s, lr %.2g, epoch ETA %s, "
            "run ETA %s",
            p.epoch + 1,
            p.batch_in_epoch,
            updates,
            p.step,
            loss,
            f"{tok_s:,.0f}",
            lr,
            clock((updates - p.batch_in_epoch) * per_update),
            run,
        )

    def validation(self, p: Progress, result: Validation, improved: bool, start: float) -> None:
        """Scalars, heatmaps, the samples table and HParams of one validation, flushed to disk,
        and its log line (rank 0)."""
        logging_start = time.perf_counter()
        monitor = self.monitor
        monitor.scalars(p.step, {f"valid/{name}": v for name, v in result.metrics.items()})
        if result.samples:
            # on a GPU the host has cores to spare: drawn there while training goes on
            monitor.attention(p.step, result.samples, wait=self.engine.device.type != "cuda")
            monitor.samples_table(p.step, result.samples)
        final = {"hparams/best_valid_bleu": p.best_bleu}
        if "aer" in result.metrics:  # the latest validation's: the last one's when training ends
            final["hparams/aer"] = result.metrics["aer"]
        monitor.hparams(p.step, run_hparams(self.cfg), final)
        monitor.flush()  # a running TensorBoard shows this validation now
        now = time.perf_counter()
        best = {p.best_metric: " (best)" if improved else ""}  # after the score that chose it
        log.info(
            "step %d (epoch %d): valid loss %.3f%s, ppl %.2f, BLEU %.2f%s, chrF %.2f%s%s "
            "(%.1f s, TensorBoard %.2f s)",
            p.step,
            p.epoch + (p.batch_in_epoch > 0),
            result.metrics["loss"],
            best.get("loss", ""),
            result.metrics["ppl"],
            result.metrics["bleu"],
            best.get("bleu", ""),
            result.metrics["chrf"],
            best.get("chrf", ""),
            f", AER {result.metrics['aer']:.3f}" if "aer" in result.metrics else "",
            now - start,
            now - logging_start,
        )


class _AboveTheBar(logging.StreamHandler):
    """A console handler writing through tqdm, so that a line prints above the progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # as logging's own handlers: a log call never raises
            self.handleError(record)


@contextlib.contextmanager
def lines_above(bar: tqdm) -> Iterator[None]:
    """While ``bar`` shows, the console's log lines (a validation's, a warning) print above it,
    not into it; the log file's handler is left as it is."""
    root = logging.getLogger()
    consoles = [
        h
        for h in root.handlers
        if type(h) is logging.StreamHandler and h.stream in (sys.stdout, sys.stderr)
    ]
    swapped = []
    for console in consoles if not bar.disable else []:
        above = _AboveTheBar(console.stream)
        above.setFormatter(console.formatter)
        above.setLevel(console.level)
        root.removeHandler(console)
        root.addHandler(above)
        swapped.append((console, above))
    try:
        yield
    finally:
        for console, above in swapped:
            root.removeHandler(above)
            root.addHandler(console)


def epoch_bar(total: int, done: int, epoch: int, shown: bool) -> tqdm:
    """The progress bar of one epoch's updates (on a terminal, rank 0)."""
    return tqdm(
        total=total,
        initial=done,
        desc=f"epoch {epoch + 1}",
        disable=not shown,
        dynamic_ncols=True,
        leave=False,
    )
