"""Bidirectional GRU encoder: source annotations for attention and a summary for the decoder."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seq2seq.model.autocast import compute_dtype, gru_call, run_gru
from seq2seq.vocab import PAD


class Encoder(nn.Module):
    """Embedding -> dropout -> packed bidirectional GRU over the real (unpadded) tokens.

    Under autocast the GRU runs in autocast's dtype (bf16 on CPUs that have it, ...), with the
    weights cast once per batch: it is the encoder's largest cost.
    """

    def __init__(
        self,
        vocab_size: int,
        emb_size: int,
        hidden_size: int,
        layers: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(
            emb_size,
            hidden_size,
            num_layers=layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.output_size = 2 * hidden_size

    def forward(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """src [B, S], lengths [B] -> (memory [B, S, 2H], final [B, 2H]).

        ``final`` is the top layer's [last forward state; first backward state].
        """
        emb = self.dropout(self.embedding(src))  # [B, S, E]
        lengths = lengths.cpu()
        # a batch sorted longest first (a search's) is packed as it is: no order to copy over
        ordered = bool((lengths[:-1] >= lengths[1:]).all())
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=ordered)
        output, h_n = run_gru(self.rnn, compute_dtype(src.device), packed)  # [layers * 2, B, H]
        memory, _ = pad_packed_sequence(output, batch_first=True, total_length=src.size(1))
        final = torch.cat([h_n[-2], h_n[-1]], dim=-1)  # [B, 2H]
        return memory, final

    def unpacked(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``forward`` without packing, for fixed shapes (graph export, CUDA graphs: packing
        depends on the data and reads the lengths on the host): each direction of each layer
        runs over the whole padded batch, the backward one over every sentence reversed in
        place; padded positions of the memory are 0 as ``forward``'s. lengths [B] may stay on
        the device."""
        steps = torch.arange(src.size(1), device=src.device).unsqueeze(0)  # [1, S]
        real = steps < lengths.unsqueeze(1)  # [B, S]
        flip = torch.where(real, lengths.unsqueeze(1) - 1 - steps, steps)  # [B, S]
        x = self.dropout(self.embedding(src))  # [B, S, E]
        dtype = compute_dtype(src.device)
        for layer in range(self.rnn.num_layers):
            if layer:  # nn.GRU's dropout between layers
                x = nn.functional.dropout(x, self.rnn.dropout, self.training)
            forward = self._direction(x, f"l{layer}", dtype)  # [B, S, H]
            index = flip.unsqueeze(-1).expand(-1, -1, x.size(-1))
            backward = self._direction(x.gather(1, index), f"l{layer}_reverse", dtype)
            backward = backward.gather(1, flip.unsqueeze(-1).expand(-1, -1, backward.size(-1)))
            x = torch.cat([forward, backward], -1) * real.unsqueeze(-1)  # [B, S, 2H]
        rows = torch.arange(src.size(0), device=src.device)
        final = torch.cat([forward[rows, lengths - 1], backward[:, 0]], -1)  # [B, 2H]
        return x, final

    def _direction(self, x: Tensor, suffix: str, dtype: torch.dtype | None) -> Tensor:
        """One direction of one layer of ``self.rnn`` as a one-layer forward GRU: [B, S, H]
        (in ``dtype`` where autocast runs one, as ``forward``). ``torch.gru`` on the weights
        themselves: an nn.GRU given them would move their storage into a flat buffer of its own
        on CUDA (``flatten_parameters``), which leaves a captured graph reading freed memory."""
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        weights = [getattr(self.rnn, f"{n}_{suffix}") for n in names]
        if dtype is not None:
            weights, x = [w.to(dtype) for w in weights], x.to(dtype)
        start = x.new_zeros(1, x.size(0), self.rnn.hidden_size)
        with gru_call(x.device.type):
            return torch.gru(x, start, weights, True, 1, 0.0, self.training, False, True)[0]
