"""The attention comparison's pictures (scripts/attention_table.py --pictures): validation BLEU
curves by row, and every row's attention on the same test sentence."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave

from seq2seq.decoding.heatmap import attention_figure

Groups = dict[tuple[str, str], list[Any]]  # (direction, row): its runs (attention_runs.Run)


def picture_curves(grouped: Groups, path: Path) -> None:
    """Validation BLEU over updates, the mean over seeds of each row and the band of their
    range, a panel per direction."""
    directions = sorted({direction for direction, _ in grouped})
    fig = Figure(figsize=(7 * len(directions), 4.5), dpi=100)
    for i, direction in enumerate(directions):
        ax = fig.add_subplot(1, len(directions), i + 1)
        ax.set_prop_cycle(color=colormaps["tab20"].colors)  # more rows than tab10's colours
        for (where, row), group in sorted(grouped.items()):
            if where != direction:
                continue
            steps = sorted(set.intersection(*(set(r.curve) for r in group)))
            (line,) = ax.plot(
                steps,
                [statistics.fmean(r.curve[s] for r in group) for s in steps],
                marker=".",
                label=f"{row} ({len(group)} seeds)" if len(group) > 1 else row,
            )
            if len(group) > 1:  # the seeds' range around their mean
                low = [min(r.curve[s] for r in group) for s in steps]
                high = [max(r.curve[s] for r in group) for s in steps]
                ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.15, lw=0)
        ax.set_title(f"{direction}: validation BLEU (greedy), mean and range over seeds")
        ax.set_xlabel("updates")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(path))


def picture_heatmaps(grouped: Groups, path: Path) -> None:
    """Every row's attention on the same test sentence (its lowest seed), in one picture, and
    each alone beside it (``attention_<row>.<src>-<tgt>.png``, for the docs' sections)."""
    chosen = {}
    for (direction, row), group in sorted(grouped.items()):
        run = min(group, key=lambda r: r.seed)
        h = run.heatmap
        title = f"{direction} {row} (seed {run.seed}, test sentence {h['sentence']})"
        chosen[title] = attention_figure(np.asarray(h["weights"]), h["source"], h["target"], title)
        pair = direction.replace("→", "-")
        name = re.sub(r"[^\w.-]+", "_", row)  # "luong model.x=y" -> "luong_model.x_y"
        imsave(path.with_name(f"attention_{name}.{pair}.png"), chosen[title])
    columns = min(3, len(chosen))
    rows = -(-len(chosen) // columns)
    fig = Figure(figsize=(6 * columns, 5 * rows), dpi=100)
    for i, image in enumerate(chosen.values()):
        ax = fig.add_subplot(rows, columns, i + 1)
        ax.imshow(image)
        ax.axis("off")
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(path))
