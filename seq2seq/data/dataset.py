"""Token ids of a parallel corpus as flat memory-mapped numpy arrays, encoded once and cached.

Encoding streams: pairs are read in chunks, encoded by worker processes (sentencepiece, one
thread each) and appended to the arrays on disk in corpus order, so memory does not grow with
the corpus. The cache folder is keyed by the stream's fingerprint, the tokenizer models and the
filter settings, and written atomically (a temporary folder, renamed when complete).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import chain, islice
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.data.stream import PairStream, fingerprint, worker_pool
from seq2seq.errors import DataError
from seq2seq.storage.manifest import damage
from seq2seq.storage.staging import cache_entry
from seq2seq.vocab import EOS

log = logging.getLogger(__name__)

CHUNK = 10_000  # pairs per encoding task
FORMAT = 2  # of the cached arrays; part of the key
_ARRAYS = {
    "src_ids": np.int32,
    "src_offsets": np.int64,
    "tgt_ids": np.int32,
    "tgt_offsets": np.int64,
    "line_numbers": np.int64,
}
MANIFEST = "manifest.json"  # sizes and SHA-256 of the arrays and counts, checked on reuse
_HEADER = 128  # bytes of a .npy header of a one-dimensional array (numpy pads to this)
READ = 1 << 20  # offsets read at a time when the lengths are computed (8 MB)


class TokenizedCorpus:
    """Pairs stored in a folder of .npy files: flat int32 ids, every sentence ending with EOS.

    ``src(i)``/``tgt(i)`` slice ``*_ids`` between ``*_offsets[i]`` and ``*_offsets[i + 1]``.
    The lengths and ``rows`` read the files (read, pread) instead of the memory maps: a mapped
    page stays in the process's resident memory once touched, so the offsets alone would add 16
    bytes a pair, and over an epoch a mapped corpus would grow the process by the whole file.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        arrays = {name: np.load(self.directory / f"{name}.npy", mmap_mode="r") for name in _ARRAYS}
        self.src_ids, self.src_offsets = arrays["src_ids"], arrays["src_offsets"]
        self.tgt_ids, self.tgt_offsets = arrays["tgt_ids"], arrays["tgt_offsets"]
        self.line_numbers = arrays["line_numbers"]  # 0-based position of each pair in the input
        self.src_lengths = _lengths(self.src_offsets)  # EOS included
        self.tgt_lengths = _lengths(self.tgt_offsets)  # BOS or EOS included

    def __len__(self) -> int:
        return len(self.line_numbers)

    def src(self, i: int) -> np.ndarray:
        """Source ids of pair ``i``: pieces + [EOS]."""
        return np.asarray(self.src_ids[self.src_offsets[i] : self.src_offsets[i + 1]])

    def tgt(self, i: int) -> np.ndarray:
        """Target ids of pair ``i``: pieces + [EOS] (the decoder output)."""
        return np.asarray(self.tgt_ids[self.tgt_offsets[i] : self.tgt_offsets[i + 1]])

    def rows(self, side: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sentences ``ids`` of "src" or "tgt", right-padded with PAD (0): ([B, L] int64,
        lengths [B]), read from the file."""
        ids_array = self.src_ids if side == "src" else self.tgt_ids
        offsets = self.src_offsets if side == "src" else self.tgt_offsets
        lengths = (self.src_lengths if side == "src" else self.tgt_lengths)[ids].astype(np.int64)
        out = np.zeros((len(ids), int(lengths.max(initial=0))), dtype=np.int64)
        if not hasattr(os, "pread"):  # Windows: through the maps
            starts = np.asarray(offsets[ids], dtype=np.int64)
            for row, (start, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
                out[row, :n] = ids_array[start : start + n]
            return out, lengths
        starts = _read_at(offsets, ids)
        size = ids_array.dtype.itemsize
        with open(ids_array.filename, "rb", buffering=0) as f:
            for row, (start, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
                data = os.pread(f.fileno(), n * size, ids_array.offset + start * size)
                out[row, :n] = np.frombuffer(data, dtype=ids_array.dtype)
        return out, lengths


def _lengths(offsets: np.memmap) -> np.ndarray:
    """``np.diff(offsets)`` as int32, read from the file READ offsets at a time (not mapped)."""
    lengths = np.empty(max(len(offsets) - 1, 0), dtype=np.int32)
    size = offsets.dtype.itemsize
    with open(offsets.filename, "rb") as f:
        for start in range(0, len(lengths), READ):
            count = min(READ, len(lengths) - start) + 1  # the next chunk's first offset too
            f.seek(offsets.offset + start * size)
            chunk = np.frombuffer(f.read(count * size), dtype=offsets.dtype)
            lengths[start : start + count - 1] = np.diff(chunk)
    return lengths


def _read_at(array: np.memmap, positions: np.ndarray) -> np.ndarray:
    """``array[positions]`` as int64, each element read from the file (pread), not mapped."""
    size, base = array.dtype.itemsize, array.offset
    with open(array.filename, "rb", buffering=0) as f:
        raw = b"".join(os.pread(f.fileno(), size, base + i * size) for i in positions.tolist())
    return np.frombuffer(raw, dtype=array.dtype).astype(np.int64)


def encode_corpus(
    pairs: PairStream,
    src_tok: Any,
    tgt_tok: Any,
    cache_dir: Path,
    max_len: int | None,
    drop_invalid: bool,
    workers: int = 1,
) -> TokenizedCorpus:
    """Encode both sides (or reuse ``cache_dir/corpus/<key>``, key = the stream's fingerprint,
    the models and the settings), with ``workers`` processes for corpora of several chunks.

    With ``drop_invalid`` (training), pairs with an empty side or more than ``max_len`` subwords on
    either side are dropped; otherwise every line is kept.
    """
    models = [hashlib.sha256(tok.proto).hexdigest() for tok in (src_tok, tgt_tok)]
    key = fingerprint(FORMAT, pairs.fingerprint, models, max_len, drop_invalid)
    directory = Path(cache_dir) / "corpus" / key[:16]
    if directory.is_dir():
        problems = damage(directory / MANIFEST)
        if not problems:
            log.info("reusing cached token ids %s", directory)
        else:
            log.warning(
                "cached token ids %s are damaged (%s): encoding again",
                directory,
                "; ".join(problems),
            )
            shutil.rmtree(directory, ignore_errors=True)
    if not directory.is_dir():
        _encode_into(directory, pairs, (src_tok, tgt_tok), max_len, drop_invalid, workers)
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
        if dropped == counts["pairs"]:  # nothing to train on: an untrained run is no result
            raise DataError(
                f"every one of the {counts['pairs']:,} training pairs was dropped "
                f"({counts['empty']:,} with an empty side, {counts['long']:,} longer than "
                f"data.max_len={max_len} subwords): raise data.max_len or check the corpus"
            )
    return TokenizedCorpus(directory)


class NpyWriter(contextlib.AbstractContextManager):
    """A one-dimensional .npy file written by appending, its header filled in on ``close``."""

    def __init__(self, path: Path, dtype: type) -> None:
        self.path, self.dtype, self.length = path, np.dtype(dtype), 0
        self.file = open(path, "wb")  # noqa: SIM115 (closed by close or __exit__)
        self.file.seek(_HEADER)

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            self.close()
        else:
            self.file.close()

    def append(self, values: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.length += len(values)

    def close(self) -> None:
        if self.file.closed:
            return
        header = io.BytesIO()
        descr = np.lib.format.dtype_to_descr(self.dtype)
        facts = {"descr": descr, "fortran_order": False, "shape": (self.length,)}
        np.lib.format.write_array_header_1_0(header, facts)
        if len(header.getvalue()) != _HEADER:
            raise RuntimeError(f"unexpected .npy header size {len(header.getvalue())}")
        self.file.seek(0)
        self.file.write(header.getvalue())
        self.file.close()


def _encode_into(
    directory: Path,
    pairs: PairStream,
    toks: tuple[Any, Any],
    max_len: int | None,
    drop_invalid: bool,
    workers: int,
) -> None:
    """Encode into a temporary folder beside ``directory``, then rename it."""
    with cache_entry(directory, MANIFEST) as tmp:
        counts = _write_arrays(tmp, pairs, toks, max_len, drop_invalid, workers)
        (tmp / "counts.json").write_text(json.dumps(counts))
    log.info("encoded %d pairs into %s", counts["pairs"], directory)


def _write_arrays(
    folder: Path,
    pairs: PairStream,
    toks: tuple[Any, Any],
    max_len: int | None,
    drop_invalid: bool,
    workers: int,
) -> dict[str, int]:
    """Encode, filter and append chunk by chunk; the counts of pairs, empty and long ones."""
    counts = {"pairs": 0, "empty": 0, "long": 0}
    limit = np.inf if max_len is None else max_len + 1  # lengths include the EOS
    ends = {"src": 0, "tgt": 0}  # ids written so far
    with contextlib.ExitStack() as stack:
        writers = {
            name: stack.enter_context(NpyWriter(folder / f"{name}.npy", dtype))
            for name, dtype in _ARRAYS.items()
        }
        for side in ends:
            writers[f"{side}_offsets"].append(np.zeros(1, np.int64))
        for (src_ids, src_len), (tgt_ids, tgt_len) in _encoded_chunks(pairs, toks, workers):
            empty = (src_len == 1) | (tgt_len == 1)  # EOS only
            long = ~empty & (np.maximum(src_len, tgt_len) > limit)
            keep = ~(empty | long) if drop_invalid else np.ones(len(src_len), dtype=bool)
            for side, ids, lengths in (("src", src_ids, src_len), ("tgt", tgt_ids, tgt_len)):
                writers[f"{side}_ids"].append(ids[np.repeat(keep, lengths)])
                writers[f"{side}_offsets"].append(ends[side] + np.cumsum(lengths[keep]))
                ends[side] += int(lengths[keep].sum())
            writers["line_numbers"].append(counts["pairs"] + np.flatnonzero(keep))
            counts["pairs"] += len(src_len)
            counts["empty"] += int(empty.sum())
            counts["long"] += int(long.sum())
    return counts


def _chunks(pairs: PairStream) -> Iterator[tuple[list[str], list[str]]]:
    """The stream's batches cut (or joined) into (sources, targets) of CHUNK pairs."""
    src: list[str] = []
    tgt: list[str] = []
    for batch_src, batch_tgt in pairs.batches():
        src += batch_src
        tgt += batch_tgt
        while len(src) >= CHUNK:
            yield src[:CHUNK], tgt[:CHUNK]
            src, tgt = src[CHUNK:], tgt[CHUNK:]
    if src:
        yield src, tgt


Encoded = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
_WORKER_TOKENIZERS: tuple[Any, Any] | None = None  # a worker process's own models


def _encoded_chunks(pairs: PairStream, toks: tuple[Any, Any], workers: int) -> Iterator[Encoded]:
    """Each chunk's (ids, lengths) per side, in order: in this process for a corpus of one
    chunk, else in ``workers`` processes, at most two chunks each in flight."""
    chunks = _chunks(pairs)
    first = list(islice(chunks, 2))
    if workers <= 1 or len(first) < 2:
        for src, tgt in chain(first, chunks):
            yield _encode_pair_lists(toks, src, tgt, threads=None)
        return
    protos = tuple(tok.proto for tok in toks)
    with worker_pool(workers, initializer=_start_worker, initargs=protos) as pool:
        pending: deque = deque()
        for src, tgt in chain(first, chunks):  # one string per side: 10x cheaper to send
            pending.append(pool.submit(_encode_in_worker, "\n".join(src), "\n".join(tgt)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _start_worker(src_proto: bytes, tgt_proto: bytes) -> None:
    from seq2seq.data.tokenizer import Tokenizer

    global _WORKER_TOKENIZERS
    _WORKER_TOKENIZERS = Tokenizer(src_proto), Tokenizer(tgt_proto)


def _encode_in_worker(src: str, tgt: str) -> Encoded:
    """A chunk's lines (joined by newlines, which no line holds) encoded on one thread."""
    if _WORKER_TOKENIZERS is None:
        raise DataError("encoding worker started without its tokenizers")
    return _encode_pair_lists(_WORKER_TOKENIZERS, src.split("\n"), tgt.split("\n"), threads=1)


def _encode_pair_lists(
    toks: tuple[Any, Any], src: list[str], tgt: list[str], threads: int | None
) -> Encoded:
    extra = {} if threads is None else {"threads": threads}
    return (
        _flatten(toks[0].encode_batch(src, **extra)),
        _flatten(toks[1].encode_batch(tgt, **extra)),
    )


def _flatten(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate sequences with an EOS after each: (ids int32, lengths int64 incl. EOS)."""
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs)) + 1
    ids = np.full(int(lengths.sum()), EOS, dtype=np.int32)
    is_piece = np.ones(len(ids), dtype=bool)
    is_piece[np.cumsum(lengths) - 1] = False
    ids[is_piece] = np.fromiter(
        chain.from_iterable(seqs), dtype=np.int32, count=len(ids) - len(seqs)
    )
    return ids, lengths
