"""The composed translator: encoder, attention decoder, and the training loss."""

from __future__ import annotations

import torch
from hydra.utils import instantiate
from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.data.tokenizer import PAD
from seq2seq.model.attention import Attention
from seq2seq.model.decoder import Decoder, EncoderOutput
from seq2seq.model.encoder import Encoder


class Seq2Seq(nn.Module):
    """Bidirectional GRU encoder + attention decoder; ``loss`` scores a teacher-forced batch."""

    def __init__(self, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def encode(self, src: Tensor, lengths: Tensor) -> EncoderOutput:
        """src [B, S], lengths [B] -> memory, mask and the attention keys/values (once per batch)."""
        memory, final = self.encoder(src, lengths)  # [B, S, 2H], [B, 2H]
        mask = torch.arange(src.size(1), device=src.device) < lengths.to(src.device)[:, None]
        keys, values = self.decoder.attention.precompute(memory)
        return EncoderOutput(memory, mask, keys, values, final)

    def forward(self, src: Tensor, lengths: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing -> (features [B, T, F], attention weights [B, heads, T, S])."""
        return self.decoder(tgt_in, self.encode(src, lengths))

    def loss(self, batch, label_smoothing: float) -> tuple[Tensor, Tensor, int]:
        """(label-smoothed loss sum, plain NLL sum, target tokens) over the non-pad targets.

        Only the non-pad positions are projected to the vocabulary. ``batch`` is a
        ``seq2seq.data.batching.Batch`` (src, src_lengths, tgt_in, tgt_out, ntokens).
        """
        features, _ = self(batch.src, batch.src_lengths, batch.tgt_in)  # [B, T, F]
        real = batch.tgt_out != PAD  # [B, T]
        logits = self.decoder.output_layer(features[real]).float()  # [N, V]
        log_probs = torch.log_softmax(logits, dim=-1)
        nll = -log_probs.gather(1, batch.tgt_out[real].unsqueeze(1)).sum()
        loss = (1.0 - label_smoothing) * nll - label_smoothing * log_probs.mean(-1).sum()
        return loss, nll.detach(), batch.ntokens


def build_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int) -> Seq2Seq:
    """The model described by ``cfg`` (attention from ``cfg.attention`` via Hydra)."""
    memory_size = 2 * cfg.hidden_size
    attention: Attention = instantiate(
        cfg.attention, query_size=cfg.hidden_size, memory_size=memory_size
    )
    encoder = Encoder(src_vocab, cfg.emb_size, cfg.hidden_size, cfg.encoder_layers, cfg.dropout)
    decoder = Decoder(
        tgt_vocab,
        cfg.emb_size,
        cfg.hidden_size,
        memory_size,
        attention,
        dropout=cfg.dropout,
        input_feed=cfg.input_feed,
        tie_embeddings=cfg.tie_embeddings,
    )
    return Seq2Seq(encoder, decoder)
