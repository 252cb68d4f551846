"""The composed translator: encoder, attention decoder, and the training loss in ``forward``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from seq2seq.model.config import ModelConfig
from seq2seq.model.decoder import Decoder
from seq2seq.model.encoder import Encoder
from seq2seq.model.registry import attention_type, build_attention
from seq2seq.model.states import EncoderOutput
from seq2seq.vocab import BOS, PAD

# ids no target is ever: label smoothing gives them nothing (search never emits them either)
NEVER_TARGETS = (PAD, BOS)


def _never_targets(log_probs: Tensor) -> Tensor:
    """Each row's log-probs of NEVER_TARGETS, summed: [N, V] -> [N] (by column, not by a list
    index, which would make a tensor from host data: a waiting copy on a GPU)."""
    return sum(log_probs[:, i] for i in NEVER_TARGETS)


class SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy and plain NLL from one log-softmax, fused backward.

    The smoothed target is ``(1 - eps) onehot + eps / K`` on the K = V - 2 ids that can be
    targets (not PAD or BOS), as OpenNMT-py and Joey NMT do; the gradient
    ``softmax - (1 - eps) onehot - eps / K`` (but 0 on PAD and BOS) is written in one pass.
    With ``real`` [N] (1.0 for a target, 0.0 for padding), padded rows count for nothing:
    every row of a fixed-shape batch is scored.
    """

    @staticmethod
    def forward(
        ctx, logits: Tensor, target: Tensor, eps: float, real: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        dtype = torch.promote_types(logits.dtype, torch.float32)  # bf16 logits -> fp32 loss
        log_probs = torch.log_softmax(logits.to(dtype), dim=-1)  # [N, V]
        share = eps / (log_probs.size(1) - len(NEVER_TARGETS))
        picked = log_probs.gather(1, target.unsqueeze(1)).squeeze(1)  # [N]
        if real is None:
            nll = -picked.sum()
            smoothed = log_probs.sum() - _never_targets(log_probs).sum()
        else:
            nll = -(picked * real).sum()
            rows = log_probs.sum(1) - _never_targets(log_probs)  # [N]
            smoothed = (rows * real).sum()
        loss = (1.0 - eps) * nll - share * smoothed
        ctx.save_for_backward(log_probs, target, real)
        ctx.eps, ctx.share, ctx.logits_dtype = eps, share, logits.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        log_probs, target, real = ctx.saved_tensors
        grad = torch.exp(log_probs).sub_(ctx.share)  # [N, V]
        for i in NEVER_TARGETS:
            grad[:, i] += ctx.share
        rows = torch.arange(target.size(0), device=target.device)
        grad[rows, target] -= 1.0 - ctx.eps
        if real is not None:
            grad.mul_(real.unsqueeze(1))
        return grad.mul_(grad_loss).to(ctx.logits_dtype), None, None, None


def coverage_loss(weights: Tensor, real: Tensor) -> Tensor:
    """sum over real target steps t and sources j of min(a_tj, c_tj), where c_tj is the weight
    j had before step t: weights [B, heads, T, S] (their mean over heads), real [B, T]."""
    attention = weights.float().mean(1)  # [B, T, S]
    before = attention.cumsum(1) - attention  # [B, T, S]
    return (torch.minimum(attention, before) * real.unsqueeze(-1)).sum()


class Seq2Seq(nn.Module):
    """Bidirectional GRU encoder + attention decoder.

    ``forward`` scores a teacher-forced batch and returns its loss, so that DistributedDataParallel,
    whose hooks run on ``forward``, sees the whole graph; search uses ``encode`` and
    ``decoder.step``.
    """

    def __init__(self, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def compile_steps(self, compiler: Callable[[Callable], Callable]) -> None:
        """Compile the decoder's search step (see ``DecoderStep.compile_steps``)."""
        self.decoder.flow.compile_steps(compiler)

    def encode(self, src: Tensor, lengths: Tensor, packed: bool = True) -> EncoderOutput:
        """src [B, S] (PAD after each sentence), lengths [B] (best on the host: packing reads
        them there) -> memory, mask, attention keys/values and the decoder flow's per-batch
        projections, all computed once per batch. ``packed=False`` runs the encoder over the
        padded batch (`Encoder.unpacked`): no shape or host read depends on the lengths."""
        encoder = self.encoder if packed else self.encoder.unpacked
        memory, final = encoder(src, lengths)  # [B, S, 2H], [B, 2H]
        mask = src != PAD  # [B, S]
        keys, values = self.decoder.attention.precompute(memory)
        return self.decoder.flow.prepare(EncoderOutput(memory, mask, keys, values, final))

    def features(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, packed: bool = True
    ) -> tuple[Tensor, Tensor]:
        """Teacher forcing -> (features [B, T, F], attention weights [B, heads, T, S])."""
        return self.decoder(tgt_in, self.encode(src, src_lengths, packed))

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor,
        label_smoothing: float = 0.0,
        align: Tensor | None = None,
        align_weight: float = 0.0,
        coverage_weight: float = 0.0,
        static: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """(label-smoothed loss sum, plain NLL sum) over the non-pad target positions.

        Only those positions are projected to the vocabulary. With ``align`` [B, T, S] (guided
        alignment: each guided row a distribution over the source), the loss adds
        ``align_weight`` times the cross-entropy of the attention (mean over heads) against it.
        An attention with coverage adds ``coverage_weight`` times See et al.'s coverage loss,
        sum_t sum_j min(a_tj, c_tj), c_tj the weight of j before step t.

        ``static``: the same sums with no shape or host read that depends on the data (CUDA
        graphs): the encoder runs unpacked, every position is projected and padding weighs 0,
        so that a batch padded further gives the same loss.
        """
        features, weights = self.features(src, src_lengths, tgt_in, packed=not static)
        real = tgt_out != PAD  # [B, T]
        if static:
            logits = self.decoder.output_layer(features.flatten(0, 1))  # [B * T, V]
            targets, weight = tgt_out.flatten(), real.flatten().float()
            loss, nll = SmoothedCrossEntropy.apply(logits, targets, label_smoothing, weight)
        else:
            logits = self.decoder.output_layer(features[real])  # [N, V]
            loss, nll = SmoothedCrossEntropy.apply(logits, tgt_out[real], label_smoothing)
        if align is not None:
            attention = weights.float().mean(1)  # [B, T, S]
            guided = -(align * torch.log(attention.clamp_min(1e-9))).sum()
            loss = loss + align_weight * guided
        if coverage_weight and self.decoder.attention.uses_coverage:
            loss = loss + coverage_weight * coverage_loss(weights, real)
        return loss, nll


def build_model(cfg: ModelConfig | DictConfig, src_vocab: int, tgt_vocab: int) -> Seq2Seq:
    """The model described by ``cfg``; its attention and data flow come from the registry."""
    encoder_size = getattr(cfg, "encoder_size", None) or cfg.hidden_size
    memory_size = 2 * encoder_size
    attention = build_attention(cfg.attention, cfg.hidden_size, memory_size)
    step = attention_type(cfg.attention.name).step
    layers = getattr(cfg, "decoder_layers", 1)  # a run from before the key: one
    flow = step.build(
        cfg.emb_size, cfg.hidden_size, attention, cfg.attention, layers=layers, dropout=cfg.dropout
    )
    encoder = Encoder(src_vocab, cfg.emb_size, encoder_size, cfg.encoder_layers, cfg.dropout)
    decoder = Decoder(tgt_vocab, memory_size, flow, cfg.dropout, cfg.tie_embeddings)
    return Seq2Seq(encoder, decoder)
