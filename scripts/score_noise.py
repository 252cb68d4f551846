"""How well `seq2seq-score` finds misaligned pairs in a corpus (docs/evaluation.md): every
``--every``-th target of a Multi30k split is swapped for another line's, both scorings
(``normalize=false`` and ``true``) rank the pairs, and the script reports how many of the lowest
scored are the swapped ones, the ranking's AUC, and the perplexity of the clean pairs. From the
checkout root::

    python scripts/score_noise.py runs/quickstart --data-source ../shared/data/multi30k \\
        --split test_2016_flickr --out runs/score_noise

Prints one JSON line with every figure; the noisy files and the scores stay in --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from seq2seq.data.corpus import read_parallel


def swapped(targets: list[str], every: int) -> tuple[list[str], np.ndarray]:
    """The targets with every ``every``-th one replaced by the next such line's target (a
    sentence of the corpus, not of this source); and which lines were swapped."""
    lines = np.arange(0, len(targets), every)
    noisy = list(targets)
    for k, line in enumerate(lines):
        noisy[line] = targets[lines[(k + 1) % len(lines)]]
    return noisy, lines


def ranking(scores: np.ndarray, bad: np.ndarray) -> dict[str, float]:
    """Of the len(bad) lowest scores, the share that are bad; and the AUC: the chance that a
    bad pair scores below a good one (ties count half)."""
    is_bad = np.zeros(len(scores), dtype=bool)
    is_bad[bad] = True
    lowest = np.argsort(scores, kind="stable")[: len(bad)]
    below = (scores[is_bad][:, None] < scores[~is_bad][None, :]).mean()
    ties = (scores[is_bad][:, None] == scores[~is_bad][None, :]).mean()
    return {"found": float(is_bad[lowest].mean()), "auc": float(below + ties / 2)}


def score(run: Path, src: Path, tgt: Path, out: Path, normalize: bool) -> tuple[np.ndarray, dict]:
    """`seq2seq-score` on the two files: each pair's score and the command's JSON result."""
    cmd = [
        sys.executable,
        "-m",
        "seq2seq.commands.score",
        f"run_dir={run}",
        f"src_file={src}",
        f"tgt_file={tgt}",
        f"output={out}",
        f"normalize={str(normalize).lower()}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return np.loadtxt(out), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--data-source", type=Path, required=True)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--every", type=int, default=10, help="swap every N-th target")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    src_lang, tgt_lang = "de", "en"
    src = args.data_source / f"{args.split}.{src_lang}.gz"
    sources, targets = read_parallel(src, args.data_source / f"{args.split}.{tgt_lang}.gz")
    noisy, bad = swapped(targets, args.every)
    files = {"src": args.out / f"noisy.{src_lang}", "tgt": args.out / f"noisy.{tgt_lang}"}
    for key, lines in (("src", sources), ("tgt", noisy)):
        files[key].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    report: dict = {"pairs": len(sources), "swapped": len(bad), "split": args.split}
    for normalize in (False, True):
        name = "per_piece" if normalize else "sum"
        start = time.perf_counter()
        scores, result = score(
            args.run, files["src"], files["tgt"], args.out / f"{name}.scores", normalize
        )
        report[name] = {**ranking(scores, bad), "seconds": round(time.perf_counter() - start, 2)}
        report["noisy_ppl"], report["command"] = result["ppl"], result
    clean = args.out / f"clean.{tgt_lang}"
    clean.write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    _, result = score(args.run, files["src"], clean, args.out / "clean.scores", False)
    report["clean_ppl"] = result["ppl"]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
