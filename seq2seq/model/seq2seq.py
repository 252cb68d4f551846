"""The composed translator: encoder, attention decoder, and the training loss."""

from __future__ import annotations

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.data.tokenizer import PAD
from seq2seq.errors import Seq2SeqError
from seq2seq.model.attention import Attention
from seq2seq.model.decoder import Decoder, EncoderOutput
from seq2seq.model.encoder import Encoder


class SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy and plain NLL from one log-softmax, fused backward.

    Same value as ``F.cross_entropy(logits, target, label_smoothing=eps, reduction="sum")``; the
    gradient ``softmax - (1 - eps) onehot - eps / V`` is written in one pass over [N, V].
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        dtype = torch.promote_types(logits.dtype, torch.float32)  # bf16 logits -> fp32 loss
        log_probs = torch.log_softmax(logits.to(dtype), dim=-1)  # [N, V]
        nll = -log_probs.gather(1, target.unsqueeze(1)).sum()
        loss = (1.0 - eps) * nll - eps / log_probs.size(1) * log_probs.sum()
        ctx.save_for_backward(log_probs, target)
        ctx.eps, ctx.logits_dtype = eps, logits.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor) -> tuple[Tensor, None, None]:
        log_probs, target = ctx.saved_tensors
        grad = torch.exp(log_probs).sub_(ctx.eps / log_probs.size(1))  # [N, V]
        rows = torch.arange(target.size(0), device=target.device)
        grad[rows, target] -= 1.0 - ctx.eps
        return grad.mul_(grad_loss).to(ctx.logits_dtype), None, None


class Seq2Seq(nn.Module):
    """Bidirectional GRU encoder + attention decoder; ``loss`` scores a teacher-forced batch."""

    def __init__(self, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def encode(self, src: Tensor, lengths: Tensor) -> EncoderOutput:
        """src [B, S], lengths [B] -> memory, mask, attention keys/values and the decoder flow's
        per-batch projections, all computed once per batch."""
        memory, final = self.encoder(src, lengths)  # [B, S, 2H], [B, 2H]
        mask = torch.arange(src.size(1), device=src.device) < lengths.to(src.device)[:, None]
        keys, values = self.decoder.attention.precompute(memory)
        return self.decoder.flow.prepare(EncoderOutput(memory, mask, keys, values, final))

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
        logits = self.decoder.output_layer(features[real])  # [N, V]
        loss, nll = SmoothedCrossEntropy.apply(logits, batch.tgt_out[real], label_smoothing)
        return loss, nll, batch.ntokens


def build_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int) -> Seq2Seq:
    """The model described by ``cfg`` (attention from ``cfg.attention`` via Hydra)."""
    memory_size = 2 * cfg.hidden_size
    try:
        attention: Attention = instantiate(
            cfg.attention, query_size=cfg.hidden_size, memory_size=memory_size
        )
    except InstantiationException as error:  # show the user's mistake, not Hydra's wrapper
        if isinstance(error.__cause__, Seq2SeqError):
            raise error.__cause__ from None
        raise
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
