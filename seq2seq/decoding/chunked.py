"""A corpus translated a chunk at a time (the teacher's output of sequence-level distillation,
the synthetic sources of back-translation): each finished chunk is a file of its own, so that an
interrupted run takes up where it stopped, and the settings it was made with are kept beside the
chunks, so that parts of other settings are never mixed in."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU

from seq2seq.decoding.inference import Translation, Translator
from seq2seq.decoding.progress import translate_told
from seq2seq.decoding.settings import BAN_DEFAULTS
from seq2seq.errors import Seq2SeqError

log = logging.getLogger("seq2seq.chunked")
PARTS = ".parts"  # the chunks, inside the output folder
SETTINGS = "settings.json"
# how sampled chunks are seeded, recorded so that chunks drawn otherwise (by versions where each
# chunk restarted at the seed) are refused on resume, not mixed in
SAMPLING_SEEDS = "seed + the chunk's first line number"


def fingerprint(sources: Sequence[str], facts: dict[str, Any]) -> dict[str, Any]:
    """What the chunks depend on: the sources (their SHA-256), the model and the search."""
    digest = hashlib.sha256("\n".join(sources).encode("utf-8")).hexdigest()
    return {**facts, "sentences": len(sources), "sources_sha256": digest}


class Nearest:
    """Of a source's hypotheses, the one of the highest sentence BLEU against its reference (the
    first of equals, in the search's order): Kim & Rush's Seq-Inter."""

    def __init__(self, references: Sequence[str], tokenize: str = "13a") -> None:
        self.references = references
        self.bleu = BLEU(tokenize=tokenize, effective_order=True)

    def pick(self, line: int, candidates: Sequence[str]) -> str:
        """The candidate nearest reference ``line``; empty for no candidates (a blank line)."""
        if not candidates:
            return ""
        reference = [self.references[line]]
        scores = [self.bleu.sentence_score(c, reference).score for c in candidates]
        return candidates[scores.index(max(scores))]


def chosen(
    translator: Translator, translated: Sequence[Translation], first: int, nearest: Nearest | None
) -> list[str]:
    """Each translation's best text, or with ``nearest`` its hypothesis nearest the reference
    (``first``: the line number of the first translation)."""
    if nearest is None:
        return [translator.best_text(t) for t in translated]
    texts = [[translator.text(h) for h in t.hypotheses] for t in translated]
    return [nearest.pick(first + i, candidates) for i, candidates in enumerate(texts)]


def _same_settings(settings: Path, expected: dict[str, Any]) -> bool:
    """Whether a folder's chunks were made as ``expected`` says; chunks recorded before the
    ban settings came lack them, and were made at their defaults."""
    older = {k: v for k, v in BAN_DEFAULTS.items() if k in expected}
    return {**older, **json.loads(settings.read_text())} == expected


def translate_in_chunks(
    translator: Translator,
    sources: Sequence[str],
    out: Path,
    chunk: int,
    facts: dict[str, Any],
    nearest: Nearest | None = None,
) -> list[str]:
    """The best translation of every source (with ``nearest``: of its nbest, the nearest to its
    reference; blank for a blank line), in order; chunks already in ``out/.parts`` from the same
    settings are read back, not decoded again."""
    parts = out / PARTS
    parts.mkdir(parents=True, exist_ok=True)
    if translator.search.sampling:
        facts = {**facts, "sampling_seeds": SAMPLING_SEEDS}
    settings, expected = parts / SETTINGS, fingerprint(sources, facts)
    if settings.is_file() and not _same_settings(settings, expected):
        raise Seq2SeqError(
            f"{parts} holds chunks of other settings or sources ({SETTINGS}); delete it to "
            "start again, or choose another out="
        )
    settings.write_text(json.dumps(expected, indent=1))
    found: list[str] = []
    total = (len(sources) + chunk - 1) // chunk
    start_time = time.perf_counter()
    decoded = 0
    for index, start in enumerate(range(0, len(sources), chunk)):
        part, path = sources[start : start + chunk], parts / f"{index:05d}.txt"
        if path.is_file():
            lines = path.read_text(encoding="utf-8").split("\n")[:-1]
            if len(lines) == len(part):
                found += lines
                continue
        # sampling: the chunk's batches draw with seeds of their own, not the first chunk's again
        what = f"chunk {index + 1}/{total}"
        translated = translate_told(translator, part, what, seed=translator.search.seed + start)
        lines = chosen(translator, translated, start, nearest)
        temporary = path.with_suffix(".tmp")
        temporary.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.replace(temporary, path)
        found += lines
        decoded += len(part)
        rate = decoded / (time.perf_counter() - start_time)
        left = (len(sources) - len(found)) / rate
        log.info(
            "chunk %d/%d: %d sentences, %.1f/s, %.0f s to go",
            index + 1,
            total,
            len(part),
            rate,
            left,
        )
    return found


def write_gz(path: Path, lines: Sequence[str]) -> None:
    """One line per entry, gzip-compressed, written whole or not at all."""
    temporary = path.with_name(path.name + ".tmp")
    with gzip.open(temporary, "wt", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    os.replace(temporary, path)
