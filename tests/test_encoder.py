"""Packed bidirectional encoder: equal to the plain GRU without padding, unaffected by padding."""

from __future__ import annotations

import pytest
import torch

from seq2seq.model.encoder import Encoder


def encoder(layers: int) -> Encoder:
    torch.manual_seed(0)
    return Encoder(vocab_size=30, emb_size=8, hidden_size=6, layers=layers, dropout=0.3).eval()


@pytest.mark.parametrize("layers", [1, 2])
def test_packed_equals_unpacked_without_padding(layers: int) -> None:
    enc = encoder(layers)
    src = torch.randint(4, 30, (3, 7), generator=torch.Generator().manual_seed(1))
    memory, final = enc(src, torch.tensor([7, 7, 7]))
    plain, h_n = enc.rnn(enc.embedding(src))  # no packing at all
    assert memory.shape == (3, 7, 12) and final.shape == (3, 12)
    torch.testing.assert_close(memory, plain)
    torch.testing.assert_close(final, torch.cat([h_n[-2], h_n[-1]], -1))
    # final = [last forward state; first backward state] of the top layer
    torch.testing.assert_close(final, torch.cat([plain[:, -1, :6], plain[:, 0, 6:]], -1))


@pytest.mark.parametrize("layers", [1, 2])
def test_padding_changes_nothing(layers: int) -> None:
    enc = encoder(layers)
    gen = torch.Generator().manual_seed(2)
    lengths = torch.tensor([4, 7, 1])
    src = torch.randint(4, 30, (3, 7), generator=gen)
    src[torch.arange(7) >= lengths[:, None]] = 0
    memory, final = enc(src, lengths)
    assert torch.all(memory[src == 0] == 0)  # nothing at padded positions
    for i, n in enumerate(lengths.tolist()):
        alone_memory, alone_final = enc(src[i : i + 1, :n], lengths[i : i + 1])
        torch.testing.assert_close(memory[i, :n], alone_memory[0])
        torch.testing.assert_close(final[i], alone_final[0])


@pytest.mark.parametrize("layers", [1, 2])
def test_the_unpacked_encoder_equals_the_packed_one(layers: int) -> None:
    """What the ONNX graph runs (no packing) gives the memory and summary of the packed GRU."""
    torch.manual_seed(0)
    encoder = Encoder(20, 6, 8, layers=layers).eval()
    src = torch.tensor([[4, 9, 7, 12, 5, 3], [6, 8, 3, 0, 0, 0], [10, 3, 0, 0, 0, 0]])
    lengths = (src != 0).sum(1)
    with torch.no_grad():
        packed, unpacked = encoder(src, lengths), encoder.unpacked(src, lengths)
    for a, b in zip(packed, unpacked, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
