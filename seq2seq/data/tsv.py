"""Tab-separated corpora: one file of pairs (plain, .gz, or a .zip as downloaded), streamed.

``data.columns`` names the language of each column in order, e.g. ``[en, de]`` for a Tatoeba
export; further columns (Tatoeba's attribution) are ignored.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from seq2seq.data.stream import PairStream, TextChunk, file_digest, fingerprint, line_blocks
from seq2seq.data.stream import open_binary as open_plain
from seq2seq.errors import DataError, require_file


def _zip_member(archive: zipfile.ZipFile, path: Path) -> str:
    """The one text file of a downloaded archive, besides notes such as ``_about.txt``."""
    names = [
        n.filename
        for n in archive.infolist()
        if not n.is_dir()
        and not Path(n.filename).name.startswith(("_", "."))
        and not n.filename.startswith("__MACOSX/")
    ]
    if len(names) != 1:
        found = ", ".join(names) or "none"
        raise DataError(f"{path} should hold one text file besides notes; it holds: {found}")
    return names[0]


@contextmanager
def open_table(path: Path) -> Iterator[tuple[IO[bytes], str]]:
    """The file's bytes (decompressed, or its text member of a .zip) and a name for messages."""
    path = require_file(path)
    if path.suffix.lower() != ".zip":
        with open_plain(path) as f:
            yield f, str(path)
        return
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read {path}: {e}") from None
    with archive:
        member = _zip_member(archive, path)
        with archive.open(member) as f:
            yield f, f"{path}:{member}"


def column_indices(columns: Sequence[str], src_lang: str, tgt_lang: str, path: object) -> tuple:
    """Positions of the source and target language among ``columns``."""
    columns = list(columns)
    for lang in (src_lang, tgt_lang):
        if lang not in columns:
            raise DataError(
                f"data.columns={columns} has no {lang!r} column for {path}: name the language of "
                "each column in order, e.g. data.columns=[en,de]"
            )
    if len(set(columns)) != len(columns):
        raise DataError(f"data.columns={columns} names a language twice")
    return columns.index(src_lang), columns.index(tgt_lang)


def tsv_stream(
    path: Path, columns: Sequence[str], src_lang: str, tgt_lang: str, limit: int | None = None
) -> PairStream:
    """The (source, target) pairs of a tab-separated file, the first ``limit`` if given."""
    path = require_file(path)
    src_col, tgt_col = column_indices(columns, src_lang, tgt_lang, path)
    key = fingerprint("tsv", file_digest(path), src_col, tgt_col, limit)

    def batches() -> Iterator[TextChunk]:
        return _batches(path, src_col, tgt_col, limit, len(columns))

    return PairStream(str(path), key, batches)


def _batches(
    path: Path, src_col: int, tgt_col: int, limit: int | None, named: int
) -> Iterator[TextChunk]:
    """Pairs of every line, a block at a time; a line with fewer fields than data.columns names
    (``named``), or with another count than the file's first line (a stray tab shifts the columns
    after it), is a DataError naming it. A blank line is an empty pair (dropped from training
    like any other)."""
    count, first = 0, None  # first: (line number, field count) of the first non-blank line
    with open_table(path) as (raw, where):
        for lines in line_blocks(raw, where, strip=False):
            if limit is not None:
                lines = lines[: limit - count]
            src, tgt = [], []
            for number, line in enumerate(lines, count + 1):
                fields = line.split("\t", named) if line.strip() else [""] * named
                if len(fields) < named:
                    raise DataError(
                        f"{where}, line {number}: {len(fields)} tab-separated field"
                        f"{'s' if len(fields) > 1 else ''}, but data.columns names {named}"
                    )
                if line.strip():
                    first = _same_width(where, number, line.count("\t") + 1, first)
                src.append(fields[src_col].strip())
                tgt.append(fields[tgt_col].strip())
            count += len(lines)
            if src:
                yield src, tgt
            if limit is not None and count >= limit:
                return
    if count == 0:
        raise DataError(f"{path} is empty")


def _same_width(
    where: str, number: int, width: int, first: tuple[int, int] | None
) -> tuple[int, int]:
    """The first non-blank line's (number, field count); a line with another count is refused."""
    if first is not None and width != first[1]:
        raise DataError(
            f"{where}, line {number}: {width} tab-separated fields, but line {first[0]} has "
            f"{first[1]}: a tab inside a sentence shifts the columns after it; remove it"
        )
    return first or (number, width)
