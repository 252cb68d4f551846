"""The training text on disk, one UTF-8 blob and its line offsets per side, read by line number.

Subword sampling segments each batch's sentences anew from their text; this store lets it read
just those sentences by offset, so the text of a corpus larger than memory is never held whole.
Cached by the stream's fingerprint like the token ids.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from pathlib import Path

import numpy as np

from seq2seq.data.dataset import NpyWriter
from seq2seq.data.stream import PairStream, fingerprint
from seq2seq.storage.manifest import damage
from seq2seq.storage.staging import cache_entry

log = logging.getLogger(__name__)

SIDES = ("src", "tgt")
_MANIFEST = "manifest.json"


class SideText:
    """One side's lines, ``text[i]`` by line number, read from the memory-mapped blob."""

    def __init__(self, blob: Path, offsets: Path) -> None:
        self._offsets = np.load(offsets, mmap_mode="r")
        size = int(self._offsets[-1])
        self._blob = np.memmap(blob, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> str:
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        return self._blob[start:end].tobytes().decode("utf-8")


def text_store(stream: PairStream, cache_dir: Path) -> tuple[SideText, SideText]:
    """Both sides of ``stream`` as SideTexts, written into ``cache_dir/text/<key>`` once."""
    directory = Path(cache_dir) / "text" / fingerprint("text", stream.fingerprint)[:16]
    if directory.is_dir() and (problems := damage(directory / _MANIFEST)):
        log.warning(
            "cached text %s is damaged (%s): writing it again", directory, "; ".join(problems)
        )
        shutil.rmtree(directory, ignore_errors=True)
    if not directory.is_dir():
        _write(directory, stream)
    return tuple(SideText(directory / f"{s}.txt", directory / f"{s}_offsets.npy") for s in SIDES)


def _write(directory: Path, stream: PairStream) -> None:
    with cache_entry(directory, _MANIFEST) as tmp:
        sizes = _write_text(tmp, stream)
        (tmp / "size.json").write_text(json.dumps(sizes))


def _write_text(folder: Path, stream: PairStream) -> dict[str, int]:
    """Each side's UTF-8 blob and line offsets; the blobs' sizes."""
    ends = dict.fromkeys(SIDES, 0)
    starts: dict[str, list[int]] = {s: [0] for s in SIDES}
    with contextlib.ExitStack() as stack:
        blobs = {s: stack.enter_context(open(folder / f"{s}.txt", "wb")) for s in SIDES}
        offsets = {
            s: stack.enter_context(NpyWriter(folder / f"{s}_offsets.npy", np.int64)) for s in SIDES
        }
        for pair in stream:
            for side, text in zip(SIDES, pair, strict=True):
                data = text.encode("utf-8")
                blobs[side].write(data)
                ends[side] += len(data)
                starts[side].append(ends[side])
                if len(starts[side]) >= 65536:
                    offsets[side].append(np.array(starts[side], dtype=np.int64))
                    starts[side] = []
        for side in SIDES:
            offsets[side].append(np.array(starts[side], dtype=np.int64))
    return ends
