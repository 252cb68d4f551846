"""Benchmark of the reference model: training and decoding speed, memory and FLOPs.

It measures whatever the code currently does, through the project's own functions: data from
``read_parallel``/``train_tokenizers``/``encode_corpus``, batches from ``TokenBatchSampler`` and
``collate``, the model from ``build_model``, the training step (``Updater.step``, what
seq2seq-train runs) and ``decode_corpus`` on test_2016_flickr. From the checkout root::

    python scripts/benchmark.py --data-source /path/to/multi30k   # or: python -m scripts.benchmark
    python scripts/benchmark.py --device cuda --precision fp32,bf16,fp16 ...

prints a table, then one JSON line with every figure. ``--quick`` (tiny model and data) is for CI.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, for scripts.speed

from scripts.speed.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
