"""Forced decoding: a model reading a given target (teacher forcing, never a search): how likely it
finds the target, and where it attends, per subword and merged into the pairs' words."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from seq2seq.data.batching import Batch, TokenBatchSampler, collate_sequences
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.wordalign import WordPair, word_weights
from seq2seq.model.ensemble import Ensemble
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.runtime.engine import Engine
from seq2seq.vocab import PAD


@dataclass
class Segmented:
    """A side's words as subword ids, and the word of each piece."""

    ids: list[int]
    word_of: list[int]


def segment(tok: Tokenizer, words: Sequence[str]) -> Segmented:
    """Each word encoded on its own (sentencepiece never joins words, so the pieces are those of
    the sentence); a word the tokenizer normalises away gets no piece and stays unaligned."""
    ids, word_of = [], []
    for index, pieces in enumerate(tok.encode_batch(list(words), threads=1) if words else []):
        ids.extend(pieces)
        word_of.extend([index] * len(pieces))
    return Segmented(ids, word_of)


class ForcedAligner:
    """A model with its tokenizers, reading given pairs: attention per subword and per word.

    Runs in the engine's compute scope; pairs are read in batches of ``batch_size``, longest first.
    Multi-head attention is averaged over its heads.
    """

    def __init__(
        self,
        model: Seq2Seq,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        engine: Engine | None = None,
        batch_size: int = 64,
    ) -> None:
        self.model, self.src_tok, self.tgt_tok = model, src_tok, tgt_tok
        self.engine, self.batch_size = engine, batch_size

    @torch.inference_mode()
    def piece_attention(
        self, sources: Sequence[Segmented], targets: Sequence[Segmented]
    ) -> list[np.ndarray]:
        """Per pair: [tgt pieces + EOS, src pieces + EOS] (row t: the step that predicts piece
        t, the last one EOS)."""
        order = sorted(range(len(sources)), key=lambda k: -len(sources[k].ids))
        out: list[np.ndarray] = [np.zeros((0, 0))] * len(sources)
        scope = self.engine.compute() if self.engine else contextlib.nullcontext()
        with scope:
            for start in range(0, len(order), self.batch_size):
                ids = order[start : start + self.batch_size]
                batch = collate_sequences(
                    [sources[k].ids for k in ids], [targets[k].ids for k in ids], np.array(ids)
                )
                if self.engine is not None:
                    batch = self.engine.to_device(batch)
                _, weights = self.model.features(batch.src, batch.src_lengths, batch.tgt_in)
                weights = weights.float().mean(dim=1).cpu().numpy()  # [B, T, S], heads averaged
                for row, k in enumerate(ids):
                    steps, cols = len(targets[k].ids) + 1, len(sources[k].ids) + 1
                    out[k] = weights[row, :steps, :cols]
        return out

    def word_attention(self, pairs: Sequence[WordPair], shift: int = 0) -> list[np.ndarray]:
        """Per pair: [target words, source words + 1] (see `word_weights`); a pair with an empty
        side gets an empty matrix."""
        sources = [segment(self.src_tok, src) for src, _ in pairs]
        targets = [segment(self.tgt_tok, tgt) for _, tgt in pairs]
        real = [k for k, (s, t) in enumerate(zip(sources, targets, strict=True)) if s.ids and t.ids]
        pieces = self.piece_attention([sources[k] for k in real], [targets[k] for k in real])
        out = [np.zeros((len(tgt), len(src) + 1)) for src, tgt in pairs]
        for k, weights in zip(real, pieces, strict=True):
            sizes = (len(pairs[k][0]), len(pairs[k][1]))
            out[k] = word_weights(weights, sources[k].word_of, targets[k].word_of, sizes, shift)
        return out


def target_log_probs(model: Seq2Seq, batch: Batch) -> torch.Tensor:
    """Per pair of a teacher-forced batch, log P(target | source) in nats: the sum over its
    pieces and EOS, in fp32 [B]. Summed and negated over a batch, the NLL training reports."""
    features, _ = model.features(batch.src, batch.src_lengths, batch.tgt_in)  # [B, T, F]
    real = batch.tgt_out != PAD  # [B, T]
    logits = model.decoder.output_layer(features[real])  # [N, V]: real positions only
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    picked = log_probs.gather(1, batch.tgt_out[real].unsqueeze(1)).squeeze(1)  # [N]
    rows = torch.arange(real.size(0), device=real.device).unsqueeze(1).expand_as(real)[real]
    return torch.zeros(real.size(0), device=real.device).index_add_(0, rows, picked)


@torch.inference_mode()
def score_pairs(
    model: Seq2Seq,
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    engine: Engine,
    batch_tokens: int,
) -> np.ndarray:
    """log P(target | source) of each pair of piece ids (without EOS), in their order: read in
    batches of at most ``batch_tokens`` (pairs x longest side), similar lengths together, and
    brought to the host once at the end."""
    lengths = [np.array([len(s) + 1 for s in side]) for side in (sources, targets)]
    sampler = TokenBatchSampler(*lengths, batch_tokens, shuffle=False)
    order, found = [], []
    with engine.compute():
        for ids in sampler.batches(0):
            batch = collate_sequences([sources[k] for k in ids], [targets[k] for k in ids], ids)
            found.append(target_log_probs(model, engine.to_device(batch)))
            order.append(ids)
    scores = np.zeros(len(sources))
    if found:
        scores[np.concatenate(order)] = torch.cat(found).cpu().numpy()
    return scores


def pair_log_probs(
    model: Seq2Seq | Ensemble,
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    engine: Engine,
    batch_tokens: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's log P(target | source) and its target pieces (EOS counted). An ensemble's is
    the mean of its members': the sum over steps of their mean log-probability, what its search
    adds up."""
    members = model.members if isinstance(model, Ensemble) else [model]
    scored = [score_pairs(m, sources, targets, engine, batch_tokens) for m in members]
    return np.mean(scored, 0), np.array([len(ids) + 1 for ids in targets])


def perplexity(nll: float) -> float:
    """exp of an NLL per target piece, capped (an untrained model's must not overflow)."""
    return math.exp(min(nll, 50.0))
