"""int8 inference on the CPU: PyTorch's dynamic quantization (``quantize_dynamic``) of the
model's linear layers and the encoder's GRU: weights in int8 once, at load; activations
quantized per product as they come.

The decoder's GRU stays fp32: its recurrence calls the ``nn.GRU`` parameters directly
(`seq2seq.model.decoder.gru_cell`), which a quantized GRU module does not have.

PyTorch has several quantized engines for x86 (fbgemm; oneDNN, which reaches Intel's AMX int8
units; ``x86``, which picks between the two per product). Which is fastest depends on the CPU, so
``choose_int8_engine`` times each on a decoding probe of the model before its weights are
packed.
"""

from __future__ import annotations

import copy
import statistics
import time
import warnings

import torch
from torch import nn
from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

from seq2seq.model.linear import Linear
from seq2seq.vocab import BOS

# qnnpack, the fourth engine of x86 builds, is ARM's: far slower than these on x86
INT8_ENGINES = ("x86", "fbgemm", "onednn")
LENGTH = 16  # pieces per sentence, and steps, of the timing probe (Multi30k's captions: ~14)


def int8_engines() -> list[str]:
    """The quantized engines of INT8_ENGINES that this torch build has."""
    supported = set(torch.backends.quantized.supported_engines)
    return [engine for engine in INT8_ENGINES if engine in supported]


def int8_available() -> bool:
    """Whether this torch build has a quantized engine for the CPU (x86, fbgemm or onednn)."""
    return bool(int8_engines())


def use_int8_engine(name: str) -> None:
    """Quantize and multiply int8 through engine ``name`` from now on (before ``quantize_int8``:
    the weights are packed for the engine in use)."""
    if name not in int8_engines():
        raise ValueError(f"int8 engine {name!r} is not in this torch: {', '.join(int8_engines())}")
    torch.backends.quantized.engine = name


def quantize_int8(model: nn.Module) -> nn.Module:
    """``model`` (on the CPU, for inference) with its linear layers and the encoders' GRUs in
    int8, converted in place; embeddings, attention scores and softmax stay fp32."""
    _plain_linears(model)  # the quantized Linear converts nn.Linear only, not a subclass
    with warnings.catch_warnings():  # torch announces the move of quantization to torchao
        warnings.filterwarnings("ignore", message=".*quantiz.* deprecated")
        quantize_dynamic(model, {nn.Linear: default_dynamic_qconfig}, inplace=True)
        for name, module in model.named_modules():
            if name.split(".")[-1] == "encoder":  # the model's, or each ensemble member's
                quantize_dynamic(module, {nn.GRU: default_dynamic_qconfig}, inplace=True)
    return model


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
    saved, seconds = torch.backends.quantized.engine, {}
    try:
        for engine in int8_engines():
            use_int8_engine(engine)
            quantized = quantize_int8(copy.deepcopy(model).eval())
            laps = []
            with torch.no_grad():
                for _ in range(repeats + 1):  # the first pass warms caches up
                    start = time.perf_counter()
                    for src in sources:
                        _probe(quantized, src)
                    laps.append(time.perf_counter() - start)
            seconds[engine] = statistics.mean(laps[1:])
    finally:
        torch.backends.quantized.engine = saved
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


def choose_int8_engine(model: nn.Module) -> tuple[str, dict[str, float]]:
    """The quantized engine that decodes ``model`` fastest on this CPU (``time_int8_engines``),
    and the timings it was chosen by (none where the build has one engine); switches to it."""
    engines = int8_engines()
    seconds = time_int8_engines(model) if len(engines) > 1 else {}
    name = min(seconds, key=seconds.__getitem__) if seconds else engines[0]
    use_int8_engine(name)
    return name, seconds


def _plain_linears(model: nn.Module) -> None:
    """Each ``Linear`` module replaced by an ``nn.Linear`` holding the same parameters."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is Linear:
                plain = nn.Linear(child.in_features, child.out_features, child.bias is not None)
                plain.weight, plain.bias = child.weight, child.bias
                setattr(parent, name, plain)
