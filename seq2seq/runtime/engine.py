"""The runtime of one process: its device, precision, threads and random state.

The only module that picks a device or builds an autocast context. The engine is also this
process's place in torchrun's process group (`seq2seq.runtime.distributed.ProcessGroup`);
the training step is `seq2seq.training.updater`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from seq2seq.config import LoadConfig
from seq2seq.config_choices import Int8Engine, Precision, Products
from seq2seq.data.batching import Batch
from seq2seq.data.stream import available_cores
from seq2seq.errors import Seq2SeqError
from seq2seq.model.quantize import quantize_int8
from seq2seq.runtime.distributed import ProcessGroup, Topology, join
from seq2seq.runtime.heap import allocator_setting, keep_freed_memory
from seq2seq.runtime.kernels import (
    Kernels,
    fastest_products,
    int8_available,
    limit_kernel_cache,
    products_timing,
)
from seq2seq.runtime.precision import fastest_precision, native_bf16, off_cpu

log = logging.getLogger(__name__)

HOST = torch.device("cpu")  # where checkpoints keep their tensors and search returns its results

DEVICES = "auto, cpu, cuda, cuda:N or mps"
_DTYPES = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}

T = TypeVar("T")
U = TypeVar("U")


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
        return torch.device("cpu")
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
    if precision == Precision.int8 and (device.type != "cpu" or not int8_available()):
        where = "this torch has no quantized CPU engine" if device.type == "cpu" else device.type
        raise Seq2SeqError(f"precision int8 runs on the CPU only ({where}): use bf16 or fp32")
    if precision == Precision.fp16 and device.type != "cuda":
        raise Seq2SeqError(f"precision fp16 needs CUDA; on {device.type} use bf16 or fp32")
    if precision != Precision.bf16:
        return
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise Seq2SeqError(f"{torch.cuda.get_device_name(device)} has no bf16: use fp16")
    if device.type == "cpu" and not native_bf16():
        log.warning("this CPU has no native bf16 (no AVX512-BF16/AMX): bf16 will be slow")


class Engine(ProcessGroup):
    """Device and precision of this process, and (under torchrun) its process group."""

    def __init__(
        self,
        device: torch.device,
        precision: Precision,
        topology: Topology,
        host_group: Any = None,
        products: Products | str = Products.auto,
        int8_engine: Int8Engine | str = Int8Engine.auto,
    ) -> None:
        super().__init__(topology, host_group)
        self.device, self.precision = device, Precision(precision)
        self.kernels = Kernels(Products(products), Int8Engine(int8_engine))
        self.compiled = False  # the search step compiled (decoding's compile=true)

    @classmethod
    def create(
        cls,
        device: str = "auto",
        precision: Precision | str = Precision.fp32,
        threads: int = 0,
        seed: int | None = None,
        distributed: bool = False,
        products: Products | str = Products.auto,
        int8_engine: Int8Engine | str = Int8Engine.auto,
    ) -> Engine:
        """Threads, device and precision checked; with ``distributed``, join torchrun's group.
        The process settings of a command on the CPU, logged: oneDNN's kernel cache, and the
        allocator as it is (training keeps freed memory later: ``keep_freed_memory``)."""
        topology = Topology.from_env() if distributed else Topology()
        torch.set_num_threads(threads or default_threads(topology.local_world_size))
        dev = resolve_device(device, topology)
        check_precision(Precision(precision), dev)
        if dev.type == "cpu":  # the host's allocator serves the tensors
            log.debug("memory: %s", allocator_setting())  # hydra.verbose=seq2seq shows them
            log.debug("oneDNN: %s", limit_kernel_cache())
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        host_group = join(topology, dev)
        if seed is not None:
            torch.manual_seed(seed)
        return cls(dev, Precision(precision), topology, host_group, products, int8_engine)

    def keep_freed_memory(self) -> None:
        """From now on keep freed memory for reuse (the CPU's training steps; data preparation
        before it keeps the allocator's smaller footprint); logged."""
        if self.device.type == "cpu":
            log.debug("memory: %s", keep_freed_memory())

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

    def choose_precision(
        self,
        model: nn.Module,
        vocab: tuple[int, int],
        tokens: int,
        kept: str | None = None,
        graphed: bool = False,
    ) -> Precision:
        """``precision=auto`` made concrete: a resumed run's choice (``kept``); off the CPU
        `off_cpu`'s (bf16 where a CUDA update is ``graphed``); on the CPU the faster of fp32 and
        bf16 timed on a training step of ``model`` over ``tokens`` target pieces by rank 0
        (every rank follows); logged with why."""
        if self.precision != Precision.auto:
            return self.precision
        if kept is not None:
            chosen, why = Precision(kept), "the run's choice before it was resumed"
        elif self.device.type != "cpu":
            chosen, why = off_cpu(self.device, graphed)
        else:
            chosen, why = self.from_main(lambda: _timed(self.kernels, model, vocab, tokens))
        self.precision = chosen
        log.info("precision=auto: %s (%s)", chosen.value, why)
        return self.precision

    def choose_products(self, model: nn.Module, *, training: bool, kept: str | None = None) -> str:
        """The fp32 CPU products for ``model``: the setting's, a resumed run's (``kept``), or the
        faster of the two timed on its shapes by rank 0 (every rank follows) as ``training`` or a
        search multiplies; logged with why."""
        kernels = self.kernels
        if self.device.type != "cpu" or self.precision not in (Precision.fp32, Precision.auto):
            return self.products_in_use()
        if kernels.setting != Products.auto:
            name, why = kernels.setting.value, f"products={kernels.setting.value}"
        elif kept is not None:
            name, why = kept, "the run's choice before it was resumed"
        else:
            name, seconds = self.from_main(lambda: fastest_products(model, training))
            why = products_timing(seconds, training)
        kernels.fp32 = name
        log.info("fp32 products on the CPU: %s (%s)", name, why)
        return self.products_in_use()

    def products_in_use(self) -> str:
        """The path of this engine's matrix products: the fp32 CPU choice, else PyTorch's own
        (other devices and precisions multiply in PyTorch)."""
        if self.device.type != "cpu" or self.precision != Precision.fp32:
            return "pytorch"
        return self.kernels.fp32

    def choose_int8_engine(self, model: nn.Module) -> str:
        """The quantized engine for ``model``: the setting's, or the fastest on a decoding probe
        of it; chosen and logged once (an ensemble's members share it)."""
        return self.kernels.choose_int8(model)

    def compute(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """Where the model's work runs: this engine's CPU kernels and, under bf16/fp16, autocast
        on its device (fp32 master weights); ``cache=False`` inside a CUDA graph's capture,
        where cached casts would go stale."""
        stack = contextlib.ExitStack()
        stack.enter_context(self.kernels.scope())
        dtype = _DTYPES.get(self.precision)
        if dtype is not None:
            stack.enter_context(torch.autocast(self.device.type, dtype=dtype, cache_enabled=cache))
        return stack

    def for_inference(self, model: nn.Module) -> nn.Module:
        """``model`` on this device; under bf16/fp16 its weights in that precision too, since
        autocast would cast them again at every step (nothing is trained, so no fp32 masters);
        under int8 its linear layers and encoder GRU quantized once, here."""
        model.to(self.device)
        if self.precision == Precision.int8:
            self.choose_int8_engine(model)
            with self.kernels.scope():  # weights packed for the chosen engine
                return quantize_int8(model)
        dtype = _DTYPES.get(self.precision)
        return model.to(dtype) if dtype is not None else model

    def to_device(self, batch: Batch) -> Batch:
        """The batch on this device; from pinned memory without blocking on CUDA."""
        if self.device.type == "cpu":
            return batch
        return batch.to(self.device)

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
        """torch.compile the model's search step (decoding's ``compile=true``), shapes dynamic
        (every batch size and source length share one compiled unit); the first batches pay for
        compiling."""
        model.compile_steps(lambda fn: torch.compile(fn, dynamic=True))
        self.compiled = True


def engine_choices(engine: Engine) -> dict[str, Any]:
    """What a process runs with, for a command's record: device, precision, threads, the fp32
    products and (once chosen) the int8 engine."""
    return {
        "device": str(engine.device),
        "precision": engine.precision.value,
        "threads": torch.get_num_threads(),
        "products": engine.products_in_use(),
        "int8_engine": engine.kernels.int8,
    }


def inference_engine(cfg: LoadConfig) -> Engine:
    """`Engine.create` for a command that loads a trained run: ``cfg``'s device, precision,
    products and int8 engine."""
    return Engine.create(
        cfg.device, cfg.precision, products=cfg.products, int8_engine=cfg.int8_engine
    )


def _timed(
    kernels: Kernels, model: nn.Module, vocab: tuple[int, int], tokens: int
) -> tuple[Precision, str]:
    """``precision=auto`` on the CPU, and why: the faster precision of a timed training step."""
    with kernels.scope():  # fp32 timed on the products the model will run
        chosen, seconds = fastest_precision(model, vocab, tokens)
    timed = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in seconds.items())
    return chosen, f"a training step timed: {timed}" if timed else "this CPU has no native bf16"
