"""Hugging Face datasets: ``datasets.load_dataset(path, name)`` (the hub, or a folder of data
files) or ``load_from_disk(folder)``.

Pairs come from the usual ``translation: {de: ..., en: ...}`` column, or from two string columns
(``data.src_column``, ``data.tgt_column``). The data stays in the dataset's memory-mapped Arrow
files and is read in record batches; ``datasets`` is an optional extra (``pip install -e '.[hf]'``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from seq2seq.data.stream import PairStream, TextChunk, fingerprint
from seq2seq.errors import DataError

_BATCH = 10_000  # rows per Arrow record batch
INSTALL = "data=hf needs the datasets library: pip install -e '.[hf]' in the seq2seq checkout"


# said where the hub cannot be reached
OFFLINE = (
    "; without a network, HF_HUB_OFFLINE=1 loads a dataset from the Hugging Face cache at once, "
    "or give data.path=<a folder written by save_to_disk>"
)


@contextlib.contextmanager
def _quiet(datasets: Any) -> Iterator[None]:
    """The hub client's warnings and datasets' progress bars left out while loading (each retry
    of an unreachable hub is a line, twice; a bar is noise in a log), as they were after it."""
    hub = logging.getLogger("huggingface_hub")
    level, bars = hub.level, datasets.is_progress_bar_enabled()
    hub.setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        hub.setLevel(level)
        if bars:
            datasets.enable_progress_bars()


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise DataError(INSTALL) from None
    return datasets


@functools.lru_cache(maxsize=4)
def load_splits(path: str, name: str | None) -> dict[str, Any]:
    """{split name: Dataset} of a hub dataset or a ``save_to_disk`` folder (a lone Dataset is
    "train")."""
    datasets = _datasets()
    try:
        with _quiet(datasets):
            if _saved(Path(path)):
                loaded = datasets.load_from_disk(path)
            else:  # the hub's, or a folder of data files (.jsonl, .csv, .parquet, ...)
                loaded = datasets.load_dataset(path, name)
    except Exception as e:  # the hub's, the network's and datasets' many errors
        where = "folder" if Path(path).is_dir() else "dataset"
        said = f"{type(e).__name__}: {e}"
        hint = OFFLINE if "connect" in said.lower() else ""
        raise DataError(f"cannot load the {where} {path!r}: {said}{hint}") from None
    if isinstance(loaded, datasets.Dataset):
        return {"train": loaded}
    return dict(loaded)


def _saved(folder: Path) -> bool:
    """Whether ``folder`` was written by ``save_to_disk`` (a Dataset, or a DatasetDict)."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def hf_stream(cfg: Any, split: str) -> PairStream:
    """The pairs of one split of the configured dataset."""
    splits = load_splits(cfg.path, cfg.name)
    if split not in splits:
        have = ", ".join(splits) or "none"
        raise DataError(
            f"{cfg.path} has no split {split!r}; it has: {have} (choose data.train/valid/test, "
            "or set data.valid=null / data.test=null to carve them out of the training split)"
        )
    dataset = splits[split]
    columns = _columns(cfg, dataset)
    key = fingerprint("hf", dataset._fingerprint, columns)
    name = f"{cfg.path}{'/' + cfg.name if cfg.name else ''} [{split}]"
    return PairStream(name, key, lambda: _batches(dataset, columns), len(dataset))


def _columns(cfg: Any, dataset: Any) -> tuple[str, ...]:
    """(column,) + the two language fields of a translation column, or the two string columns."""
    have = list(dataset.column_names)
    if cfg.src_column or cfg.tgt_column:
        wanted = (cfg.src_column, cfg.tgt_column)
        if None in wanted or any(c not in have for c in wanted):
            raise DataError(
                f"data.src_column and data.tgt_column must both name columns; the dataset has: "
                f"{', '.join(have)}"
            )
        for key, column in zip(("src_column", "tgt_column"), wanted, strict=True):
            _require_text(f"data.{key}={column}", dataset.features[column], dataset)
        return wanted
    if cfg.column not in have:
        raise DataError(
            f"the dataset has no column {cfg.column!r} (data.column); it has: {', '.join(have)}; "
            "for two string columns set data.src_column and data.tgt_column"
        )
    feature = dataset.features[cfg.column]  # datasets.Translation, or a dict of string fields
    fields = list(getattr(feature, "languages", None) or getattr(feature, "keys", list)())
    for lang in (cfg.src_lang, cfg.tgt_lang):
        if lang not in fields:
            raise DataError(
                f"column {cfg.column!r} has no language {lang!r}; it has: {', '.join(fields)}"
            )
        if isinstance(feature, dict):  # a Translation's fields are strings by definition
            _require_text(f"data.column={cfg.column} ({lang})", feature[lang], dataset)
    return cfg.column, cfg.src_lang, cfg.tgt_lang


def _kind(feature: Any) -> str:
    """A column's type as datasets names it: int64, string, ..., or its feature's class."""
    return getattr(feature, "dtype", None) or type(feature).__name__


def _require_text(what: str, feature: Any, dataset: Any) -> None:
    """A DataError, before any work, where the column named by ``what`` holds no strings."""
    if _kind(feature) in ("string", "large_string"):
        return
    text = [n for n, f in dataset.features.items() if _kind(f) in ("string", "large_string")]
    raise DataError(
        f"{what} holds {_kind(feature)} values, not text; name a column of strings "
        f"(the dataset's: {', '.join(text) or 'none'})"
    )


def _batches(dataset: Any, columns: tuple[str, ...]) -> Iterator[TextChunk]:
    """Stripped pairs, read from Arrow record batches (no Python dict per row)."""
    rows = dataset.select_columns([columns[0]] if len(columns) == 3 else list(columns))
    for table in rows.with_format("arrow").iter(batch_size=_BATCH):
        if len(columns) == 3:  # the languages of one struct column
            chunks = table.column(columns[0]).chunks
            sides = [
                [text for c in chunks for text in c.field(name).to_pylist()] for name in columns[1:]
            ]
        else:
            sides = [table.column(name).to_pylist() for name in columns]
        yield tuple([_line(text) for text in side] for side in sides)


def _line(text: str | None) -> str:
    """A sentence on one line: a line break inside (rare in datasets) becomes a space."""
    return (text or "").replace("\r", " ").replace("\n", " ").strip()
