"""How well `seq2seq-score` finds misaligned pairs in a corpus (docs/evaluation.md): every
``--every``-th target of a Multi30k split is swapped for another line's, the pairs are ranked by
each score, and the script reports how many of the lowest ranked are the swapped ones and the
ranking's AUC. The scores: the sum of log-probabilities, their mean per piece, and with
``--reverse`` (a run of the other direction) its mean per piece and the dual conditional
cross-entropy of Junczys-Dowmunt (2018), which needs both directions to agree. From the checkout
root::

    python scripts/score_noise.py runs/de_en --reverse runs/en_de \\
        --data-source ../shared/data/multi30k --split test_2016_flickr --out runs/score_noise

Prints one JSON line with every figure; the noisy files and the scores stay in --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from seq2seq.data.corpus import read_parallel

LANGS = ("de", "en")  # the --run's source and target


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
    found, auc = float(is_bad[lowest].mean()), float(below + ties / 2)
    return {"found": round(found, 4), "auc": round(auc, 4)}


def score(run: Path, src: Path, tgt: Path, out: Path, normalize: bool) -> tuple[np.ndarray, dict]:
    """`seq2seq-score` on the two files: each pair's score and the command's JSON result."""
    cmd = [sys.executable, "-m", "seq2seq.commands.score", f"run_dir={run}", f"src_file={src}"]
    cmd += [f"tgt_file={tgt}", f"output={out}", f"normalize={str(normalize).lower()}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return np.loadtxt(out), json.loads(proc.stdout.strip().splitlines()[-1])


def dual(forward: np.ndarray, backward: np.ndarray) -> np.ndarray:
    """Junczys-Dowmunt's dual conditional cross-entropy, negated (higher: better): the two
    directions' cross-entropies per piece, their difference plus their mean."""
    h_f, h_b = -forward, -backward
    return -(np.abs(h_f - h_b) + (h_f + h_b) / 2)


def measure(args: argparse.Namespace) -> dict:
    """Every ranking's figures, and the perplexity of the clean and the noisy pairs."""
    src_path, tgt_path = (args.data_source / f"{args.split}.{lang}.gz" for lang in LANGS)
    sources, targets = read_parallel(src_path, tgt_path)
    noisy, bad = swapped(targets, args.every)
    files = {lang: args.out / f"noisy.{lang}" for lang in LANGS}
    clean = args.out / f"clean.{LANGS[1]}"
    for path, lines in ((files["de"], sources), (files["en"], noisy), (clean, targets)):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    report: dict = {"split": args.split, "pairs": len(sources), "swapped": len(bad)}
    total, result = score(args.run, files["de"], files["en"], args.out / "sum.scores", False)
    report |= {"noisy_ppl": result["ppl"], "seconds": result["seconds"], "sum": ranking(total, bad)}
    mean, _ = score(args.run, files["de"], files["en"], args.out / "mean.scores", True)
    report["per_piece"] = ranking(mean, bad)
    _, result = score(args.run, files["de"], clean, args.out / "clean.scores", False)
    report["clean_ppl"] = result["ppl"]
    if args.reverse is not None:
        back, _ = score(args.reverse, files["en"], files["de"], args.out / "back.scores", True)
        report["reverse_per_piece"] = ranking(back, bad)
        report["dual"] = ranking(dual(mean, back), bad)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a de-en run")
    parser.add_argument("--reverse", type=Path, help="an en-de run, for the dual score")
    parser.add_argument("--data-source", type=Path, required=True)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--every", type=int, default=10, help="swap every N-th target")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()
