"""How many shapes graphed training captures in an epoch, and the padding they cost: the buckets
of `seq2seq.training.graphed.Bucket` (rows from the token budget) against rounding the rows too
(the rule before 2026-11-28), over one epoch of a corpus's training pairs as the trainer batches
them, and at which of the first 300 updates each bucket is first met (captured). From the
checkout root, with a trained run's tokenizers::

    python scripts/graph_buckets.py RUN_DIR DATA_DIR [--budgets 1100,2000,8192,16000]

DATA_DIR holds train.<src>.gz and train.<tgt>.gz (the languages of RUN_DIR's config).
"""

from __future__ import annotations

import argparse
import gzip
from dataclasses import astuple
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from seq2seq.data.batching import TokenBatchSampler
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.training.graphed import Bucket, bucket_size


def lengths(tokenizer: Tokenizer, path: Path) -> np.ndarray:
    """Pieces + EOS of every line of a gzipped text file."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return np.array([len(ids) + 1 for ids in tokenizer.encode_batch(lines)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--budgets", default="1100,2000,8192,16000")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    data = OmegaConf.load(args.run_dir / "config.yaml").data
    src = lengths(
        Tokenizer.load(args.run_dir / "src.model"), args.data_dir / f"train.{data.src_lang}.gz"
    )
    tgt = lengths(
        Tokenizer.load(args.run_dir / "tgt.model"), args.data_dir / f"train.{data.tgt_lang}.gz"
    )
    print("budget  rule             buckets  new in 300 updates  batches  target positions")
    for budget in map(int, args.budgets.split(",")):
        batches = TokenBatchSampler(src, tgt, budget, seed=args.seed).batches(0)
        for rule in ("rows by budget", "rows rounded"):
            first: dict[tuple[int, int, int], int] = {}
            real = padded = 0
            for i, ids in enumerate(batches):
                s, t = int(src[ids].max()), int(tgt[ids].max())
                if rule == "rows rounded":
                    key = (bucket_size(len(ids)), bucket_size(s), bucket_size(t))
                else:
                    key = astuple(Bucket.fitting(len(ids), s, t, budget))
                first.setdefault(key, i)
                real, padded = real + int(tgt[ids].sum()), padded + key[0] * key[2]
            early = sorted(i for i in first.values() if i < 300)
            print(
                f"{budget:>6}  {rule:<15}  {len(first):>7}  {len(early):>18}  {len(batches):>7}  "
                f"x{padded / real:.2f}"
            )
            if rule == "rows by budget":
                print(f"        first met at updates {', '.join(map(str, early))}")


if __name__ == "__main__":
    main()
