"""The host's work on a graphed search's results, per batch: what `SearchGraphs.searches` does
while the device runs the next batch's first chunks (on a GPU it is hidden there). The calls that
build a batch's n-best lists from its host copies (`greedy_results`, `backtrack`) are timed
inside `decode_sources` with graphs, on the CPU, where the chunks themselves run eagerly (their
time there says nothing of a GPU's). Also counted: the operators dispatched per batch outside
the chunks (on a GPU, what no graph holds: each a launch or host work), views included, and of
those the results'. From the checkout root, with a trained run::

    python scripts/search_host_work.py RUN_DIR DATA_DIR [--beams 1,5] [--threads 1]

DATA_DIR holds test_2016_flickr.<src>.gz (the source language of RUN_DIR's config).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from seq2seq.config import DecodeConfig
from seq2seq.decoding import graphed
from seq2seq.decoding.search import decode_sources
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import load_run
from seq2seq.vocab import EOS


def timed(function: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    """``function``, adding the seconds of each call to ``spent``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    return call


class Dispatched(TorchDispatchMode):
    """Operators dispatched while on, by the part of the search they come from (`part`)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.where = ["outside"]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.counts[self.where[-1]] += 1
        return func(*args, **(kwargs or {}))

    def part(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, its operators counted as ``name``'s."""

        def call(*args: Any, **kwargs: Any) -> Any:
            self.where.append(name)
            try:
                return function(*args, **kwargs)
            finally:
                self.where.pop()

        return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    engine = Engine.create("cpu", threads=args.threads)
    run = load_run(args.run_dir)
    path = args.data_dir / f"test_2016_flickr.{run.cfg.data.src_lang}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    sources = [ids + [EOS] for ids in run.src_tok.encode_batch(lines)]
    spent: list[float] = []
    ops = Dispatched()
    for name in ("greedy_results", "backtrack"):
        setattr(graphed, name, ops.part("results", timed(getattr(graphed, name), spent)))
    graphed.SearchGraphs._chunk = ops.part("chunks", graphed.SearchGraphs._chunk)
    model = run.model.eval()
    for beam in map(int, args.beams.split(",")):
        cfg = DecodeConfig(beam_size=beam, batch_size=64)
        graphs = graphed.SearchGraphs(engine)
        decode_sources(model, sources, cfg, graphs=graphs)  # the shapes' buffers made
        spent.clear()
        decode_sources(model, sources, cfg, graphs=graphs)
        batches, average, median = (
            len(spent),
            sum(spent) / len(spent),
            sorted(spent)[len(spent) // 2],
        )
        ops.counts.clear()
        with ops:  # once more, its operators counted
            decode_sources(model, sources, cfg, graphs=graphs)
        outside, results = (ops.counts[k] / batches for k in ("outside", "results"))
        print(
            f"beam {beam}: {batches} batches of {cfg.batch_size}, the results' host work "
            f"{average * 1e3:.2f} ms a batch on average (median {median * 1e3:.2f}); "
            f"operators a batch outside the chunks {outside + results:.0f}, the results' "
            f"{results:.0f}"
        )


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
