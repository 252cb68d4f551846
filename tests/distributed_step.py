"""One update of a tiny model from this rank's share of a fixed batch; run under torchrun by
tests/test_distributed.py (``torchrun --nproc_per_node=2 tests/distributed_step.py OUT``), and
imported by it for the same model and batch in one process."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from seq2seq.config import TrainConfig
from seq2seq.data.batching import Batch
from seq2seq.model import Seq2Seq, build_model
from seq2seq.model.config import BahdanauConfig, ModelConfig
from seq2seq.runtime.engine import Engine
from seq2seq.training.updater import Updater
from seq2seq.vocab import BOS, EOS, PAD

SRC_VOCAB, TGT_VOCAB = 30, 40
SRC_LENGTHS = [7, 3, 5, 6]  # pieces + EOS, one sentence per row
TGT_LENGTHS = [4, 8, 2, 6]
# Clipping off: a clipped gradient hides a wrong normalisation of the loss.
TRAIN = TrainConfig(lr=0.01, clip_grad_norm=1e6, label_smoothing=0.1, seed=7)


def tiny_model() -> Seq2Seq:
    """The same weights in every process."""
    torch.manual_seed(0)
    cfg = ModelConfig(emb_size=8, hidden_size=12, dropout=0.0, attention=BahdanauConfig(size=10))
    return build_model(OmegaConf.structured(cfg), SRC_VOCAB, TGT_VOCAB)


def batch_of(rows: list[int]) -> Batch:
    """A padded batch of the fixed sentences ``rows``."""
    gen = torch.Generator().manual_seed(1)
    src_all = torch.randint(4, SRC_VOCAB, (4, max(SRC_LENGTHS)), generator=gen)
    tgt_all = torch.randint(4, TGT_VOCAB, (4, max(TGT_LENGTHS)), generator=gen)
    src_len = torch.tensor([SRC_LENGTHS[r] for r in rows])
    tgt_len = torch.tensor([TGT_LENGTHS[r] for r in rows])
    src = src_all[rows, : int(src_len.max())].clone()
    tgt_out = tgt_all[rows, : int(tgt_len.max())].clone()
    src[torch.arange(src.size(1)) >= src_len[:, None]] = PAD
    src[torch.arange(len(rows)), src_len - 1] = EOS
    tgt_out[torch.arange(tgt_out.size(1)) >= tgt_len[:, None]] = PAD
    tgt_out[torch.arange(len(rows)), tgt_len - 1] = EOS
    tgt_in = torch.cat([torch.full((len(rows), 1), BOS), tgt_out[:, :-1]], 1)
    tgt_in[tgt_out == PAD] = PAD
    return Batch(src, src_len, tgt_in, tgt_out, torch.tensor(rows), int(tgt_len.sum()))


def update(engine: Engine, batches: list[Batch], tokens: int) -> dict[str, dict]:
    """Parameters and gradients after one update of the tiny model from ``batches``."""
    updater = Updater(engine, tiny_model(), TRAIN)
    updater.step(batches, tokens)
    module = updater.module
    return {
        "params": {n: p.detach().clone() for n, p in module.named_parameters()},
        "grads": {n: p.grad.detach().clone() for n, p in module.named_parameters()},
    }


def main(out: Path) -> None:
    engine = Engine.create("cpu", threads=1, distributed=True)
    rows = [[0, 1], [2, 3]][engine.rank]  # each rank half of the sentences
    result = update(engine, [batch_of(rows)], sum(TGT_LENGTHS))
    if engine.is_main:
        torch.save(result, out)
    engine.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
