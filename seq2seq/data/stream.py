"""Every corpus as the same thing: a stream of (source, target) sentence pairs with a fingerprint.

A stream can be read any number of times and is never held whole in memory; its fingerprint is a
content key (file digests, a dataset's own fingerprint, the reader's settings) that changes
whenever the pairs could, so caches of tokenizers and token ids can be keyed by it without
reading the text first.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import IO, Any

from seq2seq_lite import rules

from seq2seq.errors import DataError

TextPair = tuple[str, str]
TextChunk = tuple[list[str], list[str]]  # sources and targets of consecutive pairs
BATCH = 10_000  # pairs per batch where a reader does not choose
_BLOCK = 1 << 20  # bytes read at once
_DIGESTS: dict[tuple, str] = {}  # file digests of this process, by (path, size, mtime, inode)


@dataclass(frozen=True)
class PairStream:
    """A split: ``stream.batches()`` (or ``iter(stream)``, pair by pair) is a fresh pass over
    its pairs, stripped and validated, in batches of consecutive pairs."""

    name: str  # for messages, e.g. "corpus/train.{de,en}"
    fingerprint: str  # hex key of the pairs' content
    batches: Callable[[], Iterator[TextChunk]]
    size: int | None = None  # pairs, where known without a pass

    def __iter__(self) -> Iterator[TextPair]:
        for src, tgt in self.batches():
            yield from zip(src, tgt, strict=True)

    def lists(self) -> TextChunk:
        """Both sides as lists (for the small splits: validation, test)."""
        src: list[str] = []
        tgt: list[str] = []
        for batch_src, batch_tgt in self.batches():
            src += batch_src
            tgt += batch_tgt
        return src, tgt


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def worker_context() -> BaseContext:
    """Start method for tokenizer training and encoding processes: forked from a clean
    single-threaded server, since a child forked from this process (torch's, the logger's
    threads) can crash. What the server preloads is the command's setting (`preload_workers`)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # Windows
    return multiprocessing.get_context("forkserver")


@contextlib.contextmanager
def worker_pool(
    workers: int, initializer: Callable | None = None, initargs: tuple = ()
) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``worker_context`` processes, each first running ``initializer(*initargs)``.
    An error or Ctrl-C stops them at once: the pool's own exit waits for its work, and
    sentencepiece's training (C++, deaf to signals) would run on for minutes, as would a worker
    under torchrun, which signals the ranks alone. Ctrl-C is the command's to say: the server
    and the workers it forks end without a word of their own (`_start_server`)."""
    context = worker_context()
    _start_server(context)
    start = (initializer, *initargs)
    pool = ProcessPoolExecutor(workers, context, initializer=_worker_start, initargs=start)
    try:
        yield pool
    except BaseException:
        stop = getattr(pool, "terminate_workers", None)  # Python 3.14 on
        if stop is not None:
            stop()
        else:
            for process in list((pool._processes or {}).values()):
                process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _start_server(context: BaseContext) -> None:
    """The workers' server started with Ctrl-C held back, as multiprocessing's resource tracker
    is: a terminal sends it to the server too, whose start (Python's own imports, then the
    preloaded modules) printed its traceback; the server ignores it once started."""
    if context.get_start_method() != "forkserver":
        return
    import multiprocessing.forkserver  # POSIX only
    import multiprocessing.resource_tracker

    multiprocessing.resource_tracker.ensure_running()  # its start unblocks SIGINT: first
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _worker_start(initializer: Callable | None, *initargs: Any) -> None:
    """A worker's start: `end_quietly_on_ctrl_c` (where the server did not preload
    seq2seq.data.worker_start, which does it), then the pool's ``initializer``."""
    if hasattr(signal, "pthread_sigmask"):  # not on Windows, whose workers are spawned
        end_quietly_on_ctrl_c()
    if initializer is not None:
        initializer(*initargs)


def end_quietly_on_ctrl_c() -> None:
    """The workers' server's and each worker's own setting: a Ctrl-C, held back since the server
    started (`_start_server`), ends the process without a word (the command says it)."""
    signal.signal(signal.SIGINT, lambda number, frame: os._exit(128 + number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def preload_workers() -> None:
    """A command's process-wide setting: the modules the workers' server imports once, each
    worker forking from it. A worker also imports the main module: the installed commands'
    scripts are light (seq2seq.commands.cli); the module of ``python -m`` is preloaded, or every
    worker would import it, torch included, again."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    # the server starts as ``python -c``, whose sys.path begins with the current folder: there a
    # folder named seq2seq (a clone's, from the folder above it) would hide an editable install
    os.environ.setdefault("PYTHONSAFEPATH", "1")  # Python 3.11 on
    preload = ["seq2seq.data.worker_start"]  # the workers' modules, then Ctrl-C's setting
    main = getattr(sys.modules["__main__"].__spec__, "name", None)
    if main and not main.endswith("__main__"):
        preload.insert(0, main)
    multiprocessing.get_context("forkserver").set_forkserver_preload(preload)


def fingerprint(*parts: object) -> str:
    """A hex key of JSON-serialisable parts."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def from_lists(src: Sequence[str], tgt: Sequence[str], name: str = "pairs") -> PairStream:
    """A stream over two lists already in memory (tests, callers that have the text)."""
    if len(src) != len(tgt):
        raise DataError(f"{len(src)} source lines but {len(tgt)} target lines")
    digest = hashlib.sha256()
    for side in (src, tgt):
        digest.update(hashlib.sha256("\n".join(side).encode()).digest())
    digest.update(str(len(src)).encode())

    def batches() -> Iterator[TextChunk]:
        for i in range(0, len(src), BATCH):
            yield list(src[i : i + BATCH]), list(tgt[i : i + BATCH])

    return PairStream(name, digest.hexdigest(), batches, len(src))


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (`rules.sha256_file`), once per process and file version."""
    stat = os.stat(path)
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key not in _DIGESTS:
        try:
            _DIGESTS[key] = rules.sha256_file(path)
        except OSError as e:
            raise DataError(f"cannot read {path}: {e.strerror or e}") from None
    return _DIGESTS[key]


def open_binary(path: Path) -> IO[bytes]:
    """A file for reading bytes, decompressed when it ends in .gz; a DataError if it cannot be."""
    try:
        return gzip.open(path, "rb") if Path(path).suffix == ".gz" else open(path, "rb")
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None


def line_blocks(raw: IO[bytes], where: str, strip: bool = True) -> Iterator[list[str]]:
    """The lines of a byte stream, a block (about a megabyte) at a time: split on "\\n" only
    (so U+2028 and friends cannot break the alignment), UTF-8 checked (an error names ``where``
    and the line), stripped (CR, surrounding spaces; with ``strip=False`` only the CR), without a
    leading byte-order mark. Never an empty block."""
    number, rest = 0, b""
    try:
        while True:
            block = raw.read(_BLOCK)
            if not block:
                break
            block, rest = rest + block, b""
            cut = block.rfind(b"\n") + 1
            if cut == 0 and b"\r" in block.rstrip(b"\r"):  # CRs, and no newline in a block
                raise DataError(
                    f"{where} ends its lines with CR alone (old Mac text): convert it first "
                    "(tr '\\r' '\\n' < in > out)"
                )
            block, rest = block[:cut], block[cut:]
            if block:
                lines = decode_text(block, where, number).split("\n")
                lines.pop()  # after the last newline
                yield _tidy(lines, number == 0, strip)
                number += len(lines)
        if rest:  # a last line without a newline
            yield _tidy([decode_text(rest, where, number)], number == 0, strip)
    except EOFError:  # a .gz that ends before its end marker: a cut download or copy
        read = f" (after {number:,} whole lines)" if number else ""
        raise DataError(f"{where} is cut short{read}: copy or download it again") from None
    except OSError as e:
        raise DataError(f"cannot read {where} after line {number}: {e}") from None


def decode_text(block: bytes, where: str, before: int = 0) -> str:
    """``block`` (whole lines of ``where``, after ``before`` lines) as text; invalid UTF-8 is
    DataError naming ``where`` and the line, the one answer of every command that reads text
    (files, standard input, a request body, lite/: `rules.decode_text`)."""
    try:
        return rules.decode_text(block, where, before)
    except rules.InputError as e:
        raise DataError(str(e)) from None


def _tidy(lines: list[str], first: bool, strip: bool) -> list[str]:
    if first:
        lines[0] = lines[0].removeprefix("\ufeff")  # a byte-order mark is not text
    return [line.strip() for line in lines] if strip else [line.rstrip("\r") for line in lines]


def iter_lines(path: Path) -> Iterator[str]:
    """The decoded, stripped lines of a plain or .gz text file, one at a time."""
    with open_binary(path) as f:
        for lines in line_blocks(f, str(path)):
            yield from lines


def limited(stream: PairStream, limit: int | None) -> PairStream:
    """The first ``limit`` pairs of ``stream`` (the stream itself with None)."""
    if limit is None:
        return stream

    def batches() -> Iterator[TextChunk]:
        left = limit
        for src, tgt in stream.batches():
            if left <= 0:
                return
            yield src[:left], tgt[:left]
            left -= len(src)

    size = None if stream.size is None else min(stream.size, limit)
    key = fingerprint("limited", stream.fingerprint, limit)
    return PairStream(stream.name, key, batches, size)
