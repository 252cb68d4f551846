"""Corpora of two files per split (Multi30k, or the user's own ``<prefix>.<lang>``), streamed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from seq2seq.config import DataConfig
from seq2seq.data.download import MULTI30K_SHA256, fetch, is_url
from seq2seq.data.stream import (
    PairStream,
    TextChunk,
    file_digest,
    fingerprint,
    line_blocks,
    open_binary,
)
from seq2seq.errors import DataError, UnknownSplit, relative_note

log = logging.getLogger(__name__)


def multi30k_splits() -> dict[str, list[str]]:
    """Official Multi30k split names and the languages each one has."""
    splits: dict[str, list[str]] = {}
    for name in MULTI30K_SHA256:
        split, lang, _ = name.split(".")
        splits.setdefault(split, []).append(lang)
    return splits


def split_name(cfg: DataConfig, split: str) -> str | None:
    """The configured name of "train"/"valid"/"test" (None: not configured); others as given."""
    return {"train": cfg.train, "valid": cfg.valid, "test": cfg.test}.get(split, split)


def check_splits(cfg: DataConfig) -> None:
    """The configured splits exist, in both languages (no download): a DataError otherwise."""
    for split in ("train", "valid", "test"):
        name = split_name(cfg, split)
        if name is None:
            continue
        if cfg.kind == "multi30k":
            _check_source(cfg, _multi30k_names(cfg, name))
        else:
            try:
                prefix_files(name, cfg.src_lang, cfg.tgt_lang)
            except DataError as e:
                said = f"data.{split}={name}: {e}{relative_note(name)}"
                raise DataError(f"{said}{prepared_by(cfg, name)}") from None


def prepared_by(cfg: DataConfig, name: str) -> str:
    """The ending of a missing split's (or data.file's) error where ``data.prepare`` names the
    command that writes the corpus and the split's folder is one it names; else nothing (a
    split overridden to files of another making)."""
    prepare = getattr(cfg, "prepare", None)  # custom and tsv only; older run folders lack it
    if not prepare or str(Path(name).parent) not in prepare.split():
        return ""
    return f"; this recipe's data is made by: {prepare}"


def _check_source(cfg: DataConfig, names: list[str]) -> None:
    """Each Multi30k file is in ``data.root`` already or in ``data.source`` where that is a
    folder (a URL is tried when fetched): a wrong folder is said before the run starts."""
    if is_url(cfg.source):
        return
    for name in names:
        if not (Path(cfg.root) / name).is_file() and not (Path(cfg.source) / name).is_file():
            raise DataError(
                f"data.source={cfg.source} holds no {name} (nor does data.root={cfg.root}): "
                "give a folder of the official <split>.<lang>.gz files, or a base URL"
            )


def split_files(cfg: DataConfig, split: str) -> tuple[Path, Path]:
    """Source and target file of ``split``: "train"/"valid"/"test" name the configured splits.

    Multi30k files are downloaded into ``cfg.root`` on first use; custom splits are file prefixes.
    """
    name = split_name(cfg, split)
    if name is None:
        raise DataError(f"no {split} split configured (set data.{split})")
    if cfg.src_lang == cfg.tgt_lang:
        raise DataError(f"data.src_lang and data.tgt_lang are both {cfg.src_lang!r}")
    if cfg.kind == "multi30k":
        src, tgt = fetch(cfg.source, Path(cfg.root), _multi30k_names(cfg, name))
        return src, tgt
    try:
        return prefix_files(name, cfg.src_lang, cfg.tgt_lang, warn=False)  # check_splits warned
    except DataError as e:  # a configured split's files: the recipe's, which data.prepare writes
        ours = split in ("train", "valid", "test")
        raise DataError(f"{e}{prepared_by(cfg, name) if ours else ''}") from None


def file_stream(src: Path, tgt: Path, limit: int | None = None) -> PairStream:
    """The pairs of two parallel files (plain or .gz); the first ``limit`` if given. Keyed by
    both files' bytes, so a second run knows its caches without decoding the text."""
    key = fingerprint("files", file_digest(src), file_digest(tgt), limit)
    name = f"{src} and {tgt}"
    return PairStream(name, key, lambda: parallel_batches(Path(src), Path(tgt), limit))


def parallel_batches(src: Path, tgt: Path, limit: int | None = None) -> Iterator[TextChunk]:
    """Batches of line pairs; both whole files are validated (UTF-8, equal line counts) even
    with a ``limit``, so a broken file is found whatever part of it is used."""
    with open_binary(src) as src_file, open_binary(tgt) as tgt_file:
        blocks = line_blocks(src_file, str(src)), line_blocks(tgt_file, str(tgt))
        left: list[list[str]] = [[], []]  # lines read but not yet paired, per side
        count = 0
        while True:
            for side in (0, 1):
                if not left[side]:
                    left[side] = next(blocks[side], [])
            n = min(len(left[0]), len(left[1]))
            if n == 0:
                break
            if limit is None or count < limit:
                take = n if limit is None else min(n, limit - count)
                yield left[0][:take], left[1][:take]
            count += n
            left = [left[0][n:], left[1][n:]]
        counts = [count + len(left[side]) + sum(map(len, blocks[side])) for side in (0, 1)]
    for path, n in zip((src, tgt), counts, strict=True):
        if n == 0:
            raise DataError(f"{path} is empty")
    if counts[0] != counts[1]:
        raise DataError(
            f"parallel files differ in length: {src} has {counts[0]} lines, {tgt} has {counts[1]}"
        )


def read_parallel(src: Path, tgt: Path, limit: int | None = None) -> tuple[list[str], list[str]]:
    """Lines of two parallel files (plain or .gz), stripped; the first ``limit`` pairs if given.

    Both whole files are validated (UTF-8, equal line counts) even when ``limit`` is set.
    """
    return file_stream(Path(src), Path(tgt), limit).lists()


def _multi30k_names(cfg: DataConfig, split: str) -> list[str]:
    """The two file names of a Multi30k split, after checking that it has both languages."""
    splits = multi30k_splits()
    if split not in splits:
        raise UnknownSplit(f"unknown Multi30k split {split!r}; splits are: {', '.join(splits)}")
    for lang in (cfg.src_lang, cfg.tgt_lang):
        if lang not in splits[split]:
            have = ", ".join(splits[split])
            raise UnknownSplit(f"Multi30k {split} has no language {lang!r}; it has: {have}")
    return [f"{split}.{cfg.src_lang}.gz", f"{split}.{cfg.tgt_lang}.gz"]


def prefix_files(prefix: str, src_lang: str, tgt_lang: str, warn: bool = True) -> tuple[Path, Path]:
    """Both files of a split, ``<prefix>.<lang>`` or ``.gz``. Where one side has both forms, the
    other side's form is read (else the plain files), and with ``warn`` a warning names both
    (training warns at its start check, not again as it reads)."""
    try:
        forms = _forms(prefix, src_lang), _forms(prefix, tgt_lang)
    except DataError:
        if not Path(prefix).is_dir():
            raise
        example = Path(prefix) / "train"  # data.train=data/ for data/train.de and data/train.en
        raise DataError(
            f"{prefix} is a folder: a split is given by the prefix of its files, e.g. {example} "
            f"for {example}.{src_lang} and {example}.{tgt_lang}"
        ) from None
    gz = [[path.suffix == ".gz" for path in side] for side in forms]
    picked = []
    for side, other in ((0, 1), (1, 0)):
        want_gz = len(gz[other]) == 1 and gz[other][0]  # the other side's one form
        picked.append(
            forms[side][gz[side].index(want_gz)] if want_gz in gz[side] else forms[side][0]
        )
    doubled = [side for side in (0, 1) if len(forms[side]) == 2]
    if doubled and warn:
        both = ", and ".join(f"{forms[s][0]} and {forms[s][1]}" for s in doubled)
        reading = (
            f"{picked[doubled[0]]}, the form of {picked[1 - doubled[0]]}"
            if len(doubled) == 1
            else "the plain files"
        )
        log.warning(
            "%s both exist: reading %s; remove the file not meant, or the pairs may be misaligned",
            both,
            reading,
        )
    return picked[0], picked[1]


def _forms(prefix: str, lang: str) -> list[Path]:
    """The files of one side that exist, plain first: a DataError where neither does."""
    plain = Path(f"{prefix}.{lang}")
    found = [path for path in (plain, plain.with_name(plain.name + ".gz")) if path.is_file()]
    if found:
        return found
    hint = ""
    for suffix in (f".{lang}", f".{lang}.gz"):  # data.train=cd1/train.de: its language given
        if prefix.endswith(suffix) and Path(prefix).is_file():
            hint = f": give the prefix without its language, {prefix.removesuffix(suffix)}"
    raise DataError(f"neither {plain} nor {plain}.gz exists{hint}")
