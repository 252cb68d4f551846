"""Token ids of a parallel corpus as flat memory-mapped numpy arrays, encoded once and cached."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from itertools import chain
from pathlib import Path

import numpy as np

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.errors import DataError
from seq2seq.manifest import damage, write_manifest
from seq2seq.vocab import EOS

log = logging.getLogger(__name__)

_CHUNK = 10_000  # sentences per sentencepiece call
_ARRAYS = ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets", "line_numbers")
MANIFEST = "manifest.json"  # sizes and SHA-256 of the arrays and counts, checked on reuse


class TokenizedCorpus:
    """Pairs stored in a folder of .npy files: flat int32 ids, every sentence ending with EOS.

    ``src(i)``/``tgt(i)`` slice ``*_ids`` between ``*_offsets[i]`` and ``*_offsets[i + 1]``.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        arrays = {name: np.load(self.directory / f"{name}.npy", mmap_mode="r") for name in _ARRAYS}
        self.src_ids, self.src_offsets = arrays["src_ids"], arrays["src_offsets"]
        self.tgt_ids, self.tgt_offsets = arrays["tgt_ids"], arrays["tgt_offsets"]
        self.line_numbers = arrays["line_numbers"]  # 0-based line of each pair in the input
        self.src_lengths = np.diff(self.src_offsets)  # EOS included
        self.tgt_lengths = np.diff(self.tgt_offsets)  # BOS (target input) or EOS (output) included

    def __len__(self) -> int:
        return len(self.line_numbers)

    def src(self, i: int) -> np.ndarray:
        """Source ids of pair ``i``: pieces + [EOS]."""
        return np.asarray(self.src_ids[self.src_offsets[i] : self.src_offsets[i + 1]])

    def tgt(self, i: int) -> np.ndarray:
        """Target ids of pair ``i``: pieces + [EOS] (the decoder output)."""
        return np.asarray(self.tgt_ids[self.tgt_offsets[i] : self.tgt_offsets[i + 1]])


def encode_corpus(
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    cache_dir: Path,
    max_len: int | None,
    drop_invalid: bool,
) -> TokenizedCorpus:
    """Encode both sides (or reuse ``cache_dir/corpus/<key>``, key = models + text + settings).

    With ``drop_invalid`` (training), pairs with an empty side or more than ``max_len`` subwords on
    either side are dropped; otherwise every line is kept.
    """
    if len(src_lines) != len(tgt_lines):
        raise DataError(f"{len(src_lines)} source lines but {len(tgt_lines)} target lines")
    key = hashlib.sha256()
    settings = json.dumps([max_len, drop_invalid, len(src_lines)]).encode()
    parts = (src_tok.proto, tgt_tok.proto, settings)
    for part in (*parts, "\n".join(src_lines).encode(), "\n".join(tgt_lines).encode()):
        key.update(hashlib.sha256(part).digest())
    directory = Path(cache_dir) / "corpus" / key.hexdigest()[:16]
    if directory.is_dir():
        problems = damage(directory / MANIFEST)
        if not problems:
            log.info("reusing cached token ids %s", directory)
        else:
            log.warning("cached token ids %s are damaged (%s): encoding again", directory,
                        "; ".join(problems))  # fmt: skip
            shutil.rmtree(directory, ignore_errors=True)
    if not directory.is_dir():
        _encode_into(directory, src_lines, tgt_lines, src_tok, tgt_tok, max_len, drop_invalid)
    if drop_invalid:
        counts = json.loads((directory / "counts.json").read_text())
        dropped = counts["empty"] + counts["long"]
        log.info(
            "dropped %d of %d pairs (%d empty, %d longer than max_len)",
            dropped,
            counts["pairs"],
            counts["empty"],
            counts["long"],
        )
    return TokenizedCorpus(directory)


def _encode_into(
    directory: Path,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    max_len: int | None,
    drop_invalid: bool,
) -> None:
    """Encode, filter, save into a temporary folder, then rename that to ``directory``."""
    src_ids, src_len = _encode_side(src_tok, src_lines)
    tgt_ids, tgt_len = _encode_side(tgt_tok, tgt_lines)
    empty = (src_len == 1) | (tgt_len == 1)  # EOS only
    limit = np.inf if max_len is None else max_len + 1  # lengths include the EOS
    long = ~empty & (np.maximum(src_len, tgt_len) > limit)
    keep = ~(empty | long) if drop_invalid else np.ones(len(src_len), dtype=bool)
    arrays = {
        "src_ids": src_ids[np.repeat(keep, src_len)],
        "src_offsets": np.concatenate([[0], np.cumsum(src_len[keep])]),
        "tgt_ids": tgt_ids[np.repeat(keep, tgt_len)],
        "tgt_offsets": np.concatenate([[0], np.cumsum(tgt_len[keep])]),
        "line_numbers": np.flatnonzero(keep),
    }
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=".tmp-"))
    for name, array in arrays.items():
        np.save(tmp / f"{name}.npy", array)
    counts = {"pairs": len(src_lines), "empty": int(empty.sum()), "long": int(long.sum())}
    (tmp / "counts.json").write_text(json.dumps(counts))
    write_manifest(tmp / MANIFEST, [tmp / f"{name}.npy" for name in arrays] + [tmp / "counts.json"])
    try:
        tmp.rename(directory)
        log.info("encoded %d pairs into %s", len(src_lines), directory)
    except OSError:  # another process finished the same corpus first
        shutil.rmtree(tmp)


def _encode_side(tok: Tokenizer, lines: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """All lines encoded in chunks: (ids int32 with an EOS after each line, lengths int64)."""
    parts = [
        _flatten(tok.encode_batch(lines[i : i + _CHUNK])) for i in range(0, len(lines), _CHUNK)
    ]
    ids = np.concatenate([np.zeros(0, np.int32), *(p[0] for p in parts)])
    lengths = np.concatenate([np.zeros(0, np.int64), *(p[1] for p in parts)])
    return ids, lengths


def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate sequences with an EOS after each: (ids int32, lengths int64 incl. EOS)."""
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs)) + 1
    ids = np.full(int(lengths.sum()), EOS, dtype=np.int32)
    is_piece = np.ones(len(ids), dtype=bool)
    is_piece[np.cumsum(lengths) - 1] = False
    ids[is_piece] = np.fromiter(
        chain.from_iterable(seqs), dtype=np.int32, count=len(ids) - len(seqs)
    )
    return ids, lengths
