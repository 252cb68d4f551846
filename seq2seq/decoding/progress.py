"""Long decoding told as it goes: a file or a chunk translated in slices of whole batches, with a
bar on a terminal and a line with the rate and the time left every few seconds in a log.

The slices take the sentences longest first, as the search batches them anyway
(`decode_sources`), in whole batches: every batch holds the sentences it would have held in one
call, so the translations are the same, sampled ones included (each slice starts at its first
batch's seed).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence

from seq2seq_lite.steering import LineSteering
from tqdm import tqdm

from seq2seq.decoding.inference import Translation, Translator, encode_sources

log = logging.getLogger("seq2seq.decoding")

SLICE_SENTENCES = 256  # about: a slice is whole batches, at least one
LOG_EVERY_S = 15.0  # seconds between two progress lines in a log


def clock(seconds: float) -> str:
    """``H:MM:SS``, hours past 24 included."""
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def translate_told(
    translator: Translator,
    lines: Sequence[str],
    what: str,
    seed: int | None = None,
    steer: Sequence[LineSteering] | None = None,
) -> list[Translation]:
    """``translator.translate(lines, seed, steer)``, the same translations, with progress on
    ``what`` ("test_2016_flickr.de", "chunk 3/8"); a line over the source limit is refused
    (InputTooLong, its index in ``lines``) before anything is decoded."""
    search = translator.search
    encoded = encode_sources(translator.src_tok, lines, search.max_source_len)
    order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: -len(encoded[i]))
    per_slice = max(1, SLICE_SENTENCES // search.batch_size)  # batches
    size = per_slice * search.batch_size
    if len(order) <= size:
        return translator.translate(lines, seed, steer)
    results = [Translation([], []) for _ in lines]
    first_seed = search.seed if seed is None else seed
    shown = sys.stderr.isatty()
    bar = tqdm(total=len(order), desc=what, unit=" sentences", disable=not shown, leave=False)
    start = last = time.perf_counter()
    with bar:
        for number, begin in enumerate(range(0, len(order), size)):
            rows = order[begin : begin + size]
            part = None if steer is None else [steer[i] for i in rows]  # each its line's
            done = translator.translate(
                [lines[i] for i in rows], first_seed + number * per_slice, part
            )
            for i, translation in zip(rows, done, strict=True):
                results[i] = translation
            bar.update(len(rows))
            now, finished = time.perf_counter(), begin + len(rows)
            if not shown and now - last >= LOG_EVERY_S and finished < len(order):
                rate = finished / (now - start)
                log.info(
                    "%s: %d of %d sentences, %.1f/s, ETA %s",
                    what,
                    finished,
                    len(order),
                    rate,
                    clock((len(order) - finished) / rate),
                )
                last = now
    return results
