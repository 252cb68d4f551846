"""The fixed shapes of the graphed searches' batches (`seq2seq.decoding.graphed`): rows padded
to a power of two, the source to a multiple of `SOURCE_STEP`, and the steps a batch's buffers
hold; and which shapes are small enough to keep buffers and graphs for."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decoding.hypothesis import max_lengths
from seq2seq.vocab import EOS, PAD

CHUNK = 8  # steps per graph, and between two looks at the device (as `check_interval` on a GPU)
SOURCE_STEP = 16  # source lengths are padded up to a multiple of this: few shapes
# the largest attention record (a shape's largest buffer) kept with its graphs: a batch of
# longer sentences runs eagerly, so that a server's rare long inputs hold no gigabytes
MAX_HELD_BYTES = 64 << 20


def eager_steps(beam_size: int) -> int:
    """Steps run eagerly before a batch's chunks: beam search's first (a row per sentence, then
    ``beam_size`` per sentence, the shape its chunks keep); greedy search graphs its first too."""
    return int(beam_size > 1)


@dataclass(frozen=True)
class Shape:
    """A padded batch: rows, source length, steps the buffers hold, autocast dtype (None: off),
    and the settings a graph holds fixed (beam size, n-best, length penalty)."""

    rows: int
    src_len: int
    width: int
    dtype: torch.dtype | None
    settings: tuple[int, int, float]

    @classmethod
    def of(cls, rows: int, src_len: int, cfg: DecodeConfig, dtype: torch.dtype | None) -> Shape:
        """The shape of a batch of ``rows`` sources, the longest ``src_len`` long, with room
        for steps 0..longest in whole chunks after the `eager` steps."""
        padded_len = -(-src_len // SOURCE_STEP) * SOURCE_STEP
        longest = int(max_lengths(torch.tensor([padded_len]), cfg.max_len_a, cfg.max_len_b)[0])
        eager = eager_steps(cfg.beam_size)
        width = eager + -(-(longest + 1 - eager) // CHUNK) * CHUNK
        settings = (cfg.beam_size, cfg.nbest, cfg.alpha)
        return cls(1 << (rows - 1).bit_length(), padded_len, width, dtype, settings)

    @property
    def eager(self) -> int:
        return eager_steps(self.settings[0])

    @property
    def chunks(self) -> int:
        """The most chunks a batch of this shape runs."""
        return (self.width - self.eager) // CHUNK

    def attention_bytes(self, heads: int) -> int:
        """The attention record's size, fp32 [steps, rows x beam, heads, source]."""
        return 4 * self.width * self.rows * self.settings[0] * heads * self.src_len

    def kept(self, heads: int) -> bool:
        """Whether buffers and graphs of this shape are kept (`MAX_HELD_BYTES`)."""
        return self.attention_bytes(heads) <= MAX_HELD_BYTES


@dataclass
class Padded:
    """A batch padded to its shape: src [R, S] on the device, lengths and limits [R] on the host
    (extra rows: a one-token source with a limit of 0, ended at their first step)."""

    shape: Shape
    rows: int  # the real ones, first
    src: Tensor
    lengths: Tensor
    limit: Tensor

    @classmethod
    def of(cls, src: Tensor, src_lengths: Tensor, cfg: DecodeConfig) -> Padded:
        rows, src_len = src.shape
        device = src.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        shape = Shape.of(rows, src_len, cfg, dtype)
        padded = torch.full((shape.rows, shape.src_len), PAD, dtype=torch.long, device=src.device)
        padded[:rows, :src_len] = src
        padded[rows:, 0] = EOS
        lengths = torch.ones(shape.rows, dtype=torch.long)
        lengths[:rows] = src_lengths
        limit = torch.zeros(shape.rows, dtype=torch.long)
        limit[:rows] = max_lengths(src_lengths, cfg.max_len_a, cfg.max_len_b)
        return cls(shape, rows, padded, lengths, limit)
