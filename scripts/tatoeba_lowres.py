"""The simulated low-resource setting of the back-translation measurement (docs/results.md).

From Tatoeba German-English: the held-out splits of the recipe (experiment=tatoeba_de_en_cpu:
2,000 validation and 2,000 test pairs carved with split_seed 1, no German sentence in two
splits); of the remaining pairs, shuffled with --seed, the first --parallel are the parallel
data, and the English of the next pairs, each sentence once and none that is in the parallel,
validation or test data, up to --mono of them, is the monolingual text; the German each of
them came with is kept apart, to score back-translations, never to train on. Written for
``seq2seq-train data=custom`` and ``seq2seq-backtranslate``::

    python scripts/tatoeba_lowres.py ../shared/data/tatoeba/deu-eng.zip data/tatoeba_lowres
    # train.de.gz train.en.gz valid.* test.* mono.en.gz mono_reference.de.gz split.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from seq2seq.config import TsvDataConfig
from seq2seq.data.readers import open_reader


def write(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("zip", type=Path, help="deu-eng.zip of ../shared/data/tatoeba")
    parser.add_argument("out", type=Path)
    parser.add_argument("--parallel", type=int, default=20000)
    parser.add_argument("--mono", type=int, default=60000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        cfg = OmegaConf.structured(TsvDataConfig)
        cfg.merge_with({"file": str(args.zip), "columns": ["en", "de"], "cache_dir": cache})
        cfg.merge_with({"src_lang": "de", "tgt_lang": "en", "valid_size": 2000})
        cfg.merge_with({"test_size": 2000, "split_seed": 1})
        reader = open_reader(cfg)
        splits = {split: list(reader.stream(split)) for split in ("train", "valid", "test")}
    rest = splits.pop("train")
    random.Random(args.seed).shuffle(rest)
    splits["train"], rest = rest[: args.parallel], rest[args.parallel :]
    seen = {en for pairs in splits.values() for _, en in pairs}
    mono: list[tuple[str, str]] = []
    for de, en in rest:
        if en not in seen and len(mono) < args.mono:
            seen.add(en)
            mono.append((de, en))
    args.out.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        write(args.out / f"{split}.de.gz", [de for de, _ in pairs])
        write(args.out / f"{split}.en.gz", [en for _, en in pairs])
    write(args.out / "mono.en.gz", [en for _, en in mono])
    write(args.out / "mono_reference.de.gz", [de for de, _ in mono])
    facts = {split: len(pairs) for split, pairs in splits.items()}
    facts.update(mono=len(mono), unused_pairs=len(rest), seed=args.seed, source=str(args.zip))
    (args.out / "split.json").write_text(json.dumps(facts, indent=1))
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
