"""AER of attention, per run and extraction method, against human links, beside the diagonal
and a statistical aligner: the tables of docs/alignment.md. From the checkout root::

    python scripts/alignment_table.py --pairs ../shared/data/alignment/en-fr.hansards.txt \\
        --gold ../shared/data/alignment/en-fr.hansards.talp \\
        --run bahdanau=runs/align/bahdanau_en_fr --reverse bahdanau=runs/align/bahdanau_fr_en \\
        --aligner eflomal=runs/eflomal_en_fr/intersection.gold.align

Each ``--run NAME=DIR`` is read once per shift (-1, 0, +1): argmax links at each shift, threshold
links at the best one; a ``--reverse NAME=DIR`` of the same name adds the symmetrised links.
With ``--checkpoints``, every kept checkpoint of each run is scored too (AER against updates).
Prints markdown tables, then one JSON line. ``--gold`` may be an aligner's links (1-based
talp, e.g. from ``statistical_align.py --raw-pairs``): the figures are agreement, not accuracy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from seq2seq.config_choices import AlignMethod, Symmetrize
from seq2seq.decoding.aer import Gold, alignment_scores, read_gold
from seq2seq.decoding.forced import ForcedAligner
from seq2seq.decoding.wordalign import (
    Links,
    WordPair,
    extract,
    flipped,
    read_pairs,
    read_pharaoh,
    symmetrize,
)
from seq2seq.runtime.checkpoint import kept_steps
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import load_run
from seq2seq.storage.rundir import kept_checkpoint

SHIFTS = (-1, 0, 1)
THRESHOLD = 0.3


def diagonal(pairs: list[WordPair]) -> list[Links]:
    """Each target word linked to the source word at the same relative position."""
    return [
        {(min(int((j + 0.5) * len(s) / len(t)), len(s) - 1), j) for j in range(len(t))}
        for s, t in pairs
    ]


def read_weights(run_dir: str, checkpoint: str, pairs: list[WordPair], engine: Engine, flip: bool):
    """Word attention of a run reading the pairs (the other way round with ``flip``), per shift."""
    run = load_run(run_dir, checkpoint, engine)
    aligner = ForcedAligner(run.model, run.src_tok, run.tgt_tok, engine)
    read = [(t, s) for s, t in pairs] if flip else pairs
    return {shift: aligner.word_attention(read, shift) for shift in SHIFTS}, run.step


def directions(weights: dict, flip: bool) -> dict[str, list[Links]]:
    """Links per method name, in the pairs' orientation."""
    out = {}
    for shift, per_pair in weights.items():
        out[f"argmax, shift {shift:+d}"] = [extract(w, AlignMethod.argmax) for w in per_pair]
        out[f"threshold {THRESHOLD}, shift {shift:+d}"] = [
            extract(w, AlignMethod.threshold, THRESHOLD) for w in per_pair
        ]
    return {k: [flipped(x) for x in v] for k, v in out.items()} if flip else out


def best(scored: dict[str, dict], prefix: str) -> str:
    return min((k for k in scored if k.startswith(prefix)), key=lambda k: scored[k]["aer"])


def score_run(name: str, args, pairs: list[WordPair], gold: list[Gold], engine: Engine) -> dict:
    """AER of every method of one run (and its reverse run): {method: scores}."""
    forward, step = read_weights(args.runs[name], "best", pairs, engine, flip=False)
    methods = directions(forward, flip=False)
    scored = {k: alignment_scores(v, gold) for k, v in methods.items()}
    if name in args.reverses:
        backward, _ = read_weights(args.reverses[name], "best", pairs, engine, flip=True)
        back = directions(backward, flip=True)
        back_scored = {k: alignment_scores(v, gold) for k, v in back.items()}
        scored.update({f"reverse {k}": v for k, v in back_scored.items()})
        f, b = methods[best(scored, "argmax")], back[best(back_scored, "argmax")]
        for how in Symmetrize:
            both = [symmetrize(x, y, how) for x, y in zip(f, b, strict=True)]
            scored[f"both, {how.value}"] = alignment_scores(both, gold)
    return {"step": step, "methods": scored}


def over_updates(run_dir: str, pairs: list[WordPair], gold: list[Gold], engine: Engine) -> dict:
    """AER (argmax, shift 0) of every kept checkpoint of a run: {step: aer}."""
    out = {}
    for step in sorted(kept_steps(Path(run_dir))):
        run = load_run(run_dir, str(kept_checkpoint(Path(run_dir), step)), engine)
        per_pair = ForcedAligner(run.model, run.src_tok, run.tgt_tok, engine).word_attention(pairs)
        links = [extract(w, AlignMethod.argmax) for w in per_pair]
        out[step] = alignment_scores(links, gold)["aer"]
    return out


def plot(updates: dict, baselines: dict, path: Path) -> None:
    """AER of each run's kept checkpoints against updates, the baselines as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for name, points in updates.items():
        steps = sorted(points)
        ax.plot(steps, [points[s] for s in steps], marker="o", label=name)
    for (name, value), style in zip(baselines.items(), (":", "--", "-."), strict=False):
        ax.axhline(value, color="grey", linestyle=style, label=name)
    ax.set(xlabel="updates", ylabel="AER (argmax, shift 0)", ylim=(0, 1))
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


def _named(items: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, required=True)
    parser.add_argument("--gold", type=Path, required=True)
    parser.add_argument("--run", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--reverse", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--aligner", action="append", default=[], metavar="NAME=LINKS")
    parser.add_argument("--checkpoints", action="store_true")
    parser.add_argument("--plot", type=Path, help="with --checkpoints: AER against updates, PNG")
    args = parser.parse_args()
    args.runs, args.reverses = _named(args.run), _named(args.reverse)
    torch.manual_seed(0)
    pairs = read_pairs(args.pairs)
    gold = read_gold(args.gold, pairs)
    engine = Engine.create("cpu", "fp32", products="pytorch")
    result = {"diagonal": alignment_scores(diagonal(pairs), gold)["aer"]}
    for name, path in _named(args.aligner).items():
        result[name] = alignment_scores(read_pharaoh(path), gold)["aer"]
    baselines = list(result)
    print("| baseline | AER |\n|---|---|")
    print("\n".join(f"| {k} | {v:.3f} |" for k, v in result.items()))
    result["runs"] = {name: score_run(name, args, pairs, gold, engine) for name in args.runs}
    print("\n| run | method | AER | precision | recall |\n|---|---|---|---|---|")
    for name, run in result["runs"].items():
        for method, s in run["methods"].items():
            print(
                f"| {name} | {method} | {s['aer']:.3f} | {s['precision']:.3f} | {s['recall']:.3f} |"
            )
    if args.checkpoints:
        result["updates"] = {n: over_updates(d, pairs, gold, engine) for n, d in args.runs.items()}
        if args.plot is not None:
            plot(result["updates"], {k: result[k] for k in baselines}, args.plot)
    print(json.dumps(result, default=lambda x: float(np.asarray(x))))


if __name__ == "__main__":
    main()
