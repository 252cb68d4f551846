"""TensorBoard logging of a run: scalars, attention heatmaps, decoded samples and HParams.

Everything goes into the run folder's ``tensorboard/`` events, so ``tensorboard --logdir`` on one
run folder, or on a multirun parent holding several, shows alignments forming and compares runs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import unicodedata
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import fontManager
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as hparams_summaries

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.diskfull import quiet_event_writer_threads
from seq2seq.rundir import TENSORBOARD_DIR
from seq2seq.search import Hypothesis
from seq2seq.vocab import EOS

# Metric tags every run declares to the HParams tab, logged or not yet, so that all runs of a
# sweep agree (TensorBoard takes the declaration of the first run it reads for all of them).
HPARAM_METRICS = ("hparams/best_valid_bleu", "hparams/test_bleu")

HParam = float | int | str | bool
log = logging.getLogger(__name__)

_CELL_INCHES = 0.26  # side of one heatmap cell while the figure is below its maximum size
_MAX_INCHES = 16.0
_DPI = 100
_FONT_POINTS = 9.0
_MAX_LABEL_CHARS = 24
_PAD = 0.12  # inches between parts of the figure
_CAPTION = 0.22  # inches taken by the "source" / "generated target" captions
_COLORBAR = 0.15 + 0.45  # inches: the bar and its tick labels
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
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


@dataclass
class AttentionSample:
    """One decoded sentence: texts for the table, subword labels and attention for the heatmap.

    `weights` (array or CPU tensor) is [tgt, src] or [heads, tgt, src]; the pieces include "</s>"
    where the weights have an EOS row or column.
    """

    source: str
    reference: str
    hypothesis: str
    source_pieces: list[str]
    target_pieces: list[str]
    weights: np.ndarray

    def __post_init__(self) -> None:
        weights = np.asarray(self.weights, dtype=np.float32)
        if weights.ndim == 3 and weights.shape[0] == 1:
            weights = weights[0]  # single-head attention reported with a heads axis
        if weights.ndim not in (2, 3):
            raise ValueError(
                f"attention weights must be [tgt, src] or [heads, tgt, src], got {weights.shape}"
            )
        expected = (len(self.target_pieces), len(self.source_pieces))
        if weights.shape[-2:] != expected:
            raise ValueError(
                f"attention weights {weights.shape} do not match {expected[0]} target and "
                f"{expected[1]} source pieces"
            )
        self.weights = weights


def hypothesis_weights(hypothesis: Hypothesis) -> np.ndarray:
    """Where a hypothesis attended: [heads, tgt, src] for multi-head attention, else [tgt, src]."""
    weights = hypothesis.head_attention
    return (hypothesis.attention if weights is None else weights).float().numpy()


def attention_sample(
    source: str,
    reference: str,
    hypothesis: Hypothesis,
    src_ids: Iterable[int],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
) -> AttentionSample:
    """The heatmap sample of one decoded sentence; `src_ids` are its encoded source with EOS."""
    return AttentionSample(
        source=source,
        reference=reference,
        hypothesis=tgt_tok.decode(hypothesis.tokens),
        source_pieces=src_tok.pieces(src_ids),  # ends with "</s>"
        target_pieces=tgt_tok.pieces([*hypothesis.tokens, EOS]),  # the EOS row of the weights
        weights=hypothesis_weights(hypothesis),
    )


@functools.lru_cache(maxsize=1)
def _font_families() -> tuple[str, ...]:
    installed = {font.name for font in fontManager.ttflist}
    return ("DejaVu Sans", *(name for name in _FALLBACK_FONTS if name in installed))


def _label(piece: str) -> str:
    return piece if len(piece) <= _MAX_LABEL_CHARS else piece[: _MAX_LABEL_CHARS - 1] + "…"


def _label_inches(labels: Sequence[str], points: float) -> float:
    """Rough width of the longest label: wide (CJK) characters one em, others 0.62 em."""
    ems = (sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.62 for c in s) for s in labels)
    return max(ems, default=0.0) * points / 72


class _Heatmap:
    """A heatmap figure for one sentence pair, redrawn cheaply for several weight matrices.

    Labels and colour bar are drawn once; each `render` repaints only the cells and the title.
    """

    def __init__(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> None:
        self.shape = n_tgt, n_src = len(tgt_tokens), len(src_tokens)
        if not n_tgt or not n_src:
            raise ValueError(f"a heatmap needs source and target tokens, got {n_src} and {n_tgt}")
        src_labels = [_label(t) for t in src_tokens]
        tgt_labels = [_label(t) for t in tgt_tokens]
        # Laid out by hand in inches: matplotlib's tick and layout machinery costs ~5x the drawing.
        left = _PAD + _CAPTION + _label_inches(tgt_labels, _FONT_POINTS) + _PAD
        top = 2 * _CAPTION + _label_inches(src_labels, _FONT_POINTS) + 2 * _PAD
        right, bottom = _PAD + _COLORBAR + _PAD, _PAD
        cell = min(
            _CELL_INCHES,
            (_MAX_INCHES - left - right) / max(n_src, 1),
            (_MAX_INCHES - top - bottom) / max(n_tgt, 1),
        )
        points = min(_FONT_POINTS, cell * 72 * 0.9)  # labels shrink with the cells of long input
        grid_w, grid_h = max(n_src * cell, 1.6), max(n_tgt * cell, 1.2)
        width, height = left + grid_w + right, top + grid_h + bottom
        text = {"fontfamily": _font_families(), "parse_math": False}

        self.fig = fig = Figure(figsize=(width, height), dpi=_DPI)
        self.canvas = FigureCanvasAgg(fig)
        self.ax = ax = fig.add_axes(
            (left / width, bottom / height, grid_w / width, grid_h / height)
        )
        self.image = ax.imshow(
            np.zeros(self.shape), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto",
            interpolation="nearest", visible=False,
        )  # fmt: skip
        ax.set_xticks([])
        ax.set_yticks([])
        ax.spines[:].set_visible(False)  # the cells are repainted last; no frame to cover
        # Labels sit 0.1 inch from the cells; offsets are in data units (cells) of each axis.
        gap_x, gap_y = 0.1 * n_src / grid_w, 0.1 * n_tgt / grid_h
        for j, label in enumerate(src_labels):
            ax.text(j, -0.5 - gap_y, label, rotation=90, ha="center", va="bottom",
                    fontsize=points, **text)  # fmt: skip
        for i, label in enumerate(tgt_labels):
            ax.text(-0.5 - gap_x, i, label, ha="right", va="center", fontsize=points, **text)
        fig.text((left + grid_w / 2) / width, 1 - (_PAD + _CAPTION) / height, "source",
                 ha="center", va="top", fontsize=9)  # fmt: skip
        fig.text(_PAD / width, (bottom + grid_h / 2) / height, "generated target", rotation=90,
                 ha="left", va="center", fontsize=9)  # fmt: skip
        self.title = fig.text(_PAD / width, 1 - _PAD / height, "", ha="left", va="top",
                              fontsize=10, **text)  # fmt: skip
        cax = fig.add_axes(
            ((left + grid_w + _PAD) / width, bottom / height, 0.15 / width, grid_h / height)
        )
        fig.colorbar(self.image, cax=cax).ax.tick_params(labelsize=8)
        with _quiet_glyphs():
            self.canvas.draw()
        self.background = self.canvas.copy_from_bbox(fig.bbox)
        self.image.set_visible(True)

    def render(self, weights: np.ndarray, title: str = "") -> np.ndarray:
        """The figure with `weights` [tgt, src] and `title`, as an RGB uint8 image [H, W, 3]."""
        weights = np.asarray(weights, dtype=np.float32)
        if weights.shape != self.shape:
            raise ValueError(f"weights {weights.shape} do not match {self.shape} tokens")
        self.canvas.restore_region(self.background)
        self.image.set_data(weights)
        self.ax.draw_artist(self.image)
        self.title.set_text(title)
        with _quiet_glyphs():
            self.fig.draw_artist(self.title)
        return np.asarray(self.canvas.buffer_rgba())[..., :3].copy()


@contextlib.contextmanager
def _quiet_glyphs() -> Iterator[None]:
    """Pieces whose glyphs no installed font has are drawn as boxes; that is not worth a warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        yield


def attention_figure(
    weights: np.ndarray, src_tokens: Sequence[str], tgt_tokens: Sequence[str], title: str = ""
) -> np.ndarray:
    """Heatmap of `weights` [tgt, src] with source pieces across the top, target pieces down.

    Returns an RGB uint8 image [H, W, 3]; the figure grows with the token counts up to 16 inches.
    """
    return _Heatmap(src_tokens, tgt_tokens).render(weights, title)


def attention_statistics(weights_list: Sequence[np.ndarray]) -> dict[str, float]:
    """Mean entropy (nats) and mean largest weight of the attention rows, over all target tokens.

    Each item is [tgt, src] (or [heads, tgt, src]: every head's row counts as one) with rows
    normalised over the real source positions.
    """
    rows = [
        np.asarray(w, dtype=np.float64).reshape(-1, np.shape(w)[-1])
        for w in weights_list
        if np.size(w)
    ]
    if not rows:
        raise ValueError("attention_statistics needs at least one non-empty attention matrix")
    entropy = 0.0
    largest = 0.0
    count = 0
    for p in rows:
        logs = np.log(np.where(p > 0, p, 1.0))
        entropy += float(-(p * logs).sum())
        largest += float(p.max(axis=1).sum())
        count += p.shape[0]
    return {"attention_entropy": entropy / count, "attention_max_weight": largest / count}


def _markdown_cell(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.split())) or " "


def _plain_hparam(value: Any) -> HParam | None:
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def run_hparams(cfg: Any) -> dict[str, HParam]:
    """The main hyperparameters of a run config, with the same keys for every attention type.

    TensorBoard shows the first five names alphabetically, so the attention settings lead.
    """
    attention = cfg.model.attention
    score = getattr(attention, "score", None)
    return {
        "attention": attention.name,
        "attention_heads": int(getattr(attention, "heads", 1)),
        "attention_score": _plain_hparam(score) if score is not None else "-",
        "attention_size": attention.size,
        "batch_tokens": cfg.train.batch_tokens,
        "dropout": cfg.model.dropout,
        "emb_size": cfg.model.emb_size,
        "encoder_layers": cfg.model.encoder_layers,
        "encoder_size": getattr(cfg.model, "encoder_size", None) or cfg.model.hidden_size,
        "hidden_size": cfg.model.hidden_size,
        "input_feed": cfg.model.input_feed,
        "label_smoothing": cfg.train.label_smoothing,
        "lr": cfg.train.lr,
        "seed": cfg.train.seed,
        "tie_embeddings": cfg.model.tie_embeddings,
    }


class Monitor:
    """TensorBoard events of one run folder, in ``<run_dir>/tensorboard``.

    `purge_step` (resuming) hides events an interrupted run logged at or after that step.
    """

    def __init__(self, run_dir: Path | str, purge_step: int | None = None) -> None:
        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self.writer: SummaryWriter | None = None
        self._hparams_written = False
        quiet_event_writer_threads()
        with self._writing():
            self.writer = SummaryWriter(str(self.log_dir), purge_step=purge_step)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Events that cannot be written (a full disk) end TensorBoard logging, said once;
        whatever uses the monitor goes on."""
        try:
            yield
        except OSError as e:
            writer, self.writer = self.writer, None
            log.warning(
                "TensorBoard events could not be written to %s (%s): going on without them",
                self.log_dir,
                e.strerror or e,
            )
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Log each value under its whole tag, e.g. ``{"valid/bleu": 31.2}``."""
        for tag, value in values.items():
            if self.writer is None:
                return
            with self._writing():
                self.writer.add_scalar(tag, float(value), step)

    def attention(self, step: int, samples: Sequence[AttentionSample], split: str = "val") -> None:
        """One heatmap per sample as ``attention/<split>_<i>``; multi-head adds ``.../head_<h>``."""
        for i, sample in enumerate(samples):
            if self.writer is None:
                return
            tag, name = f"attention/{split}_{i}", f"{split} {i}, step {step}"
            heatmap = _Heatmap(sample.source_pieces, sample.target_pieces)
            weights = sample.weights
            if weights.ndim == 2:
                self._add_image(tag, heatmap.render(weights, name), step)
                continue
            mean_title = f"{name}, mean of {len(weights)} heads"
            self._add_image(tag, heatmap.render(weights.mean(axis=0), mean_title), step)
            for h, head in enumerate(weights):
                self._add_image(f"{tag}/head_{h}", heatmap.render(head, f"{name}, head {h}"), step)

    def _add_image(self, tag: str, image: np.ndarray, step: int) -> None:
        if self.writer is not None:
            with self._writing():
                self.writer.add_image(tag, image, step, dataformats="HWC")

    def samples_table(self, step: int, samples: Sequence[AttentionSample]) -> None:
        """A Markdown table of source / reference / hypothesis, logged as text under ``samples``."""
        lines = ["| | source | reference | hypothesis |", "|---|---|---|---|"]
        for i, s in enumerate(samples):
            cells = (_markdown_cell(t) for t in (s.source, s.reference, s.hypothesis))
            lines.append(f"| {i} | " + " | ".join(cells) + " |")
        if self.writer is not None:
            with self._writing():
                self.writer.add_text("samples", "\n".join(lines), step)

    def hparams(self, step: int, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        """Declare this run to the HParams tab (once per Monitor) and log `metrics` at `step`.

        Metric values are plain scalars, so calling again (or from evaluation) updates them.
        """
        if self.writer is None:
            return
        if not self._hparams_written:
            plain = {key: _plain_hparam(value) for key, value in params.items()}
            declared = dict.fromkeys([*HPARAM_METRICS, *metrics], 0.0)
            # Into this run's own event file, unlike SummaryWriter.add_hparams' timestamped subrun.
            with self._writing():
                writer = self.writer._get_file_writer()
                for summary in hparams_summaries(plain, declared):
                    writer.add_summary(summary, step)
                self._hparams_written = True
        self.scalars(step, metrics)

    def flush(self) -> None:
        """Write pending events to disk, so a running TensorBoard shows them now."""
        if self.writer is not None:
            with self._writing():
                self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        if self.writer is not None:
            with self._writing():
                self.writer.close()
            self.writer = None
