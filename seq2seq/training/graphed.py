"""Training updates of fixed shapes (``train.cuda_graphs``): each batch padded up to one of a
few length buckets, an update that never reads a tensor back to the host, and on CUDA each
bucket's update captured once as a graph and replayed, so the GPU no longer waits for Python to
launch every kernel of every time step.

Padding does not change the update: padded target positions weigh 0 in the loss
(`Seq2Seq.forward` with ``static=True``) and padded rows hold a one-token source and no target.
The loss and gradient norm of each update stay on the device; `resolve` reads many at once.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seq2seq.config import Precision, TrainConfig
from seq2seq.data.batching import Batch
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.capture import Recorder
from seq2seq.runtime.engine import Engine
from seq2seq.training.updater import StepResult, Updater, build_optimizer
from seq2seq.vocab import EOS

log = logging.getLogger("seq2seq.train")
WARMUP = 1  # eager updates (on a side stream) before the first graph is captured


def bucket_size(n: int) -> int:
    """``n`` rounded up to one of a few sizes: to a multiple of 2, then of an eighth of its
    power of two above 16 (at most 1/8 more; 17 -> 18, 33 -> 36, 100 -> 104)."""
    step = max(2, 2 ** (max(n, 1).bit_length() - 4))
    return -(-n // step) * step


@dataclass(frozen=True)
class Bucket:
    """A static batch shape: rows, source length, target length."""

    rows: int
    src_len: int
    tgt_len: int

    @classmethod
    def of(cls, batch: Batch, budget: int) -> Bucket:
        """``batch``'s bucket (`fitting`)."""
        rows, src_len = batch.src.shape
        return cls.fitting(rows, src_len, batch.tgt_out.size(1), budget)

    @classmethod
    def fitting(cls, rows: int, src_len: int, tgt_len: int, budget: int) -> Bucket:
        """The bucket of a batch of that shape: its longer side rounded up by `bucket_size`, both
        sides padded to it, and as many rows as the token ``budget`` gives the bucket's shortest
        length (a batch of the sampler holds no more), so that row counts make no buckets of
        their own. On Multi30k at 1,100 tokens: 17 buckets an epoch instead of 46, the same
        padding."""
        length = bucket_size(max(src_len, tgt_len))
        shortest = length
        while shortest > 1 and bucket_size(shortest - 1) == length:
            shortest -= 1
        return cls(max(rows, budget // shortest), length, length)


class StaticBatch:
    """One bucket's input tensors on the device, refilled before every update of the bucket."""

    def __init__(self, bucket: Bucket, device: torch.device, guided: bool) -> None:
        rows, s, t = bucket.rows, bucket.src_len, bucket.tgt_len
        self.src = torch.zeros(rows, s, dtype=torch.long, device=device)
        self.src_lengths = torch.ones(rows, dtype=torch.long, device=device)
        self.tgt_in = torch.zeros(rows, t, dtype=torch.long, device=device)
        self.tgt_out = torch.zeros(rows, t, dtype=torch.long, device=device)
        self.align = torch.zeros(rows, t, s, device=device) if guided else None
        self.scale = torch.zeros((), device=device)  # processes / target tokens of the update

    def fill(self, batch: Batch, scale: float) -> None:
        """Copy ``batch`` in (device work only, nothing read back): padded rows get a source of
        one EOS and no target."""
        rows, s = batch.src.shape
        t = batch.tgt_out.size(1)
        for mine, theirs in ((self.src, batch.src), (self.tgt_in, batch.tgt_in)):
            mine.zero_()[:rows, : theirs.size(1)].copy_(theirs, non_blocking=True)
        self.tgt_out.zero_()[:rows, :t].copy_(batch.tgt_out, non_blocking=True)
        self.src[rows:, 0].fill_(EOS)
        lengths = batch.src_lengths
        if self.src.device.type == "cuda":  # from pinned memory: no wait for the copy
            lengths = lengths.pin_memory()
        self.src_lengths.fill_(1)[:rows].copy_(lengths, non_blocking=True)
        if self.align is not None:
            self.align.zero_()[:rows, :t, :s].copy_(batch.align, non_blocking=True)
        self.scale.fill_(scale)


@dataclass
class PendingStep:
    """An update whose loss sum and gradient norm are still on the device."""

    loss_sum: Tensor
    grad_norm: Tensor


def resolve(steps: Sequence[StepResult | PendingStep]) -> list[StepResult]:
    """Every step's result on the host, with one read for all pending ones."""
    pending = [s for s in steps if isinstance(s, PendingStep)]
    if not pending:
        return list(steps)
    pairs = torch.stack([torch.stack([s.loss_sum, s.grad_norm]).float() for s in pending])
    values = iter(pairs.tolist())  # the one host synchronisation of these updates
    results = []
    for s in steps:
        if isinstance(s, PendingStep):
            loss, norm = next(values)
            s = StepResult(s.loss_sum, norm, math.isfinite(norm), math.isfinite(loss))
        results.append(s)
    return results


def use_graphs(
    setting: str, engine: Engine, tcfg: TrainConfig, normalizer: str = "softmax"
) -> bool:
    """Whether this run takes the fixed-shape update (``train.cuda_graphs``, any case): ``auto``
    where CUDA is and the update allows it; ``true`` refuses, in one line, what it cannot run
    (and runs eagerly, uncaptured, on the CPU). The entmax package's sparsemax reads the device
    back in its backward (boolean indexing), which a graph cannot hold."""
    setting = str(setting).lower()
    blockers = [
        (
            getattr(normalizer, "value", normalizer) == "sparsemax",
            "an attention normalizer other than sparsemax",
        ),
        (engine.distributed, "one process (not torchrun)"),
        (tcfg.accumulate != 1, "train.accumulate=1"),
        (engine.precision == Precision.fp16, "precision fp32 or bf16 (not fp16)"),
    ]
    if setting == "false":
        return False
    if setting == "auto":
        return engine.device.type == "cuda" and not any(b for b, _ in blockers)
    needs = [what for blocked, what in blockers if blocked]
    if needs:
        raise Seq2SeqError(f"train.cuda_graphs=true needs {', '.join(needs)}")
    return True


def make_updater(engine: Engine, model: nn.Module, tcfg: TrainConfig) -> Updater | StaticUpdater:
    """The updater ``tcfg.cuda_graphs`` asks for, once resolved to true or false."""
    return (StaticUpdater if tcfg.cuda_graphs == "true" else Updater)(engine, model, tcfg)


class StaticUpdater:
    """`Updater`'s work over fixed-shape buckets with no host read inside an update: the optimizer
    skips a non-finite update on the device (fused Adam's ``found_inf``). On CUDA each bucket's
    update becomes a graph (`_record`); on the CPU it runs eagerly (tests)."""

    def __init__(self, engine: Engine, model: nn.Module, tcfg: TrainConfig) -> None:
        self.engine, self.tcfg = engine, tcfg
        self.module = self.model = model.to(engine.device)
        self.capture = engine.device.type == "cuda"
        # on CUDA the rate is a tensor the graphs read, filled in place by the schedule
        self.lr = torch.tensor(tcfg.lr, device=engine.device) if self.capture else None
        self.optimizer = build_optimizer(self.module, tcfg, engine.device, capturable=self.capture)
        for group in self.optimizer.param_groups:
            group["lr"] = tcfg.lr if self.lr is None else self.lr
        self.optimizer.found_inf = torch.zeros((), device=engine.device)
        self.inputs: dict[Bucket, StaticBatch] = {}
        self.graphs: dict[Bucket, tuple[torch.cuda.CUDAGraph, tuple[Tensor, Tensor]]] = {}
        self.seen: Counter[Bucket] = Counter()
        self.refused: Counter[Bucket] = Counter()  # captures CUDA refused: twice, run eagerly
        self.addresses: tuple[int, ...] = ()  # the parameters' memory the graphs were captured on
        self.recorder: Recorder | None = None  # the graphs' memory pool, from the first capture
        self.recording_s, self.eager_updates = 0.0, 0  # the host's time in warm-ups and captures

    def step(self, batches: Sequence[Batch], tokens: int) -> PendingStep:
        """One update from one batch (``accumulate`` is 1); nothing is read back."""
        (batch,) = batches
        bucket = Bucket.of(batch, self.tcfg.batch_tokens)
        if bucket not in self.inputs:
            self.inputs[bucket] = StaticBatch(bucket, self.engine.device, batch.align is not None)
        inputs = self.inputs[bucket]
        inputs.fill(batch, self.engine.world_size / tokens)
        if self.graphs and self.addresses != self._addresses():
            log.warning("the parameters moved in memory: the CUDA graphs are captured again")
            self._forget_graphs()
        self.seen[bucket] += 1
        self._keep_rate()  # before a capture too: a graph keeps the tensor it was captured with
        if bucket in self.graphs:
            graph, out = self.graphs[bucket]
            graph.replay()
        elif not self.capture:
            self.optimizer.zero_grad(set_to_none=True)
            out = self.update(inputs)
        else:
            start = time.perf_counter()
            out = self._record(bucket, inputs)
            self.recording_s += time.perf_counter() - start
        return PendingStep(out[0].clone(), out[1].clone())  # before the next replay writes

    def update(self, x: StaticBatch) -> tuple[Tensor, Tensor]:
        """Forward, backward, clipping and the optimizer step of one static batch, from
        gradients that are None: (the loss sum, the gradient norm), on the device."""
        tcfg = self.tcfg
        with self.engine.compute(cache=not self.capture):  # no cast cache inside a graph
            loss, _ = self.module(
                x.src,
                x.src_lengths,
                x.tgt_in,
                x.tgt_out,
                tcfg.label_smoothing,
                x.align,
                tcfg.guided_weight,
                tcfg.coverage_weight,
                static=True,
            )
        (loss * x.scale).backward()
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), tcfg.clip_grad_norm)
        self.optimizer.found_inf.copy_(norm.isfinite().logical_not())
        self.optimizer.step()
        return loss.detach(), norm

    def _record(self, bucket: Bucket, inputs: StaticBatch) -> tuple[Tensor, Tensor]:
        """A bucket's update before its graph exists: the run's first bucket warms up eagerly
        first (CUDA's lazy set-up), later ones are captured at once (an eager update less each).
        A capture CUDA refuses runs the update eagerly instead and is tried again next time; a
        bucket refused twice keeps running eagerly."""
        if self.refused[bucket] >= 2 or (self.seen[bucket] <= WARMUP and not self.graphs):
            return self._warm_up(inputs)
        try:
            return self._capture(bucket, inputs)
        except RuntimeError as error:  # nothing ran while capturing
            self.refused[bucket] += 1
            if self.refused[bucket] >= 2:
                log.warning("bucket %s: not captured (%s); its updates run eagerly", bucket, error)
            else:
                log.info("bucket %s: captured after an eager update (%s)", bucket, error)
            return self._warm_up(inputs)

    def _warm_up(self, inputs: StaticBatch) -> tuple[Tensor, Tensor]:
        """An eager update on a side stream, as capture asks before a graph is recorded."""
        side = torch.cuda.Stream(self.engine.device)
        side.wait_stream(torch.cuda.current_stream(self.engine.device))
        with torch.cuda.stream(side):
            self.optimizer.zero_grad(set_to_none=True)
            out = self.update(inputs)
        torch.cuda.current_stream(self.engine.device).wait_stream(side)
        self.eager_updates += 1
        return out

    def _capture(self, bucket: Bucket, inputs: StaticBatch) -> tuple[Tensor, Tensor]:
        """Record the bucket's update as a graph (from unset gradients, so that its backward
        writes them instead of adding to another graph's), then run it once."""
        self.optimizer.zero_grad(set_to_none=True)
        graph, known = torch.cuda.CUDAGraph(), set(self.optimizer.state)
        recorder = self.recorder = self.recorder or Recorder(self.engine.device)
        try:
            with recorder.recording(graph):
                out = self.update(inputs)
            made = [p for p in self.optimizer.state if p not in known]
            if made:  # zeroed at every replay: made by a warm-up instead
                for p in made:
                    del self.optimizer.state[p]
                raise RuntimeError(f"Adam's state of {len(made)} parameters made while capturing")
        except RuntimeError:
            recorder.renew()
            raise
        self.graphs[bucket] = (graph, out)
        self.addresses = self._addresses()
        graph.replay()
        return out

    def summary(self) -> str | None:
        """What capturing cost this run so far (on CUDA), for its log."""
        if not self.capture:
            return None
        eager = self.eager_updates
        return (
            f"CUDA graphs: {len(self.graphs)} buckets captured, {eager} eager "
            f"update{'s' * (eager != 1)} (warm-ups, refusals); {self.recording_s:.1f} s of the "
            "host's time in both"
        )

    def _addresses(self) -> tuple[int, ...]:
        return tuple(p.data_ptr() for p in self.module.parameters())

    def _forget_graphs(self) -> None:
        """Capture every bucket again, into a new pool (the old one's blocks may outlive it)."""
        self.graphs.clear()
        if self.recorder is not None:
            self.recorder.renew()
        self.seen.clear()

    def _keep_rate(self) -> None:
        """The graphs read ``self.lr``: a rate set as a number (by a scheduler) is copied in."""
        if self.lr is None:
            return
        for group in self.optimizer.param_groups:
            if group["lr"] is not self.lr:
                self.lr.fill_(float(group["lr"]))
                group["lr"] = self.lr

    def state_dict(self) -> dict[str, Any]:
        """As `Updater`'s: the rate a number and the optimizer not capturable, so that an eager
        run (or one on the CPU) takes it up."""
        state = self.optimizer.state_dict()
        for group in state["param_groups"]:
            group["lr"], group["capturable"] = float(group["lr"]), False
        return {"optimizer": state, "scaler": {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The optimizer's state (also an eager run's), its rate kept in this updater's tensor;
        graphs captured before read the old state, so every bucket is captured again."""
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:
            group["capturable"] = self.capture
        self._keep_rate()
        if self.graphs:
            self._forget_graphs()
