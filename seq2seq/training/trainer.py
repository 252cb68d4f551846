"""The training loop: data prepared once (rank 0), updates planned per epoch, the model trained,
validated and checkpointed until a limit or early stopping; `Trainer` owns the loop.

Under ``torchrun`` rank 0 owns the run folder and writes every file and log line; the other ranks
train their share of each epoch and receive what they need (tokenizers, resumed state, validation
results) from it."""

from __future__ import annotations

import functools
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from seq2seq.config_choices import BestMetric
from seq2seq.data.batching import Batch, TokenBatchSampler, Update, collate, plan_updates
from seq2seq.data.guidance import AlignmentTargets
from seq2seq.data.prepare import TrainingData, run_tokenizers, training_data, write_splits
from seq2seq.data.sampling import SubwordSampler
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.monitor import Monitor
from seq2seq.model.normalizers import normalizer
from seq2seq.model.seq2seq import build_model
from seq2seq.runtime.checkpoint import CheckpointWriter, keep, start_or_resume
from seq2seq.runtime.engine import Engine
from seq2seq.storage.manifest import write_manifest
from seq2seq.storage.rundir import (
    BEST,
    CONFIG_FILE,
    LAST,
    MANIFEST,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    RunLock,
)
from seq2seq.training.graphed import make_updater
from seq2seq.training.record import choose_and_record, save_config
from seq2seq.training.report import Report, Window, epoch_bar, lines_above
from seq2seq.training.schedule import LearningRate
from seq2seq.training.state import (
    Progress,
    best_said,
    count_validation,
    epoch_plan,
    restore_training,
    tokenizer_record,
    training_state,
)
from seq2seq.training.stopping import StopRequest, agreed_stop, stop_signals
from seq2seq.training.updater import NonFiniteGuard, StepResult
from seq2seq.training.validation import Validator, check_validation_lines, validation_search
from seq2seq.training.warm_start import adopt_model, start_from

log = logging.getLogger("seq2seq.train")


def prepare_data(cfg: DictConfig, run_dir: Path, engine: Engine, resuming: bool) -> TrainingData:
    """Rank 0 downloads, trains (or reuses) the tokenizers and fills the token-id cache
    first; the other ranks then take its tokenizers and find the rest in the caches."""
    prepared: list[TrainingData] = []

    def on_main() -> tuple[bytes, bytes]:
        make = functools.partial(run_tokenizers, cfg.data, run_dir, resuming)
        data = training_data(cfg.data, make)
        check_validation_lines(data, validation_search(cfg.train))
        files = [run_dir / name for name in (SRC_TOKENIZER, TGT_TOKENIZER, CONFIG_FILE)]
        files += write_splits(cfg.data, run_dir)
        write_manifest(run_dir / MANIFEST, files)
        prepared.append(data)
        return data.src_tok.proto, data.tgt_tok.proto

    src_proto, tgt_proto = engine.from_main(on_main)
    if prepared:
        return prepared[0]
    handed = Tokenizer(src_proto), Tokenizer(tgt_proto)
    return training_data(cfg.data, lambda train: handed)


class Epochs:
    """The updates of every epoch, from token-bucketed batches: each rank's share, planned from
    the cached segmentation, and collated on the device (subwords re-sampled where that is on)."""

    def __init__(self, data: TrainingData, cfg: DictConfig, engine: Engine) -> None:
        tcfg = cfg.train
        self.data, self.engine, self.accumulate = data, engine, tcfg.accumulate
        self.sampler = TokenBatchSampler(
            data.train.src_lengths,
            data.train.tgt_lengths,
            tcfg.batch_tokens,
            shuffle=True,
            seed=tcfg.seed,
        )
        self.subwords = SubwordSampler.for_training(data, cfg.data, tcfg.seed)
        self.guide = None
        if tcfg.guided_alignment is not None:
            self.guide = AlignmentTargets.load(
                tcfg.guided_alignment, data.train, data.src_tok, data.tgt_tok
            )

    def plan(self, epoch: int, rank: int) -> list[Update]:
        """The updates of ``epoch`` for ``rank``."""
        return plan_updates(
            self.sampler.batches(epoch),
            self.data.train.tgt_lengths,
            rank,
            self.engine.world_size,
            self.accumulate,
        )

    def device_batches(self, update: Update, epoch: int) -> list[Batch]:
        """The micro-batches of ``update`` (in ``epoch``) on the device."""
        if self.subwords is None:
            batches = [collate(self.data.train, ids) for ids in update.batches]
        else:
            batches = [self.subwords.collate(ids, epoch) for ids in update.batches]
        if self.guide is not None:
            batches = [self._guided(batch) for batch in batches]
        return [self.engine.to_device(batch) for batch in batches]

    def _guided(self, batch: Batch) -> Batch:
        target = self.guide.batch(batch.ids.numpy(), batch.tgt_in.size(1), batch.src.size(1))
        return replace(batch, align=target)  # [B, T, S]

    def tokens(self, update: Update, batches: list[Batch]) -> int:
        """Target tokens of the update on all ranks: planned from the cached segmentation, or
        counted when sampled segmentations differ from it."""
        if self.subwords is None:
            return update.tokens
        return int(self.engine.sum_over_ranks([sum(b.ntokens for b in batches)])[0])


def _say_stopped(signal: int, step: int, run_dir: Path, distributed: bool) -> None:
    """How to continue a run a signal stopped (torchrun's ranks take no settings from it)."""
    log.warning(
        "stopped by signal %d at step %d; %s saved: rerun %s with train.resume=true "
        "hydra.run.dir=%s to continue",
        signal,
        step,
        LAST,
        "the same torchrun command" if distributed else "seq2seq-train",
        run_dir,
    )


class Trainer:
    """The training loop of one run: updates, validation, early stopping and checkpoints."""

    def __init__(self, cfg: DictConfig, run_dir: Path, engine: Engine) -> None:
        self.cfg, self.run_dir, self.engine = cfg, run_dir, engine
        adopt_model(cfg)  # train.init_from's, before config.yaml is written
        normalizer(cfg.model.attention.normalizer)  # a missing package (entmax): before any work
        self.lock = RunLock(run_dir)
        try:
            self._start(cfg, run_dir, engine)
        except BaseException:
            self.lock.release()  # a refused start leaves the lock as a finished run does
            raise

    def _start(self, cfg: DictConfig, run_dir: Path, engine: Engine) -> None:
        """Claim the folder, then the data, model, optimizer and what a resume restores."""
        tcfg = cfg.train
        state = engine.from_main(self._claim)
        self.data = prepare_data(cfg, run_dir, engine, resuming=state is not None)
        if tcfg.keep_freed_memory:  # for the steps; data preparation keeps the smaller footprint
            engine.keep_freed_memory()
        self.epochs = Epochs(self.data, cfg, engine)
        model = build_model(cfg.model, self.data.src_tok.vocab_size, self.data.tgt_tok.vocab_size)
        vocab = [self.data.src_tok.vocab_size, self.data.tgt_tok.vocab_size]
        choose_and_record(cfg, engine, model, state or {}, vocab)
        self.updater = make_updater(engine, model, tcfg)  # as choose_and_record decided
        metric = BestMetric(tcfg.best_metric)
        self.schedule = LearningRate(
            self.updater.optimizer, tcfg.lr, tcfg.scheduler, metric.higher_is_better
        )
        self.plan = epoch_plan(cfg, engine, self.data.train)
        self.progress = Progress(best_metric=metric.value, validation=self.data.valid_record)
        if state is None and tcfg.init_from:
            start_from(tcfg, self.updater, self.schedule)
        if state is not None:
            self.progress = restore_training(
                state, self.updater, self.schedule, engine, self.plan, self.progress
            )
        engine.from_main(lambda: save_config(cfg, run_dir))  # a start refused above leaves it
        purge = self.progress.step + 1 if state is not None else 0  # hide what came after last.pt
        self.monitor = Monitor(run_dir, purge_step=purge) if engine.is_main else None
        self.report = Report(cfg, engine, self.monitor)
        self.validator = Validator(cfg, engine, self.data) if engine.is_main else None
        self.writer = CheckpointWriter()
        self.non_finite = NonFiniteGuard(engine, tcfg, run_dir)
        parameters = sum(p.numel() for p in model.parameters())
        self.report.start(parameters, len(self.data.train), len(self.epochs.plan(0, rank=0)))

    # -- setup -------------------------------------------------------------------------------

    def _claim(self) -> dict[str, Any] | None:
        """Rank 0: lock the run folder, then start the run or take up its last.pt."""
        self.lock.acquire()
        return start_or_resume(self.run_dir, self.cfg)

    # -- checkpoints -------------------------------------------------------------------------

    def _save(self, *names: str) -> None:
        """Every rank takes part (its random state gathered); rank 0 writes, in the background."""
        rng = self.engine.gather(self.engine.rng_state())
        if self.engine.is_main:
            state = training_state(
                self.updater,
                self.schedule,
                self.progress,
                rng,
                (self.data.src_tok, self.data.tgt_tok),
                self.engine,
                self.cfg,
                self.plan,
            )
            self.writer.save([self.run_dir / name for name in names], state)

    # -- training ----------------------------------------------------------------------------

    def fit(self) -> None:
        """Train until early stopping, `max_epochs`, `max_steps`, `max_minutes` or a signal."""
        try:
            self._fit()
        finally:
            try:
                self.writer.close()  # every checkpoint asked for is on disk
            finally:
                if self.monitor is not None:
                    self.monitor.close()
                self.lock.release()

    def _fit(self) -> None:
        self._clock = time.monotonic() - self.progress.seconds  # a resumed run goes on counting
        if self.progress.stopped_early:
            log.info("this run has already stopped early (%s)", best_said(self.progress))
            return
        with stop_signals(self.engine.distributed) as request:
            stop = 0
            while not stop and not self._done():
                stop = self._train_epoch(request)
            if stop:
                self._save(LAST)
                self.writer.wait()
                if self.engine.is_main:
                    _say_stopped(stop, self.progress.step, self.run_dir, self.engine.distributed)
                self.engine.barrier()  # no rank leaves before rank 0 has written last.pt
                raise SystemExit(128 + stop)
        self._save(LAST)
        log.info("finished after %d updates; %s", self.progress.step, best_said(self.progress))
        if summary := self.updater.summary():
            log.info("%s", summary)

    def _at_end(self) -> bool:
        """Out of updates (train.max_steps) or of time (train.max_minutes), alike on every rank."""
        tcfg, p = self.cfg.train, self.progress
        p.seconds = time.monotonic() - self._clock
        if tcfg.max_steps is not None and p.step >= tcfg.max_steps:
            return True
        if tcfg.max_minutes is None:
            return False
        return bool(self.engine.max_over_ranks(int(p.seconds >= 60 * tcfg.max_minutes)))

    def _done(self) -> bool:
        p = self.progress
        return p.stopped_early or p.epoch >= self.cfg.train.max_epochs or self._at_end()

    def _train_epoch(self, request: StopRequest) -> int:
        """Updates until the epoch ends (then validation, unless by steps), training stops, or a
        signal arrives; returns the agreed signal number (0: none)."""
        tcfg, engine, p = self.cfg.train, self.engine, self.progress
        plan = self.epochs.plan(p.epoch, engine.rank)
        todo = plan[p.batch_in_epoch :]
        self.updater.model.train()
        shown = self.cfg.log.progress and engine.is_main and sys.stderr.isatty()
        bar = epoch_bar(len(plan), p.batch_in_epoch, p.epoch, shown)
        window = Window()
        with bar, lines_above(bar):
            prepare = functools.partial(self.epochs.device_batches, epoch=p.epoch)
            batches_ahead = engine.prefetch(todo, prepare)
            for update, batches in zip(todo, batches_ahead, strict=True):
                self.schedule.before_update(p.step + 1)
                tokens = self.epochs.tokens(update, batches)
                result = self.updater.step(batches, tokens)
                p.step += 1
                p.batch_in_epoch += 1
                bar.update()
                window.add(p.step, result, tokens)
                end = self._at_end()
                validating = end or (tcfg.validate_every and p.step % tcfg.validate_every == 0)
                logging_now = p.step % tcfg.log_every == 0
                if isinstance(result, StepResult) or logging_now or validating:
                    self.non_finite.check_all(window.settle())  # graphed: once in log_every
                if logging_now:
                    self.report.training(p, window, self.updater.optimizer, bar, len(plan))
                    window = Window()
                if validating:
                    epochs_done = p.batch_in_epoch == len(plan) and p.epoch + 1 >= tcfg.max_epochs
                    self._validate_and_checkpoint(last=end or epochs_done)
                    self.updater.model.train()
                stop = agreed_stop(engine, request)
                if stop or ((end or p.stopped_early) and p.batch_in_epoch < len(plan)):
                    return stop
                if end or p.stopped_early:
                    break  # on the epoch's last update: the epoch is done, and so marked
        self.non_finite.check_all(window.settle())
        p.epoch += 1
        p.batch_in_epoch = 0
        if not tcfg.validate_every and p.validated_step != p.step:  # once per step, resumed too
            self._validate_and_checkpoint(last=p.epoch >= tcfg.max_epochs)
        return agreed_stop(engine, request)

    # -- validation --------------------------------------------------------------------------

    def _validate_and_checkpoint(self, last: bool) -> None:
        """Rank 0 validates; every rank takes the same decisions from its scores (of
        train.best_metric). The `last` validation of a run that stops anyway does not count as
        stopping early."""
        start = time.perf_counter()
        result = None
        if self.validator is not None:  # rank 0
            result = self.validator(self.updater.module, self.data)
        p = self.progress
        bleu, score = self.engine.broadcast(
            (result.metrics["bleu"], result.metrics[p.best_metric]) if result else None
        )
        p.validated_step = p.step
        improved = count_validation(p, bleu, score, self.cfg.train.patience, last)
        self.schedule.after_validation(score)
        if result is not None:
            self.report.validation(p, result, improved, start)
        self._save(*([BEST] if improved else []), LAST)
        if self.cfg.train.keep_checkpoints and self.engine.is_main:
            toks = (self.data.src_tok, self.data.tgt_tok)
            weights = {"model": self.updater.module.state_dict(), **tokenizer_record(*toks)}
            higher = BestMetric(p.best_metric).higher_is_better
            keep(
                self.writer,
                self.run_dir,
                p.step,
                score,
                weights,
                self.cfg.train.keep_checkpoints,
                higher,
            )
