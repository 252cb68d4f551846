"""How many kernels a GPU launches per time step: of the fixed-shape training update (what a CUDA
graph replays, `seq2seq.training.graphed`) and of the fixed-shape greedy and beam search chunks
(`seq2seq.decoding.graphed`). A replayed graph runs about as long as it holds kernels at the
small batches of these models, so this count, made on the CPU, is the GPU work's proxy.

Every operator dispatched is counted, but views and those that hand back their input (no
kernel); PyTorch's products stand for the CPU's oneDNN ones, and the GRU's gates count as
CUDA's fused cell does (one kernel forward, one backward). From the checkout root::

    python scripts/step_kernels.py [--model peer,luong,bahdanau] [--rows 64] [--source 20]

``peer`` is OpenNMT-py's shape (Luong concat, input feeding); an attention name is the reference
model with it (the GPU recipe's is luong).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, for scripts.speed

from scripts.speed.choices import FULL, model_config  # noqa: E402
from seq2seq.config import DecodeConfig, TrainConfig  # noqa: E402
from seq2seq.decoding import graphed as graphed_search  # noqa: E402
from seq2seq.model import decoder, recurrence  # noqa: E402
from seq2seq.model.linear import products  # noqa: E402
from seq2seq.model.seq2seq import build_model  # noqa: E402
from seq2seq.runtime.engine import Engine  # noqa: E402
from seq2seq.training.graphed import Bucket, StaticBatch, StaticUpdater  # noqa: E402

VIEWS = set(
    [
        "view",
        "_unsafe_view",
        "t",
        "transpose",
        "expand",
        "split",
        "split_with_sizes",
        "chunk",
        "unsqueeze",
        "squeeze",
        "select",
        "slice",
        "as_strided",
        "detach",
        "alias",
        "permute",
        "_reshape_alias",
        "unbind",
        "reshape",
        "empty",
        "empty_strided",
        "empty_like",
        "view_as",
    ]
)
VOCAB = 8000
COMPOSED = recurrence.gru_update  # the gates as the CPU runs them


class Kernels(TorchDispatchMode):
    """Operators dispatched inside the block, views left out; ``paused`` while a stand-in runs."""

    active: list[Kernels] = []

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.paused = False

    def __enter__(self) -> Kernels:
        Kernels.active.append(self)
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        Kernels.active.pop()
        super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        # an out-of-place operator that hands back its input (dropout in eval mode, a cast to
        # the dtype a tensor has) launches nothing
        launched = name.endswith("_") or not args or out is not args[0]
        if not self.paused and name not in VIEWS and launched:
            self.counts[name] += 1
        return out

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@contextlib.contextmanager
def uncounted(kernels: int) -> Iterator[None]:
    """The block counted as ``kernels`` kernels (none outside a count)."""
    mode = Kernels.active[-1] if Kernels.active else None
    if mode is None:
        yield
        return
    mode.counts["fused_gru_cell"] += kernels
    mode.paused = True
    try:
        yield
    finally:
        mode.paused = False


class _FusedGates(torch.autograd.Function):
    """CUDA's fused GRU cell, counted as it runs there: one kernel forward, one backward."""

    @staticmethod
    def forward(ctx, gi, gh, hidden):
        with torch.enable_grad(), uncounted(1):
            ctx.inputs = [x.detach().requires_grad_() for x in (gi, gh, hidden)]
            ctx.out = COMPOSED(*ctx.inputs)
        return ctx.out.detach()

    @staticmethod
    def backward(ctx, grad):
        with uncounted(1):
            return torch.autograd.grad(ctx.out, ctx.inputs, grad)


def fused_gates(gi: Tensor, gh: Tensor, hidden: Tensor) -> Tensor:
    if torch.is_grad_enabled():
        return _FusedGates.apply(gi, gh, hidden)
    with uncounted(1):
        return COMPOSED(gi, gh, hidden)


def training(model_name: str, rows: int, source: int) -> dict:
    """Kernels of one update at target lengths 20 and 30: the total, and per target step."""
    engine = Engine.create("cpu", threads=1, products="pytorch")
    model = build_model(OmegaConf.structured(model_config(model_name, FULL)), VOCAB, VOCAB)
    updater = StaticUpdater(engine, model, TrainConfig(cuda_graphs="true"))
    totals = {}
    for length in (20, 30):
        x = StaticBatch(Bucket(rows, source, length), engine.device, False)
        for t in (x.src, x.tgt_in, x.tgt_out):
            t.random_(4, VOCAB)
        x.src_lengths.fill_(source)
        x.scale.fill_(1 / (rows * length))
        for _ in range(2):  # the second update, after Adam's state is made
            updater.optimizer.zero_grad(set_to_none=True)
            with Kernels() as mode:
                updater.update(x)
        totals[length] = mode.total
    return {"update_at_20": totals[20], "per_target_step": (totals[30] - totals[20]) / 10}


def search(model_name: str, rows: int, source: int, beam_size: int) -> dict[str, float]:
    """Kernels per step of the fixed-shape search's last chunk (CHUNK steps), by operator: a
    later chunk where one ran (greedy search's first also starts the decoder)."""
    engine = Engine.create("cpu", threads=1, products="pytorch")
    model = build_model(OmegaConf.structured(model_config(model_name, FULL)), VOCAB, VOCAB)
    model.eval()
    graphs = graphed_search.SearchGraphs(engine)
    chunks: list[collections.Counter[str]] = []
    original = graphed_search.SearchGraphs._chunk

    def chunk(self, entry, key, run):
        def counted():
            with Kernels() as mode:
                run()
            chunks.append(mode.counts)

        original(self, entry, key, counted)

    graphed_search.SearchGraphs._chunk = chunk
    try:
        src = torch.randint(4, VOCAB, (rows, source))
        cfg = DecodeConfig(beam_size=beam_size, max_len_a=0.0, max_len_b=16)
        graphs.search(model, src, torch.full((rows,), source), cfg)
    finally:
        graphed_search.SearchGraphs._chunk = original
    return {name: n / graphed_search.CHUNK for name, n in sorted(chunks[-1].items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="peer,luong,bahdanau")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--source", type=int, default=20)
    args = parser.parse_args()
    recurrence.gru_update = decoder.gru_update = fused_gates  # the GPU's gates
    rows = []
    with products("pytorch"):
        for name in args.model.split(","):
            row = {"model": name, **training(name, args.rows, args.source)}
            for key, beam in (("greedy", 1), ("beam5", 5)):
                row[f"{key}_ops"] = search(name, args.rows, args.source, beam)
                row[f"{key}_per_step"] = sum(row[f"{key}_ops"].values())
            rows.append(row)
            print(
                f"{name:10s} update {row['update_at_20']:5d} kernels (20 target steps), "
                f"{row['per_target_step']:.0f} per target step; search per step: greedy "
                f"{row['greedy_per_step']:.0f}, beam 5 {row['beam5_per_step']:.0f}"
            )
    print(json.dumps({"rows": args.rows, "source": args.source, "models": rows}))


if __name__ == "__main__":
    main()
