"""Checkpoints written atomically, holding tensors and plain data only, and loading a run folder."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.errors import Seq2SeqError
from seq2seq.model.seq2seq import Seq2Seq, build_model

CONFIG_FILE = "config.yaml"
SRC_TOKENIZER = "src.model"
TGT_TOKENIZER = "tgt.model"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file beside `path`, then rename: a crash never leaves half a file.

    The file is created with the usual permissions (the umask applies), like any other output.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:  # "x": never an existing file
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint safely (`weights_only=True`: no arbitrary code from the file)."""
    if not path.is_file():
        raise Seq2SeqError(f"checkpoint not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise Seq2SeqError(f"cannot read checkpoint {path}: {e}") from e


@dataclass
class TrainedRun:
    """Everything a finished run folder provides for evaluation and translation."""

    run_dir: Path
    cfg: DictConfig
    model: Seq2Seq
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    checkpoint: Path
    step: int  # training updates behind the checkpoint


def resolve_checkpoint(run_dir: Path, checkpoint: str) -> Path:
    """`best` and `last` name the run's own checkpoints; anything else is a path."""
    if checkpoint in ("best", "last"):
        return run_dir / f"{checkpoint}.pt"
    return Path(checkpoint)


def load_run(run_dir: str | Path, checkpoint: str = "best") -> TrainedRun:
    """Rebuild the model of a training run from its folder, in eval mode."""
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise Seq2SeqError(f"{run_dir} is not a training run folder (no {CONFIG_FILE})")
    cfg = OmegaConf.load(config_path)
    ckpt_path = resolve_checkpoint(run_dir, checkpoint)
    if not ckpt_path.is_file():
        raise Seq2SeqError(f"checkpoint not found: {ckpt_path} (give best, last or a file's path)")
    state = load_checkpoint(ckpt_path)
    for name in (SRC_TOKENIZER, TGT_TOKENIZER):
        if not (run_dir / name).is_file():
            raise Seq2SeqError(f"{run_dir} has no tokenizer model {name}")
    src_tok = Tokenizer.load(run_dir / SRC_TOKENIZER)
    tgt_tok = Tokenizer.load(run_dir / TGT_TOKENIZER)
    model = build_model(cfg.model, src_tok.vocab_size, tgt_tok.vocab_size)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:  # a checkpoint of another model or another run
        raise Seq2SeqError(f"{ckpt_path} does not fit the model of {run_dir}: {e}") from e
    model.eval()
    return TrainedRun(run_dir, cfg, model, src_tok, tgt_tok, ckpt_path, int(state.get("step", 0)))
