"""The host's work on a graphed search's results, per batch: what `SearchGraphs.searches` does
while the device runs the next batch's first chunks (on a GPU it is hidden there). The calls that
build a batch's n-best lists from its host copies (`greedy_results`, `backtrack`) are timed
inside `decode_sources` with graphs, on the CPU, where the chunks themselves run eagerly (their
time there says nothing of a GPU's). From the checkout root, with a trained run::

    python scripts/search_host_work.py RUN_DIR DATA_DIR [--beams 1,5] [--threads 1]

DATA_DIR holds test_2016_flickr.<src>.gz (the source language of RUN_DIR's config).
"""

from __future__ import annotations

import argparse
import gzip
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

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
    graphed.greedy_results = timed(graphed.greedy_results, spent)
    graphed.backtrack = timed(graphed.backtrack, spent)
    model = run.model.eval()
    for beam in map(int, args.beams.split(",")):
        cfg = DecodeConfig(beam_size=beam, batch_size=64)
        graphs = graphed.SearchGraphs(engine)
        decode_sources(model, sources, cfg, graphs=graphs)  # the shapes' buffers made
        spent.clear()
        decode_sources(model, sources, cfg, graphs=graphs)
        per_batch = sorted(spent)[len(spent) // 2] * 1e3
        print(
            f"beam {beam}: {len(spent)} batches of {cfg.batch_size}, the results' host work "
            f"{sum(spent) / len(spent) * 1e3:.2f} ms a batch on average (median {per_batch:.2f})"
        )


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
