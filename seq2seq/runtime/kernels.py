"""Which kernels multiply on the CPU: the fp32 path (oneDNN or PyTorch's BLAS) and int8's
quantized engine, each set or chosen by timing it on the model, and held by the engine's
`Kernels`, which puts them in force only around the model's work (``scope``).

Both choices are timed because the faster kernel depends on the CPU (docs/performance.md, "What
the defaults choose"); the model (`seq2seq.model.linear`, `seq2seq.model.quantize`) only knows
how to multiply through each.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import statistics
import time
from collections.abc import Iterator

import torch
from torch import nn

from seq2seq.config_choices import Int8Engine, Products
from seq2seq.errors import Seq2SeqError
from seq2seq.model.linear import PRODUCTS, Linear, linear, onednn_available, products
from seq2seq.model.quantize import quantize_int8
from seq2seq.vocab import BOS

log = logging.getLogger("seq2seq.runtime.engine")  # the engine's choices, in its log

# oneDNN keeps a compiled kernel with its buffers for every matrix shape it meets, up to 1024 of
# them; 64 keeps the speed at a fraction of the memory (docs/performance.md)
KERNEL_CACHE = 64
KERNEL_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
# Rows of the products timed for training: a validation's decoding step of 64 sentences, a beam
# of 5 over them, and the projections of all steps at once (~1,000 target pieces); a smaller
# probe chose the slower path (docs/performance.md, "Levers")
TRAINING_ROWS = (64, 320, 1024)
# for the inference commands: a decoding step of 64 sentences and a beam of 5 over them, forward
# only (what a search multiplies, in a tenth of the training timing's seconds)
DECODING_ROWS = (64, 320)
# qnnpack, the fourth engine of x86 builds, is ARM's: far slower than these on x86
INT8_ENGINES = ("x86", "fbgemm", "onednn")
LENGTH = 16  # pieces per sentence, and steps, of the int8 probe (Multi30k's captions: ~14)


def limit_kernel_cache(environ: dict[str, str] | None = None) -> str:
    """Keep oneDNN's kernels for at most KERNEL_CACHE shapes: a process setting, made by a
    command (the engine) before its first product, not at import; the environment's own value
    wins. What was done, for the log."""
    environ = os.environ if environ is None else environ
    if KERNEL_CACHE_VARIABLE in environ:
        return f"kernels of {environ[KERNEL_CACHE_VARIABLE]} shapes kept (the environment's)"
    environ[KERNEL_CACHE_VARIABLE] = str(KERNEL_CACHE)
    return f"kernels of {KERNEL_CACHE} shapes kept ({KERNEL_CACHE_VARIABLE}={KERNEL_CACHE})"


def time_products(
    model: nn.Module, rows: tuple[int, ...] = TRAINING_ROWS, repeats: int = 3, backward: bool = True
) -> dict[str, float]:
    """Seconds (median of ``repeats``) of one forward (and with ``backward``, its backward)
    product through each of the model's distinct ``Linear`` shapes at each row count of
    ``rows``, on each path."""
    shapes = sorted(
        {(m.in_features, m.out_features) for m in model.modules() if isinstance(m, Linear)}
    )
    gen = torch.Generator().manual_seed(0)  # not the global one: the run's draws stay its own
    inputs = [
        (
            torch.randn(n, i, generator=gen, requires_grad=backward),
            torch.randn(o, i, generator=gen, requires_grad=backward),
        )
        for n in rows
        for i, o in shapes
    ]
    seconds = {}
    for name in PRODUCTS:
        laps = []
        with products(name), torch.set_grad_enabled(backward):
            for _ in range(repeats + 1):  # the first pass warms caches up
                start = time.perf_counter()
                for x, w in inputs:
                    y = linear(x, w)
                    if backward:
                        y.sum().backward()
                laps.append(time.perf_counter() - start)
        seconds[name] = statistics.median(laps[1:])
    return seconds


def fastest_products(model: nn.Module, training: bool) -> tuple[str, dict[str, float]]:
    """The faster fp32 CPU path for this model on this CPU (PyTorch's where oneDNN is absent),
    timed as ``training`` multiplies (forward and backward) or as a search does (forward, at
    DECODING_ROWS); with the timings it was chosen by."""
    if not onednn_available():
        return "pytorch", {}
    if training:
        seconds = time_products(model)
    else:
        seconds = time_products(model, DECODING_ROWS, backward=False)
    return min(seconds, key=seconds.__getitem__), seconds


def products_timing(seconds: dict[str, float], training: bool) -> str:
    """Why `fastest_products` chose as it did, for the log."""
    if not seconds:
        return "no oneDNN in this torch"
    timed = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in seconds.items())
    how = "forward and backward" if training else "forward, a decoding step's rows"
    return f"timed on the model's shapes, {how}: {timed}"


def int8_engines() -> list[str]:
    """The quantized engines of INT8_ENGINES that this torch build has."""
    supported = set(torch.backends.quantized.supported_engines)
    return [engine for engine in INT8_ENGINES if engine in supported]


def int8_available() -> bool:
    """Whether this torch build has a quantized engine for the CPU (x86, fbgemm or onednn)."""
    return bool(int8_engines())


@contextlib.contextmanager
def int8_engine(name: str | None) -> Iterator[None]:
    """Quantize and multiply int8 through engine ``name`` inside the block (weights are packed
    for the engine in force when they are quantized); None leaves PyTorch's as it is."""
    if name is None:
        yield
        return
    if name not in int8_engines():
        raise ValueError(f"int8 engine {name!r} is not in this torch: {', '.join(int8_engines())}")
    saved, torch.backends.quantized.engine = torch.backends.quantized.engine, name
    try:
        yield
    finally:
        torch.backends.quantized.engine = saved


def time_int8_engines(
    model: nn.Module, rows: tuple[int, ...] = (64, 320), repeats: int = 2
) -> dict[str, float]:
    """Seconds (mean of ``repeats``) of a greedy decoding probe (``_probe``) of a copy of
    ``model`` quantized by each engine of this build, ``rows`` sentences at a time (a greedy
    batch of 64, and a beam of 5 over it). The whole model is timed, batches shrinking as in a
    search: products of fixed sizes, or a teacher-forced pass, chose another engine than the one
    that decodes fastest (docs/performance.md, "What the defaults choose")."""
    vocab = model.encoder.embedding.num_embeddings
    gen = torch.Generator().manual_seed(0)
    sources = [torch.randint(4, vocab, (n, LENGTH), generator=gen) for n in rows]
    seconds = {}
    for name in int8_engines():
        with int8_engine(name), torch.no_grad():
            quantized = quantize_int8(copy.deepcopy(model).eval())
            laps = []
            for _ in range(repeats + 1):  # the first pass warms caches up
                start = time.perf_counter()
                for src in sources:
                    _probe(quantized, src)
                laps.append(time.perf_counter() - start)
        seconds[name] = statistics.mean(laps[1:])
    return seconds


def _probe(model: nn.Module, src: torch.Tensor) -> None:
    """``LENGTH`` greedy steps over src [B, S], a sixteenth of the batch finishing at each step
    (a search's batch shrinks, and each new row count is a new shape for some engines)."""
    enc = model.encode(src, torch.full((src.size(0),), src.size(1)))
    state = model.decoder.init_state(enc)
    prev = torch.full((src.size(0),), BOS)  # [B]
    drop = max(1, src.size(0) // LENGTH)
    for _ in range(LENGTH):
        log_probs, state, _ = model.decoder.step(prev, state, enc)  # [B, V]
        keep = torch.arange(max(1, log_probs.size(0) - drop))
        prev = log_probs.argmax(-1)[keep]
        enc, state = enc.index_select(keep), state.index_select(keep)


def fastest_int8_engine(model: nn.Module) -> tuple[str, dict[str, float]]:
    """The quantized engine that decodes ``model`` fastest on this CPU (``time_int8_engines``),
    and the timings it was chosen by (none where the build has one engine)."""
    engines = int8_engines()
    seconds = time_int8_engines(model) if len(engines) > 1 else {}
    return (min(seconds, key=seconds.__getitem__) if seconds else engines[0]), seconds


class Kernels:
    """The CPU kernels one engine runs the model with: ``fp32``, the path of fp32 products
    (the setting's, or oneDNN where this torch has it until ``products=auto`` is timed), and
    ``int8``, the quantized engine once chosen. Nothing changes outside ``scope``."""

    def __init__(self, setting: Products, int8_setting: Int8Engine) -> None:
        self.setting, self.int8_setting = setting, int8_setting
        self.fp32 = setting.value if setting != Products.auto else "onednn"
        if not onednn_available():
            self.fp32 = "pytorch"
        self.int8: str | None = None

    def choose_int8(self, model: nn.Module) -> str:
        """The quantized engine: the setting's (refused if this torch lacks it), or the fastest
        on a decoding probe of ``model``; chosen and logged once (an ensemble's members share
        it)."""
        if self.int8 is not None:
            return self.int8
        name = self.int8_setting.value
        if self.int8_setting != Int8Engine.auto:
            if name not in int8_engines():
                have = ", ".join(int8_engines())
                raise Seq2SeqError(f"int8_engine={name}: this torch has {have} (or auto)")
            why = f"int8_engine={name}"
        else:
            with products(self.fp32):  # the unquantized products as they will run
                name, seconds = fastest_int8_engine(model)
            timed = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in seconds.items())
            why = f"timed on a decoding probe: {timed}" if timed else "the only one here"
        log.info("int8 engine: %s (%s)", name, why)
        self.int8 = name
        return name

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """These kernels in force for the model's work inside the block: the fp32 path for this
        thread, the int8 engine for the process (torch has one), each restored after."""
        with products(self.fp32), int8_engine(self.int8):
            yield
