"""Token ids cached on disk, padded batches, and the token-budget sampler."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from seq2seq.data import dataset
from seq2seq.data.batching import TokenBatchSampler, collate
from seq2seq.data.dataset import encode_corpus
from seq2seq.data.stream import from_lists
from seq2seq.data.textstore import text_store
from seq2seq.errors import DataError
from seq2seq.vocab import BOS, EOS


class NumberTokenizer:
    """Stands in for sentencepiece: "5 6 7" encodes to [5, 6, 7]; counts its calls."""

    def __init__(self, path: Path, model: bytes = b"numbers") -> None:
        self.path, self.proto = path, model
        path.write_bytes(model)
        self.calls = 0

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        self.calls += 1
        return [[int(w) for w in text.split()] for text in texts]


SRC = ["5 6 7", "", "8 9", "4 4 4 4 4", "10", "11 12"]
TGT = ["20 21", "22", "", "23", "24 25 26 27 28", "29 30 31"]


@pytest.fixture
def toks(tmp_path: Path) -> tuple[NumberTokenizer, NumberTokenizer]:
    return NumberTokenizer(tmp_path / "src.model"), NumberTokenizer(tmp_path / "tgt.model")


def test_encode_corpus_drops_invalid_training_pairs(
    toks, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        corpus = encode_corpus(from_lists(SRC, TGT), *toks, tmp_path, max_len=3, drop_invalid=True)
    assert "dropped 4 of 6 pairs (2 empty, 2 longer than max_len)" in caplog.text
    assert corpus.line_numbers.tolist() == [0, 5]
    assert corpus.src(1).tolist() == [11, 12, EOS] and corpus.tgt(1).tolist() == [29, 30, 31, EOS]
    assert corpus.src_lengths.tolist() == [4, 3] and corpus.tgt_lengths.tolist() == [3, 4]
    assert isinstance(corpus.src_ids, np.memmap) and corpus.src_ids.dtype == np.int32

    everything = encode_corpus(from_lists(SRC, TGT), *toks, tmp_path, max_len=3, drop_invalid=False)
    assert len(everything) == 6 and everything.line_numbers.tolist() == list(range(6))
    assert everything.src(1).tolist() == [EOS] and everything.src(3).tolist() == [4] * 5 + [EOS]


def test_a_training_corpus_with_every_pair_dropped_is_refused(toks, tmp_path: Path) -> None:
    """An untrained run is no result: training stops, saying why and what to change."""
    with pytest.raises(DataError, match=r"every one of the 6 training pairs was dropped \(2 with"):
        encode_corpus(from_lists(SRC, TGT), *toks, tmp_path, max_len=1, drop_invalid=True)
    assert len(encode_corpus(from_lists(SRC, TGT), *toks, tmp_path, 1, False)) == 6


def test_encode_corpus_is_cached_by_content(toks, tmp_path: Path) -> None:
    src_tok, tgt_tok = toks
    first = encode_corpus(from_lists(SRC, TGT), src_tok, tgt_tok, tmp_path, 3, True)
    again = encode_corpus(from_lists(SRC, TGT), src_tok, tgt_tok, tmp_path, 3, True)
    assert src_tok.calls == 1 and again.directory == first.directory
    assert np.array_equal(again.tgt_ids, first.tgt_ids)
    assert (
        encode_corpus(from_lists(SRC, TGT), src_tok, tgt_tok, tmp_path, 4, True).directory
        != first.directory
    )
    other = NumberTokenizer(tmp_path / "other.model", b"another model")
    assert (
        encode_corpus(from_lists(SRC, TGT), other, tgt_tok, tmp_path, 3, True).directory
        != first.directory
    )
    reordered = encode_corpus(from_lists(SRC, TGT[::-1]), src_tok, tgt_tok, tmp_path, 3, True)
    assert reordered.directory != first.directory and src_tok.calls == 3


def test_collate_pads_and_shifts(toks, tmp_path: Path) -> None:
    corpus = encode_corpus(from_lists(SRC, TGT), *toks, tmp_path, max_len=None, drop_invalid=False)
    batch = collate(corpus, np.array([4, 0]))
    assert batch.src.tolist() == [[10, EOS, 0, 0], [5, 6, 7, EOS]]
    assert batch.src_lengths.tolist() == [2, 4]
    assert batch.tgt_in.tolist() == [[BOS, 24, 25, 26, 27, 28], [BOS, 20, 21, 0, 0, 0]]
    assert batch.tgt_out.tolist() == [[24, 25, 26, 27, 28, EOS], [20, 21, EOS, 0, 0, 0]]
    assert batch.ids.tolist() == [4, 0] and batch.ntokens == 9
    for tensor in (batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, batch.ids):
        assert tensor.dtype == torch.int64


def _mapped_kib(name: str) -> int:
    """Resident KiB of this process's mappings of files called ``name`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0]:  # a mapping's first line: its range, ..., its path
            inside = line.endswith("/" + name)
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc")
def test_corpus_lengths_and_batches_leave_the_offsets_unmapped(toks, tmp_path, monkeypatch):
    """The lengths (read in chunks) and the batches are read from the files: a touched page
    of a memory map stays resident, 16 bytes a pair for the offsets alone."""
    monkeypatch.setattr(dataset, "READ", 1000)  # several chunks
    rng = np.random.default_rng(0)
    src = [" ".join(["5"] * n) for n in rng.integers(1, 30, 20_000)]
    tgt = [" ".join(["6"] * n) for n in rng.integers(1, 30, 20_000)]
    corpus = encode_corpus(from_lists(src, tgt), *toks, tmp_path, None, drop_invalid=True)
    assert corpus.src_lengths.tolist() == [len(s.split()) + 1 for s in src]  # EOS included
    assert corpus.tgt_lengths.tolist() == [len(t.split()) + 1 for t in tgt]
    assert corpus.src_lengths.dtype == corpus.tgt_lengths.dtype == np.int32
    ids = rng.permutation(len(corpus))
    for batch in np.array_split(ids, 100):
        rows = collate(corpus, batch)
        assert rows.src_lengths.tolist() == corpus.src_lengths[batch].tolist()
        assert (rows.src == 5).sum(1).tolist() == (corpus.src_lengths[batch] - 1).tolist()
    assert _mapped_kib("src_offsets.npy") + _mapped_kib("tgt_offsets.npy") == 0


@pytest.fixture(scope="module")
def lengths() -> tuple[np.ndarray, np.ndarray]:
    """Multi30k-like lengths plus a few pairs longer than any budget used below."""
    rng = np.random.default_rng(0)
    src = 2 + rng.poisson(13, 5000)
    tgt = np.maximum(2, src + rng.integers(-4, 5, 5000))
    src[[7, 70, 700]] = 900
    return src, tgt


def cost(batch: np.ndarray, src: np.ndarray, tgt: np.ndarray) -> int:
    return len(batch) * int(max(src[batch].max(), tgt[batch].max()))


@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_covers_every_pair_once_within_budget(lengths, shuffle: bool) -> None:
    src, tgt = lengths
    sampler = TokenBatchSampler(src, tgt, batch_tokens=500, shuffle=shuffle, seed=3)
    for epoch in range(3):
        batches = sampler.batches(epoch)
        assert len(sampler) == len(batches)
        assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(len(src)))
        for batch in batches:
            assert len(batch) == 1 or cost(batch, src, tgt) <= 500
        assert sum(len(b) == 1 and src[b[0]] == 900 for b in batches) == 3  # long pairs alone
        real = sum(int(np.maximum(src, tgt)[b].sum()) for b in batches)
        padded = sum(cost(b, src, tgt) for b in batches)
        assert 1 - real / padded < 0.05  # similar lengths grouped


def test_a_sampler_without_a_budget_is_a_callers_mistake(lengths) -> None:
    src, tgt = lengths
    with pytest.raises(ValueError, match="batch_tokens must be positive, not 0"):
        TokenBatchSampler(src, tgt, batch_tokens=0)


def test_sampler_order_deterministic_and_reshuffled(lengths) -> None:
    src, tgt = lengths

    def order(epoch: int, seed: int = 3, shuffle: bool = True) -> list[list[int]]:
        sampler = TokenBatchSampler(src, tgt, 500, shuffle=shuffle, seed=seed)
        return [b.tolist() for b in sampler.batches(epoch)]

    assert order(2) == order(2)
    assert order(1) != order(2) and order(2, seed=4) != order(2)
    assert sorted(map(sorted, order(1))) != sorted(
        map(sorted, order(2))
    )  # new batches, not only order
    longest = [max(np.maximum(src, tgt)[b]) for b in order(1)]
    assert sum(np.diff(longest) < 0) > len(longest) / 4  # batch order shuffled, not length-sorted
    assert order(0, shuffle=False) == order(5, shuffle=False, seed=9)
    fixed = np.concatenate(order(0, shuffle=False))
    assert np.all(np.diff(np.maximum(src, tgt)[fixed]) >= 0)  # length-sorted


@pytest.mark.parametrize("write", ["token ids", "text"])
def test_a_full_disk_in_the_cache_names_the_cache(
    toks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """A failed write of an open file has no file name: it said only 'No space left on
    device'. It names the cache's folder now, and leaves no half-written entry."""

    def full(self, values) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(dataset.NpyWriter, "append", full)
    cache, pairs = tmp_path / "cache", from_lists(SRC, TGT)
    with pytest.raises(OSError) as failed:
        if write == "text":
            text_store(pairs, cache)
        else:
            encode_corpus(pairs, *toks, cache, max_len=3, drop_invalid=True)
    folder = cache / ("text" if write == "text" else "corpus")
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(folder)
    assert not list(folder.iterdir())
