"""The sentence pairs of a split of a trained run's own corpus, as two files (seq2seq-evaluate and
seq2seq-distill read them): the run folder's copy where training left one, else the corpus's own
files, else the split written beside the outputs."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from seq2seq.data.corpus import prefix_files, split_files, split_name
from seq2seq.data.download import is_url
from seq2seq.data.readers import FileReader, open_reader
from seq2seq.data.stream import PairStream
from seq2seq.errors import DataError, Seq2SeqError, UnknownSplit
from seq2seq.runtime.run_folder import TrainedRun
from seq2seq.storage.rundir import split_file


def run_split(
    run: TrainedRun, data_source: str | None, split: str, out_dir: Path
) -> tuple[str, Path, Path]:
    """(split name, source file, reference file) of ``split`` of the run's corpus, read from
    ``data_source`` where given (Multi30k elsewhere than at training)."""
    data = run.cfg.data
    if data_source is not None:
        data = OmegaConf.merge(data, {"source": data_source})
    return split_pairs(run, data, split, out_dir, given=data_source is not None)


def split_pairs(
    run: TrainedRun, data: DictConfig, split: str, out_dir: Path, given: bool = False
) -> tuple[str, Path, Path]:
    """(split name, source file, reference file) of a split of the run's own corpus: the run
    folder's copy where training left one (tab-separated and Hugging Face corpora), else the
    corpus's files.

    Relative paths in the run's config (``data.source``, custom prefixes) are taken from the
    current directory, as they were by training; ``given``: data_source= says where Multi30k is.
    """
    if (files := _other_files(split, data)) is not None:
        return split, *files
    reader = open_reader(data)
    if split in ("valid", "test") and not reader.has(split):
        raise Seq2SeqError(
            f"the run has no {split} split (data.{split} is null in its config.yaml): "
            "choose split=<another split, or the prefix of two files>"
        )
    kept = [split_file(run.run_dir, split, lang) for lang in (data.src_lang, data.tgt_lang)]
    if all(path.is_file() for path in kept):
        return split, kept[0], kept[1]
    if not isinstance(reader, FileReader):
        return split, *_written(reader.stream(split), out_dir, split, data)
    name = split_name(data, split)
    try:
        src, ref = split_files(data, split)
    except UnknownSplit:  # a name, not a place: where the files are does not matter
        raise
    except DataError as e:
        multi30k = data.kind == "multi30k"
        place = data.source if multi30k else name  # data.root is a copy of data.source
        if given or is_url(place) or Path(place).is_absolute():  # where it looked is clear
            raise
        other = "data_source=<the Multi30k folder>" if multi30k else "split=<the files' prefix>"
        hint = (
            f"; the run's relative paths ({place}) are taken from the current "
            f"directory {Path.cwd()}: run from where training was started, or give {other}"
        )
        raise DataError(f"{e}{hint}") from e
    return name, src, ref


def _other_files(split: str, data: DictConfig) -> tuple[Path, Path] | None:
    """A split named by another corpus's files, ``<prefix>.<lang>`` or ``.gz`` (whatever the
    run's corpus): a prefix with a folder in it must have both; a bare name only where both are
    here (else it names a split of the run's corpus: None)."""
    if split in ("train", "valid", "test"):
        return None
    try:
        return prefix_files(split, data.src_lang, data.tgt_lang)
    except DataError:
        if "/" in split or os.sep in split:
            raise
        return None


def _written(pairs: PairStream, out_dir: Path, split: str, data: DictConfig) -> tuple[Path, Path]:
    """A split of a dataset (not one training kept) written beside the evaluations."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = tuple(out_dir / f"{split}.{lang}" for lang in (data.src_lang, data.tgt_lang))
    src, tgt = pairs.lists()
    for path, lines in zip(paths, (src, tgt), strict=True):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return paths
