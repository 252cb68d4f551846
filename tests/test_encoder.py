"""Packed bidirectional encoder: equal to the plain GRU without padding, unaffected by padding;
the GRUs under autocast."""

from __future__ import annotations

import pytest
import torch
from model_helpers import hand_batch, tiny_model
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from seq2seq.model import encoder as encoder_module
from seq2seq.model.autocast import run_gru
from seq2seq.model.config import LuongConfig
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


def test_a_batch_sorted_longest_first_is_packed_without_reordering(monkeypatch) -> None:
    """A search's batch (sorted) is packed as it is, with the memory of any other row order."""
    enc = encoder(2)
    src = torch.randint(4, 30, (3, 7), generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([7, 4, 1])
    src[torch.arange(7) >= lengths[:, None]] = 0
    sorted_as = []
    pack = encoder_module.pack_padded_sequence

    def packed(*args, enforce_sorted: bool, **kwargs):
        sorted_as.append(enforce_sorted)
        return pack(*args, enforce_sorted=enforce_sorted, **kwargs)

    monkeypatch.setattr(encoder_module, "pack_padded_sequence", packed)
    order = torch.tensor([1, 2, 0])
    memory, final = enc(src, lengths)
    shuffled_memory, shuffled_final = enc(src[order], lengths[order])
    assert sorted_as == [True, False]
    torch.testing.assert_close(shuffled_memory, memory[order])
    torch.testing.assert_close(shuffled_final, final[order])


def test_the_grus_run_in_autocasts_dtype_with_autocast_off(monkeypatch) -> None:
    """Under bf16 autocast the encoder's GRU (packed and not) and the decoder's whole-sequence
    one (Luong without input feeding) get bf16 weights and inputs, with autocast off for the
    call: CUDA's would run cuDNN's GRU in fp16 (the same code runs there)."""
    calls = []
    forward, gru = torch.nn.GRU.forward, torch.gru

    def seen(x, weight):
        x = x.data if isinstance(x, torch.nn.utils.rnn.PackedSequence) else x
        calls.append((torch.is_autocast_enabled("cpu"), x.dtype, weight.dtype))

    def recorded_forward(self, x, *args):
        seen(x, self.weight_hh_l0)
        return forward(self, x, *args)

    def recorded_gru(x, *args):
        seen(x, next(a for a in args if isinstance(a, list))[0])  # the weights' list
        return gru(x, *args)

    monkeypatch.setattr(torch.nn.GRU, "forward", recorded_forward)
    monkeypatch.setattr(torch, "gru", recorded_gru)
    model = tiny_model(attention=LuongConfig(size=12, input_feed=False))
    batch = hand_batch(0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model.features(batch.src, batch.src_lengths, batch.tgt_in)
        model.encode(batch.src, batch.src_lengths, packed=False)
    assert len(calls) == 4  # encoder, decoder, then both directions unpacked
    assert set(calls) == {(False, torch.bfloat16, torch.bfloat16)}


@pytest.mark.parametrize("rows_sorted", [True, False])
def test_run_gru_is_the_modules_call(rows_sorted: bool) -> None:
    """`run_gru` in a dtype is the GRU module's own call (packed, in any row order, or a padded
    batch with a start state), and leaves the module as it was: it does not flatten its weights
    again at its next plain call (which on CUDA moves them under a captured graph)."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(5, 4, num_layers=2, bidirectional=True, batch_first=True).eval()
    x, lengths = torch.randn(3, 6, 5), torch.tensor([6, 4, 2] if rows_sorted else [4, 6, 2])
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=rows_sorted)
    start = torch.randn(4, 3, 4)
    flattened = []
    gru.flatten_parameters = lambda: flattened.append(1)  # what a changed weight list calls
    for args in ((packed,), (packed, start), (x, start)):
        want_out, want_h = gru(*args)
        got_out, got_h = run_gru(gru, torch.float32, *args)
        if isinstance(want_out, PackedSequence):
            torch.testing.assert_close(got_out.data, want_out.data, rtol=0, atol=0)
            assert got_out.unsorted_indices is want_out.unsorted_indices
        else:
            torch.testing.assert_close(got_out, want_out, rtol=0, atol=0)
        torch.testing.assert_close(got_h, want_h, rtol=0, atol=0)
        run_gru(gru, torch.bfloat16, *args)
    assert not flattened
