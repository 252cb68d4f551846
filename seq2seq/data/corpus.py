"""Find the two files of a parallel split (Multi30k or the user's own) and read them, validated."""

from __future__ import annotations

import gzip
from pathlib import Path

from seq2seq.config import DataConfig
from seq2seq.data.download import MULTI30K_SHA256, fetch
from seq2seq.errors import DataError


def multi30k_splits() -> dict[str, list[str]]:
    """Official Multi30k split names and the languages each one has."""
    splits: dict[str, list[str]] = {}
    for name in MULTI30K_SHA256:
        split, lang, _ = name.split(".")
        splits.setdefault(split, []).append(lang)
    return splits


def check_splits(cfg: DataConfig) -> None:
    """The configured splits exist, in both languages (no download): a DataError otherwise."""
    for split in ("train", "valid", "test"):
        name = {"train": cfg.train, "valid": cfg.valid, "test": cfg.test}[split]
        if name is None:
            continue
        if cfg.name == "multi30k":
            _multi30k_names(cfg, name)
        else:
            _prefix_file(name, cfg.src_lang), _prefix_file(name, cfg.tgt_lang)


def split_files(cfg: DataConfig, split: str) -> tuple[Path, Path]:
    """Source and target file of ``split``: "train"/"valid"/"test" name the configured splits.

    Multi30k files are downloaded into ``cfg.root`` on first use; custom splits are file prefixes.
    """
    aliases = {"train": cfg.train, "valid": cfg.valid, "test": cfg.test}
    name = aliases.get(split, split)
    if name is None:
        raise DataError(f"no {split} split configured (set data.{split})")
    if cfg.src_lang == cfg.tgt_lang:
        raise DataError(f"data.src_lang and data.tgt_lang are both {cfg.src_lang!r}")
    if cfg.name == "multi30k":
        return _multi30k_files(cfg, name)
    return _prefix_file(name, cfg.src_lang), _prefix_file(name, cfg.tgt_lang)


def _multi30k_names(cfg: DataConfig, split: str) -> list[str]:
    """The two file names of a Multi30k split, after checking that it has both languages."""
    splits = multi30k_splits()
    if split not in splits:
        raise DataError(f"unknown Multi30k split {split!r}; splits are: {', '.join(splits)}")
    for lang in (cfg.src_lang, cfg.tgt_lang):
        if lang not in splits[split]:
            have = ", ".join(splits[split])
            raise DataError(f"Multi30k {split} has no language {lang!r}; it has: {have}")
    return [f"{split}.{cfg.src_lang}.gz", f"{split}.{cfg.tgt_lang}.gz"]


def _multi30k_files(cfg: DataConfig, split: str) -> tuple[Path, Path]:
    src, tgt = fetch(cfg.source, Path(cfg.root), _multi30k_names(cfg, split))
    return src, tgt


def _prefix_file(prefix: str, lang: str) -> Path:
    """``<prefix>.<lang>``, else ``<prefix>.<lang>.gz``."""
    plain = Path(f"{prefix}.{lang}")
    for path in (plain, plain.with_name(plain.name + ".gz")):
        if path.is_file():
            return path
    raise DataError(f"neither {plain} nor {plain}.gz exists")


def read_parallel(src: Path, tgt: Path, limit: int | None = None) -> tuple[list[str], list[str]]:
    """Lines of two parallel files (plain or .gz), stripped; the first ``limit`` pairs if given.

    Both whole files are validated (UTF-8, equal line counts) even when ``limit`` is set.
    """
    src_lines, tgt_lines = _read_lines(Path(src)), _read_lines(Path(tgt))
    for path, lines in ((src, src_lines), (tgt, tgt_lines)):
        if not lines:
            raise DataError(f"{path} is empty")
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"parallel files differ in length: {src} has {len(src_lines)} lines, "
            f"{tgt} has {len(tgt_lines)}"
        )
    return src_lines[:limit], tgt_lines[:limit]


def _read_lines(path: Path) -> list[str]:
    """Lines split on "\\n" only (so U+2028 and friends cannot break the alignment), stripped
    (CR, surrounding spaces), without a leading byte-order mark."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:  # EOFError: truncated .gz
        raise DataError(f"cannot read {path}: {e}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}, line {line}: invalid UTF-8 ({e.reason})") from None
    lines = text.removeprefix("\ufeff").split("\n")  # a byte-order mark is not text
    if lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]  # also the "\r" of CRLF line ends
