"""TensorBoard logging of a run: scalars, attention heatmaps, decoded samples and HParams.

Everything goes into the run folder's ``tensorboard/`` events, so ``tensorboard --logdir`` on one
run folder, or on a multirun parent holding several, shows alignments forming and compares runs.
Heatmaps are drawn by `seq2seq.decoding.heatmap` from the samples of `seq2seq.decoding.alignment`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seq2seq.decoding.alignment import AttentionSample
from seq2seq.storage.rundir import TENSORBOARD_DIR

if TYPE_CHECKING:  # TensorBoard and matplotlib load when a monitor first writes (about a second)
    from torch.utils.tensorboard import SummaryWriter

# Metric tags every run declares to the HParams tab, logged or not yet, so that all runs of a
# sweep agree (TensorBoard takes the declaration of the first run it reads for all of them).
HPARAM_METRICS = ("hparams/best_valid_bleu", "hparams/test_bleu")

HParam = float | int | str | bool
log = logging.getLogger(__name__)

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


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
    feed = getattr(attention, "input_feed", None)
    return {
        "attention": attention.name,
        "attention_heads": int(getattr(attention, "heads", 1)),
        "attention_score": _plain_hparam(score) if score is not None else "-",
        "attention_size": attention.size,
        "batch_tokens": cfg.train.batch_tokens,
        "dropout": cfg.model.dropout,
        "emb_size": cfg.model.emb_size,
        "decoder_layers": getattr(cfg.model, "decoder_layers", 1),
        "encoder_layers": cfg.model.encoder_layers,
        "encoder_size": getattr(cfg.model, "encoder_size", None) or cfg.model.hidden_size,
        "hidden_size": cfg.model.hidden_size,
        "input_feed": "-" if feed is None else str(feed),  # Luong flow only
        "label_smoothing": cfg.train.label_smoothing,
        "lr": cfg.train.lr,
        "seed": cfg.train.seed,
        "tie_embeddings": cfg.model.tie_embeddings,
    }


def event_file(writer: Any) -> Any:
    """The event file a SummaryWriter writes into (its ``file_writer``; a torch without it:
    the private ``_get_file_writer()``); None where neither exists."""
    found = getattr(writer, "file_writer", None)
    if found is None and callable(getattr(writer, "_get_file_writer", None)):
        found = writer._get_file_writer()
    return found


class Monitor:
    """TensorBoard events of one run folder, in ``<run_dir>/tensorboard``.

    `purge_step` hides events logged before at or after that step: a resume's of an interrupted
    run after its last.pt, a new start's (0) of an earlier attempt in the same folder.
    """

    def __init__(self, run_dir: Path | str, purge_step: int | None = None) -> None:
        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self.writer: SummaryWriter | None = None
        self._hparams_written = False
        self._drawing: ThreadPoolExecutor | None = None  # heatmaps drawn while training goes on
        self._said_boxes = False  # that the heatmaps draw some characters as boxes
        from torch.utils.tensorboard import SummaryWriter

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

    def attention(
        self, step: int, samples: Sequence[AttentionSample], split: str = "val", wait: bool = True
    ) -> None:
        """One heatmap per sample as ``attention/<split>_<i>``; multi-head adds ``.../head_<h>``.
        ``wait=False``: drawn on the monitor's own thread, so that the caller goes on (a
        training's validation: about a second on a GPU); `close` waits for them."""
        if wait:
            self._draw(step, samples, split)
            return
        if self._drawing is None:
            self._drawing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="heatmaps")
        self._drawing.submit(self._draw_or_say, step, samples, split)

    def _draw_or_say(self, step: int, samples: Sequence[AttentionSample], split: str) -> None:
        try:
            self._draw(step, samples, split)
            self.flush()  # a running TensorBoard shows them once drawn
        except Exception as e:  # on the drawing thread: said, not raised into nothing
            log.warning("the attention heatmaps of step %d were not drawn: %s", step, e)

    def _draw(self, step: int, samples: Sequence[AttentionSample], split: str) -> None:
        from seq2seq.decoding.heatmap import Heatmap

        self._say_boxes(samples)
        for i, sample in enumerate(samples):
            if self.writer is None:
                return
            tag, name = f"attention/{split}_{i}", f"{split} {i}, step {step}"
            heatmap = Heatmap(sample.source_pieces, sample.target_pieces)
            weights = sample.weights
            if weights.ndim == 2:
                self._add_image(tag, heatmap.render(weights, name), step)
                continue
            mean_title = f"{name}, mean of {len(weights)} heads"
            self._add_image(tag, heatmap.render(weights.mean(axis=0), mean_title), step)
            for h, head in enumerate(weights):
                self._add_image(f"{tag}/head_{h}", heatmap.render(head, f"{name}, head {h}"), step)

    def _say_boxes(self, samples: Sequence[AttentionSample]) -> None:
        """Once a run: which characters of the heatmaps' pieces no installed font has."""
        if self._said_boxes:
            return
        from seq2seq.decoding.heatmap import font_list, undrawable

        missing = undrawable(p for s in samples for p in (*s.source_pieces, *s.target_pieces))
        if missing:
            self._said_boxes = True
            log.warning(
                "the attention heatmaps draw %d characters as boxes (%s), as no installed font "
                "has them; for Chinese, Japanese and Korean install Noto Sans CJK (Debian and "
                "Ubuntu: apt install fonts-noto-cjk) and delete %s, matplotlib's list of fonts: "
                "the next run draws them",
                len(missing),
                " ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""),
                font_list(),
            )

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
            from torch.utils.tensorboard.summary import hparams as hparams_summaries

            plain = {key: _plain_hparam(value) for key, value in params.items()}
            declared = dict.fromkeys([*HPARAM_METRICS, *metrics], 0.0)
            # Into this run's own event file, unlike SummaryWriter.add_hparams' timestamped subrun.
            writer = event_file(self.writer)
            if writer is None:
                log.warning("this TensorBoard's writer has no event file to add hparams to")
                return
            with self._writing():
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
        """Wait for heatmaps being drawn, then flush and close the event file."""
        if self._drawing is not None:
            self._drawing.shutdown(wait=True)
            self._drawing = None
        if self.writer is not None:
            with self._writing():
                self.writer.close()
            self.writer = None


def log_evaluation(
    folder: Path,
    step: int,
    run_cfg: Any,
    name: str,
    scores: Mapping[str, float],
    samples: Sequence[AttentionSample],
    own_test: bool,
) -> None:
    """An evaluation's scores as ``eval/<name>_bleu``/``_chrf`` and heatmaps as
    ``attention/<name>_<i>``, at the checkpoint's step; the score on the run's own test split (a
    single model's, ``own_test``) also as ``hparams/test_bleu``."""
    with Monitor(folder) as monitor:
        if own_test:
            monitor.hparams(step, run_hparams(run_cfg), {"hparams/test_bleu": scores["bleu"]})
        monitor.scalars(step, {f"eval/{name}_{key}": value for key, value in scores.items()})
        if samples:
            monitor.attention(step, samples, split=name)
