"""What a run folder holds: every file name in one place."""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE = "config.yaml"  # the resolved training config
SRC_TOKENIZER = "src.model"  # sentencepiece models
TGT_TOKENIZER = "tgt.model"
BEST = "best.pt"  # the checkpoint of the best validation BLEU
LAST = "last.pt"  # the latest checkpoint, to resume from
TENSORBOARD_DIR = "tensorboard"  # event files
EVAL_DIR = "eval"  # seq2seq-evaluate's outputs
CHECKPOINTS = {"best": BEST, "last": LAST}


def checkpoint_path(run_dir: Path, checkpoint: str) -> Path:
    """``best`` and ``last`` name the run's own checkpoints; anything else is a path."""
    if checkpoint in CHECKPOINTS:
        return Path(run_dir) / CHECKPOINTS[checkpoint]
    return Path(checkpoint)
