"""Training files for alignment experiments: Multi30k's training split plus gold-aligned pairs.

Aligners are trained on the sentences they align; so is the translation model here. Writes
``<out>/train.<lang>.gz`` (Multi30k's training split, then the pairs of ``--pairs`` repeated
``--repeat`` times) and copies Multi30k's ``val`` and ``test_2016_flickr`` beside them, for
``experiment=hansards_en_fr_cpu`` (``data=custom``, prefixes under ``data/hansards_mix``)::

    python scripts/alignment_data.py --multi30k ../shared/data/multi30k \\
        --pairs ../shared/data/alignment/en-fr.hansards.txt --out data/hansards_mix --repeat 10
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from pathlib import Path

from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.wordalign import read_pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multi30k", type=Path, required=True, help="folder of train.<lang>.gz")
    parser.add_argument("--pairs", type=Path, required=True, help="'source ||| target' lines")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="fr")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    pairs = read_pairs(args.pairs)
    args.out.mkdir(parents=True, exist_ok=True)
    train = read_parallel(*(args.multi30k / f"train.{lang}.gz" for lang in (args.src, args.tgt)))
    for side, lang in enumerate((args.src, args.tgt)):
        lines = train[side]
        extra = [" ".join(pair[side]) for pair in pairs] * args.repeat
        with gzip.open(args.out / f"train.{lang}.gz", "wt", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines + extra)
        print(f"{args.out}/train.{lang}.gz: {len(lines)} + {len(extra)} lines")
        for split in ("val", "test_2016_flickr"):
            shutil.copyfile(args.multi30k / f"{split}.{lang}.gz", args.out / f"{split}.{lang}.gz")


if __name__ == "__main__":
    main()
