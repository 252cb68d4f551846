"""Validation BLEU over training minutes of recipe runs, grouped by attention: each group's mean
and the band of its seeds' range (docs/attention.md, "The default"). From the checkout root::

    python scripts/recipe_curves.py runs/recipe/* --out docs/attention_default.png

Reads each run folder's train.log (the validation lines and their times) and config.yaml (the
attention); prints one JSON line per run: attention, seed, updates, best validation BLEU.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

LINE = re.compile(
    r"^\[(?P<time>[\d-]+ [\d:,]+)\].*step (?P<step>\d+) .*valid loss .*BLEU (?P<bleu>[\d.]+)"
)
STAMP = re.compile(r"^\[(?P<time>[\d-]+ [\d:,]+)\]")


def curve(run: Path) -> tuple[list[float], list[float], int]:
    """Minutes since the run's first log line, validation BLEU there, and the last step."""
    start, minutes, bleu, step = None, [], [], 0
    for line in (run / "train.log").read_text().splitlines():
        if (stamp := STAMP.match(line)) is None:
            continue
        when = datetime.strptime(stamp["time"], "%Y-%m-%d %H:%M:%S,%f")
        start = start or when
        if (found := LINE.match(line)) is not None:
            minutes.append((when - start).total_seconds() / 60)
            bleu.append(float(found["bleu"]))
            step = int(found["step"])
    return minutes, bleu, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    groups: dict[str, list[tuple[list[float], list[float]]]] = {}
    for run in args.runs:
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        name, seed = cfg["model"]["attention"]["name"], cfg["train"]["seed"]
        minutes, bleu, step = curve(run)
        groups.setdefault(name, []).append((minutes, bleu))
        print(
            json.dumps(
                {
                    "run": str(run),
                    "attention": name,
                    "seed": seed,
                    "updates": step,
                    "best_val_bleu": max(bleu),
                }
            )
        )
    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    grid = np.linspace(0, 30, 61)
    for name, runs in sorted(groups.items()):
        ends = min(m[-1] for m, _ in runs)
        at = grid[(grid >= max(m[0] for m, _ in runs)) & (grid <= ends)]
        values = np.array([np.interp(at, m, b) for m, b in runs])  # [seeds, points]
        (line,) = ax.plot(at, values.mean(0), label=f"{name} ({len(runs)} seeds)")
        ax.fill_between(at, values.min(0), values.max(0), color=line.get_color(), alpha=0.2, lw=0)
        best = statistics.fmean(max(b) for _, b in runs)
        ax.axhline(best, color=line.get_color(), ls=":", lw=0.8)
    ax.set_title("CPU recipe, 2 cores: validation BLEU (greedy), mean and seeds' range")
    ax.set_xlabel("minutes of training")
    ax.set_ylim(30, None)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(args.out))


if __name__ == "__main__":
    main()
