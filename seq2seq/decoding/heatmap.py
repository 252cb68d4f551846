"""Attention heatmaps drawn with matplotlib: one figure per sentence pair, as an RGB image.

TensorBoard logging (`seq2seq.decoding.monitor`) and the results pictures
(`scripts/results.py`) draw with it; the figure is laid out by hand, so that repainting it for
each head is cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontManager, FontProperties, findfont, fontManager
from matplotlib.ft2font import FT2Font

_CELL_INCHES = 0.26  # side of one heatmap cell while the figure is below its maximum size
_MAX_INCHES = 16.0
_DPI = 100
_FONT_POINTS = 9.0
_MAX_LABEL_CHARS = 24
_BOX = "\u25a1"  # drawn for a character no installed font has
_PAD = 0.12  # inches between parts of the figure
_CAPTION = 0.22  # inches taken by the "source" / "generated target" captions
_COLORBAR = 0.15 + 0.45  # inches: the bar and its tick labels
_SOURCE_CAPTION = {"ha": "center", "va": "top", "fontsize": 9}
_TARGET_CAPTION = {"rotation": 90, "ha": "left", "va": "center", "fontsize": 9}
_TITLE = {"ha": "left", "va": "top", "fontsize": 10, "parse_math": False}
# Tried after DejaVu Sans (matplotlib's own) for glyphs it lacks, when installed.
_FALLBACK_FONTS = (
    "Noto Sans CJK JP",
    "Noto Sans CJK SC",
    "Noto Sans CJK KR",
    "Source Han Sans",
    "WenQuanYi Zen Hei",
    "Droid Sans Fallback",
    "IPAGothic",
    "Arial Unicode MS",
)


@functools.lru_cache(maxsize=1)
def _font_families() -> tuple[str, ...]:
    installed = {font.name for font in fontManager.ttflist}
    return ("DejaVu Sans", *(name for name in _FALLBACK_FONTS if name in installed))


@functools.lru_cache(maxsize=1)
def _glyphs() -> frozenset[int]:
    """The characters some font of `_font_families` has a glyph for."""
    found: set[int] = set()
    for family in _font_families():
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            path = findfont(FontProperties(family=family), fallback_to_default=False)
            found.update(FT2Font(path).get_charmap())
    return frozenset(found)


def _drawable(text: str) -> str:
    """``text`` with a box for each character no font has: matplotlib would draw one too, with a
    warning, and a filter for it would be the whole process's (heatmaps are drawn on a thread)."""
    glyphs = _glyphs()
    return "".join(c if _has_glyph(c, glyphs) else _BOX for c in text)


def _has_glyph(c: str, glyphs: frozenset[int]) -> bool:
    return c == "\n" or ord(c) in glyphs


def font_list() -> Path:
    """matplotlib's cached list of installed fonts: a font installed later is found once it is
    deleted (matplotlib writes it anew)."""
    return Path(matplotlib.get_cachedir(), f"fontlist-v{FontManager.__version__}.json")


def undrawable(texts: Iterable[str]) -> str:
    """The characters of ``texts`` that no installed font has (drawn as boxes), each once."""
    glyphs = _glyphs()
    return "".join(dict.fromkeys(c for t in texts for c in t if not _has_glyph(c, glyphs)))


def _label(piece: str) -> str:
    piece = _drawable(piece)
    return piece if len(piece) <= _MAX_LABEL_CHARS else piece[: _MAX_LABEL_CHARS - 1] + "…"


def _label_inches(labels: Sequence[str], points: float) -> float:
    """Rough width of the longest label: wide (CJK) characters one em, others 0.62 em."""
    ems = (sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.62 for c in s) for s in labels)
    return max(ems, default=0.0) * points / 72


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where the parts of the figure go, in inches: laid out by hand, as matplotlib's tick and
    layout machinery costs about five times the drawing."""

    left: float
    bottom: float
    grid_w: float
    grid_h: float
    width: float
    height: float
    points: float  # label size: labels shrink with the cells of long input

    @classmethod
    def of(cls, src_labels: Sequence[str], tgt_labels: Sequence[str]) -> _Layout:
        n_src, n_tgt = len(src_labels), len(tgt_labels)
        left = _PAD + _CAPTION + _label_inches(tgt_labels, _FONT_POINTS) + _PAD
        top = 2 * _CAPTION + _label_inches(src_labels, _FONT_POINTS) + 2 * _PAD
        right, bottom = _PAD + _COLORBAR + _PAD, _PAD
        cell = min(
            _CELL_INCHES,
            (_MAX_INCHES - left - right) / max(n_src, 1),
            (_MAX_INCHES - top - bottom) / max(n_tgt, 1),
        )
        grid_w, grid_h = max(n_src * cell, 1.6), max(n_tgt * cell, 1.2)
        width, height = left + grid_w + right, top + grid_h + bottom
        points = min(_FONT_POINTS, cell * 72 * 0.9)
        return cls(left, bottom, grid_w, grid_h, width, height, points)

    def point(self, x: float, y: float) -> tuple[float, float]:
        """A point given in inches, in figure fractions."""
        return (x / self.width, y / self.height)

    def box(self, x: float, y: float, w: float, h: float) -> tuple[float, float, float, float]:
        """A rectangle given in inches, in figure fractions."""
        return (x / self.width, y / self.height, w / self.width, h / self.height)


class Heatmap:
    """A heatmap figure for one sentence pair, redrawn cheaply for several weight matrices.

    Labels and colour bar are drawn once; each `render` repaints only the cells and the title.
    """

    def __init__(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> None:
        self.shape = n_tgt, n_src = len(tgt_tokens), len(src_tokens)
        if not n_tgt or not n_src:
            raise ValueError(f"a heatmap needs source and target tokens, got {n_src} and {n_tgt}")
        src_labels = [_label(t) for t in src_tokens]
        tgt_labels = [_label(t) for t in tgt_tokens]
        lay = _Layout.of(src_labels, tgt_labels)
        self.fig = fig = Figure(figsize=(lay.width, lay.height), dpi=_DPI)
        self.canvas = FigureCanvasAgg(fig)
        self.ax = ax = fig.add_axes(lay.box(lay.left, lay.bottom, lay.grid_w, lay.grid_h))
        self.image = ax.imshow(
            np.zeros(self.shape),
            cmap="viridis",
            vmin=0.0,
            vmax=1.0,
            aspect="auto",
            interpolation="nearest",
            visible=False,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        ax.spines[:].set_visible(False)  # the cells are repainted last; no frame to cover
        self._draw_labels(lay, src_labels, tgt_labels)
        self.title = fig.text(
            *lay.point(_PAD, lay.height - _PAD), "", fontfamily=_font_families(), **_TITLE
        )
        cax = fig.add_axes(lay.box(lay.left + lay.grid_w + _PAD, lay.bottom, 0.15, lay.grid_h))
        fig.colorbar(self.image, cax=cax).ax.tick_params(labelsize=8)
        self.canvas.draw()
        self.background = self.canvas.copy_from_bbox(fig.bbox)
        self.image.set_visible(True)

    def _draw_labels(
        self, lay: _Layout, src_labels: Sequence[str], tgt_labels: Sequence[str]
    ) -> None:
        """Pieces beside the cells (0.1 inch away, in cell units of each axis) and the captions."""
        n_tgt, n_src = self.shape
        gap_x, gap_y = 0.1 * n_src / lay.grid_w, 0.1 * n_tgt / lay.grid_h
        text = {"fontfamily": _font_families(), "parse_math": False, "fontsize": lay.points}
        for j, label in enumerate(src_labels):
            self.ax.text(j, -0.5 - gap_y, label, rotation=90, ha="center", va="bottom", **text)
        for i, label in enumerate(tgt_labels):
            self.ax.text(-0.5 - gap_x, i, label, ha="right", va="center", **text)
        mid_x = lay.left + lay.grid_w / 2
        top_y = lay.height - _PAD - _CAPTION
        self.fig.text(*lay.point(mid_x, top_y), "source", **_SOURCE_CAPTION)
        mid_y = lay.bottom + lay.grid_h / 2
        self.fig.text(*lay.point(_PAD, mid_y), "generated target", **_TARGET_CAPTION)

    def render(self, weights: np.ndarray, title: str = "") -> np.ndarray:
        """The figure with `weights` [tgt, src] and `title`, as an RGB uint8 image [H, W, 3]."""
        weights = np.asarray(weights, dtype=np.float32)
        if weights.shape != self.shape:
            raise ValueError(f"weights {weights.shape} do not match {self.shape} tokens")
        self.canvas.restore_region(self.background)
        self.image.set_data(weights)
        self.ax.draw_artist(self.image)
        self.title.set_text(_drawable(title))
        self.fig.draw_artist(self.title)
        return np.asarray(self.canvas.buffer_rgba())[..., :3].copy()


def attention_figure(
    weights: np.ndarray, src_tokens: Sequence[str], tgt_tokens: Sequence[str], title: str = ""
) -> np.ndarray:
    """Heatmap of `weights` [tgt, src] with source pieces across the top, target pieces down.

    Returns an RGB uint8 image [H, W, 3]; the figure grows with the token counts up to 16 inches.
    """
    return Heatmap(src_tokens, tgt_tokens).render(weights, title)
