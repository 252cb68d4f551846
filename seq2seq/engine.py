"""The runtime: device, precision, process group and the training step.

The only module that names a device, builds an autocast context or a GradScaler, or knows the rank.
Under ``torchrun`` (``RANK``/``WORLD_SIZE`` in the environment) training runs one process per rank
with DistributedDataParallel: nccl on CUDA, gloo on the CPU; without it, one plain process.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from seq2seq.config import Precision, TrainConfig
from seq2seq.data.batching import Batch
from seq2seq.errors import ReportedByRankZero, Seq2SeqError

log = logging.getLogger(__name__)

HOST = torch.device("cpu")  # where checkpoints keep their tensors and search returns its results
DEVICES = "auto, cpu, cuda, cuda:N or mps"
# Generous: ranks wait at a collective while rank 0 validates and writes checkpoints.
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=2)
CLOSE_TIMEOUT = datetime.timedelta(minutes=1)
_DTYPES = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class Topology:
    """Where this process stands among torchrun's processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @classmethod
    def from_env(cls) -> Topology:
        env = os.environ
        world = int(env.get("WORLD_SIZE", 1))
        return cls(
            rank=int(env.get("RANK", 0)),
            world_size=world,
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
        )


def available_cores() -> int:
    """Cores this process may run on (its affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_threads(local_world_size: int) -> int:
    """``$OMP_NUM_THREADS`` if set, else this process's share of the cores."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, available_cores() // max(1, local_world_size))


def resolve_device(name: str, topology: Topology) -> torch.device:
    """The device named by ``device=`` (auto: CUDA when present); under torchrun, CUDA means the
    GPU of this process's local rank."""
    name = str(name).strip().lower()
    cuda_ok = torch.cuda.is_available()
    if name == "auto":
        name = "cuda" if cuda_ok else "cpu"
    if name == "cpu":
        return HOST
    if name == "mps":
        if not torch.backends.mps.is_available():
            raise Seq2SeqError("device=mps, but this machine has no usable MPS (Apple GPU)")
        return torch.device("mps")
    if name == "cuda" or name.startswith("cuda:"):
        if not cuda_ok:
            raise Seq2SeqError(f"device={name}, but torch finds no CUDA GPU here: use device=cpu")
        count = torch.cuda.device_count()
        if name == "cuda":
            index = topology.local_rank
        elif topology.world_size > 1:
            raise Seq2SeqError(
                f"device={name} under torchrun: say device=cuda, and each process takes the GPU "
                "of its local rank"
            )
        else:
            index = int(name[5:]) if name[5:].isdigit() else -1
        if not 0 <= index < count:
            raise Seq2SeqError(f"device={name}: this machine has CUDA devices 0 to {count - 1}")
        return torch.device("cuda", index)
    raise Seq2SeqError(f"unknown device {name!r}: choose {DEVICES}")


def check_precision(precision: Precision, device: torch.device) -> None:
    """Refuse what cannot run; warn where bf16 runs but slowly."""
    precision = Precision(precision)
    if precision == Precision.fp16 and device.type != "cuda":
        raise Seq2SeqError(
            f"precision fp16 needs CUDA (loss scaling); on {device.type} use bf16 or fp32"
        )
    if precision != Precision.bf16:
        return
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise Seq2SeqError(f"{torch.cuda.get_device_name(device)} has no bf16: use fp16")
    if device.type == "cpu" and not torch.cpu._is_avx512_bf16_supported():
        log.warning("this CPU has no native bf16 (no AVX512-BF16/AMX): bf16 will be slow")


class Engine:
    """Device, precision and (under torchrun) the process group of this process."""

    def __init__(
        self,
        device: torch.device,
        precision: Precision,
        topology: Topology,
        host_group: Any = None,
    ) -> None:
        self.device, self.precision, self.topology = device, Precision(precision), topology
        self._host_group = host_group  # gloo group for host-side objects and flags

    @classmethod
    def create(
        cls,
        device: str = "auto",
        precision: Precision | str = Precision.fp32,
        threads: int = 0,
        seed: int | None = None,
        distributed: bool = False,
    ) -> Engine:
        """Threads, device and precision checked; with ``distributed``, join torchrun's group."""
        topology = Topology.from_env() if distributed else Topology()
        torch.set_num_threads(threads or default_threads(topology.local_world_size))
        dev = resolve_device(device, topology)
        check_precision(Precision(precision), dev)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        host_group = None
        if topology.world_size > 1:
            backend = "nccl" if dev.type == "cuda" else "gloo"
            dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
            host_group = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD
        if seed is not None:
            torch.manual_seed(seed)
        return cls(dev, Precision(precision), topology, host_group)

    def close(self) -> None:
        """Leave the process group, if any, once every rank has come to leave it: a rank that
        tears it down while another still uses it, or exits without leaving, aborts. A rank
        that does not come within a minute (it failed elsewhere) is not waited for longer."""
        if not (self.distributed and dist.is_initialized()):
            return
        with contextlib.suppress(RuntimeError):
            dist.monitored_barrier(group=self._host_group, timeout=CLOSE_TIMEOUT)
        dist.destroy_process_group()

    # -- where this process stands ---------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.topology.rank

    @property
    def world_size(self) -> int:
        return self.topology.world_size

    @property
    def distributed(self) -> bool:
        return self.topology.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and logs."""
        return self.topology.rank == 0

    def describe(self) -> str:
        """One line for the log: device, precision, processes and threads."""
        where = str(self.device)
        if self.device.type == "cuda":
            where += f" ({torch.cuda.get_device_name(self.device)})"
        ranks = f", {self.world_size} processes" if self.distributed else ""
        threads = torch.get_num_threads()
        each = " each" if self.distributed else ""
        plural = "s" if threads != 1 else ""
        return f"{where}, {self.precision.value}{ranks}, {threads} thread{plural}{each}"

    # -- computation -----------------------------------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16/fp16 autocast on this device (fp32 master weights), or nothing for fp32."""
        dtype = _DTYPES.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def for_inference(self, model: nn.Module) -> nn.Module:
        """``model`` on this device; under bf16/fp16 its weights in that precision too, since
        autocast would cast them again at every step (nothing is trained, so no fp32 masters)."""
        model.to(self.device)
        dtype = _DTYPES.get(self.precision)
        return model.to(dtype) if dtype is not None else model

    def to_device(self, batch: Batch) -> Batch:
        """The batch on this device; from pinned memory without blocking on CUDA."""
        if self.device == HOST:
            return batch
        return batch.to(self.device, pin=self.device.type == "cuda")

    def prefetch(self, items: Iterable[T], prepare: Callable[[T], U]) -> Iterator[U]:
        """``prepare(item)`` for each item, one item ahead of the consumer: on CUDA the next
        batch is collated and its copy started while the current update runs."""
        iterator = iter(items)
        sentinel = object()
        ahead: Any = next(iterator, sentinel)
        if ahead is not sentinel:
            ahead = prepare(ahead)
        while ahead is not sentinel:
            current = ahead
            following = next(iterator, sentinel)
            ahead = following if following is sentinel else prepare(following)
            yield current

    @property
    def check_every(self) -> int:
        """Search steps between looks at the device: every step on the host (looking is free
        there, and finished sentences leave the batch at once), every 8 on an accelerator."""
        return 1 if self.device == HOST else 8

    def synchronize(self) -> None:
        """Wait for queued device work (for honest timings)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def max_memory_allocated(self) -> int | None:
        """Peak bytes of device memory allocated by tensors (CUDA), else None."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.device)

    def reset_peak_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    # -- between processes (every call is a no-op for one process) -------------------------------

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self._host_group)

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self._host_group)
        return box[0]

    def from_main(self, produce: Callable[[], T]) -> T:
        """Rank 0's ``produce()`` on every rank. A user error there stops every rank with the
        same message, instead of leaving the others waiting for rank 0."""
        if not self.distributed:
            return produce()
        outcome: tuple[bool, Any] = (False, None)
        error: Seq2SeqError | None = None
        if self.is_main:
            try:
                outcome = (True, produce())
            except Seq2SeqError as e:
                error, outcome = e, (False, str(e))
        ok, value = self.broadcast(outcome)
        if error is not None:
            raise error
        if not ok:
            raise ReportedByRankZero(value)
        return value

    def gather(self, obj: T) -> list[T] | None:
        """Every rank's ``obj`` in rank order on rank 0; None on the others."""
        if not self.distributed:
            return [obj]
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0, group=self._host_group)
        return out

    def max_over_ranks(self, value: int) -> int:
        """The largest ``value`` of all ranks (a flag any rank may raise)."""
        if not self.distributed:
            return value
        flag = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._host_group)
        return int(flag.item())

    def sum_over_ranks(self, values: Sequence[float]) -> list[float]:
        """Element-wise sums of ``values`` over all ranks (host numbers, for logging)."""
        if not self.distributed:
            return list(values)
        total = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(total, group=self._host_group)
        return total.tolist()

    # -- random state ----------------------------------------------------------------------------

    def rng_state(self) -> dict[str, Tensor]:
        """This process's random state: the CPU generator and, on CUDA, the device's."""
        state = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def set_rng_state(self, state: dict[str, Tensor]) -> None:
        torch.set_rng_state(state["cpu"])
        if self.device.type == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], self.device)

    def compile(self, model: nn.Module) -> None:
        """torch.compile the model's per-step work, shapes dynamic (every batch size and
        source length share one compiled unit); the first batches pay for compiling."""
        model.compile_steps(lambda fn: torch.compile(fn, dynamic=True))

    # -- training --------------------------------------------------------------------------------

    def updater(self, model: nn.Module, tcfg: TrainConfig) -> Updater:
        """The model on this device (wrapped for DDP under torchrun), its optimizer and step."""
        return Updater(self, model, tcfg)

    @contextlib.contextmanager
    def stop_signals(self) -> Iterator[StopRequest]:
        """SIGINT/SIGTERM request a stop at the next update boundary; a second one aborts.

        Under torchrun a signal often arrives twice at once (Ctrl-C reaches every process of
        the terminal, and the launcher passes it on): a repeat within a second is the same one.
        """
        request = StopRequest()
        repeat_window = 1.0 if self.distributed else 0.0

        def handler(signum: int, _frame: Any) -> None:
            if request.signal:
                if time.monotonic() - request.at > repeat_window:
                    raise KeyboardInterrupt
                return
            request.signal, request.at = signum, time.monotonic()
            log.warning("signal %d: stopping after this update (send again to abort)", signum)

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield request
        finally:
            for s, old in previous.items():
                signal.signal(s, old)

    def agreed_stop(self, request: StopRequest) -> int:
        """The signal any rank received (0: none), the same answer on every rank."""
        return self.max_over_ranks(request.signal)


@dataclass
class StopRequest:
    signal: int = 0  # the first SIGINT/SIGTERM this process received
    at: float = 0.0  # when (time.monotonic)


@dataclass
class StepResult:
    """One update: this rank's summed loss (a device tensor: read it rarely) and what happened."""

    loss_sum: Tensor
    grad_norm: float
    applied: bool  # False: non-finite gradients (or an fp16 overflow), parameters unchanged
    finite_loss: bool


def build_optimizer(model: nn.Module, tcfg: TrainConfig, device: torch.device) -> torch.optim.Adam:
    """Adam over all parameters; fused (one pass per tensor) where the device has the kernel."""
    return torch.optim.Adam(
        model.parameters(),
        lr=tcfg.lr,
        betas=tuple(tcfg.betas),
        weight_decay=tcfg.weight_decay,
        fused=device.type in ("cpu", "cuda"),
    )


class Updater:
    """The training step: forward (the model returns its loss), backward, gradient clipping and
    the optimizer step, over ``accumulate`` micro-batches and, under torchrun, every rank.

    The loss of an update is summed over all its target tokens and divided by their number (on
    every rank together), so an update is the same however its batch is split.
    """

    def __init__(self, engine: Engine, model: nn.Module, tcfg: TrainConfig) -> None:
        self.engine, self.tcfg = engine, tcfg
        self.module = model.to(engine.device)
        if tcfg.compile:
            engine.compile(self.module)
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
                with self.engine.autocast():
                    loss, _ = self.model(
                        batch.src,
                        batch.src_lengths,
                        batch.tgt_in,
                        batch.tgt_out,
                        self.tcfg.label_smoothing,
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

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


def to_host(obj: Any, copy: bool = False) -> Any:
    """``obj`` with every tensor inside (dicts, lists, tuples) in host memory; with ``copy``,
    copied even where it is there already."""
    if isinstance(obj, Tensor):
        return obj.detach().to(HOST, copy=copy)
    if isinstance(obj, dict):
        return {key: to_host(value, copy) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_host(value, copy) for value in obj)
    return obj


def process_rank() -> int:
    """torchrun's ``RANK`` of this process, read before any process group exists (0 without)."""
    return int(os.environ.get("RANK", 0))
