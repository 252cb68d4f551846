"""Token-budget batches of similar lengths, reshuffled per epoch, padded with vectorised numpy,
and each epoch's batches shared out among processes and grouped into updates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from seq2seq.data.dataset import TokenizedCorpus
from seq2seq.errors import Seq2SeqError
from seq2seq.vocab import BOS, EOS, PAD

POOL_BATCHES = 100  # a shuffled pool holds about this many batches, sorted by length inside


@dataclass
class Batch:
    """Padded int64 tensors of one batch (PAD = 0) and where its pairs sit in the corpus."""

    src: torch.Tensor  # [B, S] pieces + EOS
    src_lengths: torch.Tensor  # [B]
    tgt_in: torch.Tensor  # [B, T] BOS + pieces
    tgt_out: torch.Tensor  # [B, T] pieces + EOS
    ids: torch.Tensor  # [B] positions in the TokenizedCorpus
    ntokens: int  # non-pad target tokens
    align: torch.Tensor | None = None  # [B, T, S] guided alignment's attention targets

    def to(self, device: torch.device) -> Batch:
        """The token tensors on ``device`` (`to_device`); lengths and ids stay on the host,
        where packing and bookkeeping read them."""
        return replace(
            self,
            src=to_device(self.src, device),
            tgt_in=to_device(self.tgt_in, device),
            tgt_out=to_device(self.tgt_out, device),
            align=None if self.align is None else to_device(self.align, device),
        )


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host tensor ``t`` on ``device``; to a GPU from pinned memory, without the host waiting
    for the work queued there (a plain copy would wait for it)."""
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.contiguous().pin_memory().to(device, non_blocking=True)  # strided: a plain copy


def collate(corpus: TokenizedCorpus | _Pairs, ids: np.ndarray) -> Batch:
    """Gather and pad the pairs ``ids`` of ``corpus`` (no per-token Python loop)."""
    ids = np.asarray(ids, dtype=np.int64)
    if isinstance(corpus, TokenizedCorpus):
        (src, src_lengths), (tgt_out, tgt_lengths) = (
            corpus.rows("src", ids),
            corpus.rows("tgt", ids),
        )
    else:
        src, src_lengths = _pad(corpus.src_ids, corpus.src_offsets, ids)
        tgt_out, tgt_lengths = _pad(corpus.tgt_ids, corpus.tgt_offsets, ids)
    tgt_in = np.empty_like(tgt_out)
    tgt_in[:, 0] = BOS
    tgt_in[:, 1:] = tgt_out[:, :-1]
    tgt_in[tgt_out == PAD] = PAD  # the EOS shifted past each end
    return Batch(
        src=torch.from_numpy(src),
        src_lengths=torch.from_numpy(src_lengths),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        ids=torch.tensor(ids),
        ntokens=int(tgt_lengths.sum()),
    )


def collate_sequences(
    src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], ids: np.ndarray
) -> Batch:
    """The batch of pairs given as piece ids (without EOS) that sit at ``ids`` in a corpus."""
    flat = [_flatten(side) for side in (src, tgt)]
    batch = collate(_Pairs(*flat[0], *flat[1]), np.arange(len(src)))
    return replace(batch, ids=torch.as_tensor(np.asarray(ids, dtype=np.int64)))


@dataclass
class _Pairs:
    """The arrays ``collate`` reads from a TokenizedCorpus."""

    src_ids: np.ndarray
    src_offsets: np.ndarray
    tgt_ids: np.ndarray
    tgt_offsets: np.ndarray


def _flatten(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Sequences + EOS each, concatenated: (flat ids, offsets [len + 1])."""
    lengths = np.array([len(s) + 1 for s in seqs], dtype=np.int64)
    flat = np.full(int(lengths.sum()), EOS, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for start, seq in zip(offsets[:-1], seqs, strict=True):
        flat[start : start + len(seq)] = seq
    return flat, offsets


def _pad(flat: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``flat[offsets[i]:offsets[i + 1]]`` for i in ids, right-padded: ([B, L], lengths)."""
    starts = np.asarray(offsets[ids], dtype=np.int64)
    lengths = np.asarray(offsets[ids + 1], dtype=np.int64) - starts
    cols = np.arange(lengths.max(initial=0))
    real = cols < lengths[:, None]  # [B, L]
    out = np.zeros(real.shape, dtype=np.int64)
    out[real] = flat[(starts[:, None] + cols)[real]]
    return out, lengths


class TokenBatchSampler:
    """Batches of corpus positions costing at most ``batch_tokens`` = sentences x longest side.

    A pair longer than the budget forms its own batch. With ``shuffle``, each epoch shuffles the
    pairs, sorts pools of about POOL_BATCHES batches by length, packs them and shuffles the
    batches, deterministically in (seed, epoch). Without, one fixed length-sorted order.
    """

    def __init__(
        self,
        src_lengths: np.ndarray,
        tgt_lengths: np.ndarray,
        batch_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if batch_tokens < 1:  # a caller's mistake: the schema refuses train.batch_tokens < 1
            raise ValueError(f"batch_tokens must be positive, not {batch_tokens}")
        self.src_lengths = np.asarray(src_lengths, dtype=np.int32)
        self.lengths = np.maximum(self.src_lengths, np.asarray(tgt_lengths, dtype=np.int32))
        self.batch_tokens = batch_tokens
        self.shuffle = shuffle
        self.seed = seed
        self._last: tuple[int, list[np.ndarray]] | None = None

    def batches(self, epoch: int) -> list[np.ndarray]:
        """Every position exactly once, as int64 arrays, in this epoch's order."""
        if self._last is not None and self._last[0] == epoch:
            return self._last[1]
        if not self.shuffle:
            result = self._pack(self._sorted(np.arange(len(self.lengths))))
        else:
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(len(self.lengths))
            mean = self.lengths.mean() if len(self.lengths) else 1.0
            pool = max(1, int(POOL_BATCHES * self.batch_tokens / mean))
            packed = [
                self._pack(self._sorted(perm[i : i + pool])) for i in range(0, len(perm), pool)
            ]
            flat = [batch for batches in packed for batch in batches]
            result = [flat[i] for i in rng.permutation(len(flat))]
        self._last = (epoch, result)
        return result

    def __len__(self) -> int:
        """Number of batches in the epoch last passed to ``batches`` (epoch 0 before any call)."""
        return len(self.batches(self._last[0] if self._last else 0))

    def _sorted(self, positions: np.ndarray) -> np.ndarray:
        """``positions`` ordered by longest side, then source length (stable)."""
        return positions[np.lexsort((self.src_lengths[positions], self.lengths[positions]))]

    def _pack(self, order: np.ndarray) -> list[np.ndarray]:
        """Split ``order`` (sorted by longest side) greedily into consecutive batches within the
        budget. Sorted, a batch costs its size x its last length, so each batch is found with
        one vectorised look at the at most ``budget / first length`` pairs that could join."""
        lengths, budget = self.lengths[order], self.batch_tokens
        batches, start = [], 0
        while start < len(order):
            window = lengths[start + 1 : start + 2 + budget // max(int(lengths[start]), 1)]
            over = np.arange(2, len(window) + 2) * window > budget  # cost if it joins
            end = start + 1 + (int(over.argmax()) if over.any() else len(window))
            batches.append(order[start:end])
            start = end
        return batches


def shard(batches: Sequence[np.ndarray], world_size: int) -> list[list[np.ndarray]]:
    """Every rank's share of an epoch: the same number of batches each, every pair in exactly one.

    While the count is not a multiple of ``world_size``, the batch with the most sentences is
    halved (both halves stay within the budget).
    """
    batches = list(batches)
    while len(batches) % world_size:
        i = max(range(len(batches)), key=lambda j: len(batches[j]))
        if len(batches[i]) < 2:
            raise Seq2SeqError(
                f"{len(batches)} batches of one pair each cannot be shared equally among "
                f"{world_size} processes: use fewer processes or more data"
            )
        half = len(batches[i]) // 2
        batches[i : i + 1] = [batches[i][:half], batches[i][half:]]
    return [batches[rank::world_size] for rank in range(world_size)]


@dataclass
class Update:
    """What one rank feeds one optimizer update."""

    batches: list[np.ndarray]  # this rank's micro-batches (corpus positions)
    tokens: int  # target tokens of the update: all micro-batches of all ranks


def plan_updates(
    batches: Sequence[np.ndarray],
    tgt_lengths: np.ndarray,
    rank: int = 0,
    world_size: int = 1,
    accumulate: int = 1,
) -> list[Update]:
    """An epoch's updates for ``rank``: its shard in groups of ``accumulate`` micro-batches.

    Every rank computes the same shards, so each knows the token count of the whole update
    without communicating.
    """
    shares = shard(batches, world_size)
    updates = []
    for start in range(0, len(shares[0]), accumulate):
        groups = [share[start : start + accumulate] for share in shares]
        tokens = sum(int(tgt_lengths[ids].sum()) for group in groups for ids in group)
        updates.append(Update(groups[rank], tokens))
    return updates
