"""Validation and test splits carved out of one stream of pairs, with no source sentence in two.

Corpora such as Tatoeba repeat a source sentence with several translations; a random pick of
pairs would put copies of a test sentence into training. Pairs are grouped by their source
sentence (case and spacing aside) and each group gets a seeded 64-bit hash: the groups with the
smallest hashes, in order, make the test split, the next ones the validation split (whole groups,
so each split has its size or a few pairs more). The selection streams: only the held-out groups
are kept in memory. The held-out text and hashes are cached by content, so a second run does not
read the corpus again to find them.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import compress
from pathlib import Path

from seq2seq.data.corpus import parallel_batches
from seq2seq.data.stream import PairStream, TextChunk, fingerprint
from seq2seq.errors import DataError
from seq2seq.storage.manifest import damage
from seq2seq.storage.staging import cache_entry

log = logging.getLogger(__name__)

SPLITS = ("valid", "test")
_INDEX = "held_out.json"
_MANIFEST = "manifest.json"


def group_hash(source: str, seed: int) -> int:
    """The seeded 64-bit hash of a source sentence's group (casefolded, spaces collapsed)."""
    key = " ".join(source.casefold().split()).encode()
    digest = hashlib.blake2b(key, digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    return int.from_bytes(digest.digest(), "little")


@dataclass(frozen=True)
class Carved:
    """The held-out splits of one stream: text files in a cache folder, and their groups."""

    directory: Path
    groups: dict[str, frozenset[int]]  # "valid"/"test" -> group hashes
    pairs: dict[str, int]  # "valid"/"test" -> pairs

    def files(self, split: str) -> tuple[Path, Path]:
        return self.directory / f"{split}.src", self.directory / f"{split}.tgt"

    def stream(self, split: str) -> PairStream:
        """The held-out pairs of ``split``, in the order of the corpus."""
        src, tgt = self.files(split)
        key = fingerprint("carved", self.directory.name, split)
        name = f"{split} split carved into {self.directory}"
        return PairStream(name, key, lambda: parallel_batches(src, tgt), self.pairs[split])

    def training(self, corpus: PairStream, seed: int) -> PairStream:
        """The corpus without any pair whose source group is held out."""
        held = self.groups["valid"] | self.groups["test"]
        key = fingerprint("carved-train", corpus.fingerprint, self.directory.name)

        def batches() -> Iterator[TextChunk]:
            for src, tgt in corpus.batches():
                keep = [group_hash(s, seed) not in held for s in src]
                yield list(compress(src, keep)), list(compress(tgt, keep))

        return PairStream(f"{corpus.name} (training part)", key, batches)


def carve(corpus: PairStream, sizes: dict[str, int], seed: int, cache_dir: Path) -> Carved:
    """The held-out splits of ``corpus`` with ``sizes`` pairs ({"valid": n, "test": m}), taken
    from the cache or carved now (two passes over the corpus)."""
    key = fingerprint("carve", corpus.fingerprint, sizes, seed)[:16]
    directory = Path(cache_dir) / "splits" / key
    if directory.is_dir():
        problems = damage(directory / _MANIFEST)
        if not problems:
            return _load(directory)
        log.warning(
            "carved splits %s are damaged (%s): carving again", directory, "; ".join(problems)
        )
        shutil.rmtree(directory, ignore_errors=True)
    groups = _select(corpus, sizes, seed)
    _write(directory, corpus, groups, seed)
    return _load(directory)


def _select(corpus: PairStream, sizes: dict[str, int], seed: int) -> dict[str, set[int]]:
    """The groups of the smallest hashes holding ``sum(sizes)`` pairs, split test-first."""
    target = sum(sizes.values())
    counts: dict[int, int] = {}  # candidate group -> pairs
    heap: list[int] = []  # negated candidate hashes: the largest on top
    total = pairs = 0
    for source, _ in corpus:
        pairs += 1
        h = group_hash(source, seed)
        if h in counts:
            counts[h] += 1
            total += 1
        elif total < target or h < -heap[0]:
            counts[h] = 1
            total += 1
            heapq.heappush(heap, -h)
        while heap and total - counts[-heap[0]] >= target:  # the largest group is not needed
            total -= counts.pop(-heapq.heappop(heap))
    if pairs - total < 1:
        raise DataError(
            f"{corpus.name} has {pairs} pairs: data.valid_size={sizes['valid']} and "
            f"data.test_size={sizes['test']} leave none for training"
        )
    chosen: dict[str, set[int]] = {split: set() for split in SPLITS}
    taken = 0
    for h in sorted(counts):
        split = "test" if taken < sizes["test"] else "valid"
        chosen[split].add(h)
        taken += counts[h]
    return chosen


def _write(directory: Path, corpus: PairStream, groups: dict[str, set[int]], seed: int) -> None:
    """The held-out pairs as text files, written into a temporary folder, then renamed."""
    with cache_entry(directory, _MANIFEST) as tmp:
        pairs = _write_held_out(tmp, corpus, groups, seed)
        index = {"pairs": pairs, "groups": {s: sorted(groups[s]) for s in SPLITS}}
        (tmp / _INDEX).write_text(json.dumps(index))
    log.info(
        "carved %d validation and %d test pairs into %s", pairs["valid"], pairs["test"], directory
    )


def _write_held_out(
    folder: Path, corpus: PairStream, groups: dict[str, set[int]], seed: int
) -> dict[str, int]:
    """``<split>.src``/``.tgt`` of each held-out split, in corpus order; their pair counts."""
    pairs = dict.fromkeys(SPLITS, 0)
    which = {h: split for split in SPLITS for h in groups[split]}
    with contextlib.ExitStack() as stack:
        files = {
            (split, side): stack.enter_context(
                open(folder / f"{split}.{side}", "w", encoding="utf-8")
            )
            for split in SPLITS
            for side in ("src", "tgt")
        }
        for source, target in corpus:
            split = which.get(group_hash(source, seed))
            if split is not None:
                files[split, "src"].write(source + "\n")
                files[split, "tgt"].write(target + "\n")
                pairs[split] += 1
    return pairs


def _load(directory: Path) -> Carved:
    index = json.loads((directory / _INDEX).read_text())
    groups = {split: frozenset(index["groups"][split]) for split in SPLITS}
    return Carved(directory, groups, {split: index["pairs"][split] for split in SPLITS})
