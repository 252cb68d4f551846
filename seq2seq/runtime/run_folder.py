"""A trained run folder, or a release folder (seq2seq-export), opened: its config in today's keys,
its tokenizers and its model with the checkpoint's weights, after the manifest's check."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import safetensors.torch
from omegaconf import DictConfig, OmegaConf

from seq2seq.data.tokenizer import Tokenizer, fingerprints
from seq2seq.errors import Seq2SeqError
from seq2seq.model.ensemble import Ensemble
from seq2seq.model.seq2seq import Seq2Seq, build_model
from seq2seq.runtime.checkpoint import check_tokenizers, load_checkpoint
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.migrate import upgrade_saved_config
from seq2seq.storage.manifest import damage
from seq2seq.storage.rundir import (
    CHECKPOINTS,
    CONFIG_FILE,
    MANIFEST,
    RELEASE_WEIGHTS,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    checkpoint_path,
    not_a_run,
    release_facts,
)

log = logging.getLogger(__name__)


@dataclass
class TrainedRun:
    """Everything a finished run folder provides for evaluation and translation."""

    run_dir: Path
    cfg: DictConfig
    model: Seq2Seq | Ensemble  # in eval mode, on the engine's device
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    checkpoint: Path
    step: int  # training updates behind the checkpoint

    def check_language(self, key: str, path: str | Path | None, side: str) -> None:
        """One warning where the name of a file the run reads on ``side`` ("source" or
        "target") ends in the pair's other language (``test.en`` as a de-en run's source):
        files given the wrong way round translate or score without an error, into nonsense."""
        src, tgt = self.cfg.data.src_lang, self.cfg.data.tgt_lang
        expected, other = (src, tgt) if side == "source" else (tgt, src)
        name = Path(path).name.removesuffix(".gz") if path is not None else ""
        said = name.rpartition(".")[2].lower() if "." in name else ""
        if said == other.lower() != expected.lower():
            log.warning(
                "%s=%s: its name says %s, but the run (%s->%s) reads %s as its %s; are the "
                "files the wrong way round?",
                key,
                path,
                other,
                src,
                tgt,
                expected,
                side,
            )


def load_run(
    run_dir: str | Path, checkpoint: str = "best", engine: Engine | None = None
) -> TrainedRun:
    """Rebuild the model of a training run folder, or of a release folder (seq2seq-export:
    weights in safetensors, read without torch.load), in eval mode, on the engine's device (the
    host without one)."""
    run_dir = Path(run_dir)
    release = (run_dir / RELEASE_WEIGHTS).is_file()
    if not (run_dir / CONFIG_FILE).is_file():
        raise Seq2SeqError(not_a_run(run_dir, str(run_dir)))
    if release and not (run_dir / MANIFEST).is_file():
        raise Seq2SeqError(f"{run_dir} is a release folder without its {MANIFEST}: refused")
    if (run_dir / MANIFEST).is_file() and (problems := damage(run_dir / MANIFEST)):
        raise Seq2SeqError(
            f"{run_dir} is damaged: {'; '.join(problems)} (see {MANIFEST}); restore the files "
            "from a copy of the folder"
        )
    cfg = read_config(run_dir / CONFIG_FILE)
    for name in (SRC_TOKENIZER, TGT_TOKENIZER):
        if not (run_dir / name).is_file():
            raise Seq2SeqError(f"{run_dir} has no tokenizer model {name}")
    src_tok = Tokenizer.load(run_dir / SRC_TOKENIZER)
    tgt_tok = Tokenizer.load(run_dir / TGT_TOKENIZER)
    vocab = (src_tok.vocab_size, tgt_tok.vocab_size)
    model = build_model(cfg.model, *vocab)
    if release:
        if checkpoint != "best":
            raise Seq2SeqError(
                f"{run_dir} is a release: it holds one model (leave out checkpoint=)"
            )
        path, step = run_dir / RELEASE_WEIGHTS, release_facts(run_dir).get("step", 0)
        try:
            safetensors.torch.load_model(model, path)
        except Exception as e:  # safetensors' header errors, missing or misshapen tensors
            raise Seq2SeqError(f"{path} does not fit the model of {run_dir}: {e}") from None
    else:
        path = checkpoint_path(run_dir, checkpoint)
        if not path.is_file():
            raise Seq2SeqError(_no_checkpoint(run_dir, checkpoint, path))
        state = load_checkpoint(path)
        step = state.get("step", 0)
        check_tokenizers(state, path, run_dir, (src_tok, tgt_tok))
        try:
            model.load_state_dict(state["model"])
        except (KeyError, RuntimeError, TypeError) as e:  # a checkpoint of another model or run
            raise Seq2SeqError(f"{path} does not fit the model of {run_dir}: {e}") from e
    if engine is not None:
        engine.for_inference(model)
    model.eval()
    return TrainedRun(run_dir, cfg, model, src_tok, tgt_tok, path, int(step))


def load_runs(
    run_dir: str | Path, others: Sequence[str | Path], checkpoint: str, engine: Engine
) -> TrainedRun:
    """``run_dir`` alone, or with ``others`` as an ensemble (the mean of their log-probabilities),
    which needs the same tokenizers in every folder."""
    run = load_run(run_dir, checkpoint, engine)
    if not others:
        return run
    members = [run, *(load_run(other, checkpoint, engine) for other in others)]
    for member in members[1:]:
        if fingerprints(member.src_tok, member.tgt_tok) != fingerprints(run.src_tok, run.tgt_tok):
            raise Seq2SeqError(
                f"{member.run_dir} has other tokenizers than {run.run_dir}: an ensemble needs "
                "the same subword vocabularies (the same training data and tokenizer settings)"
            )
    return replace(run, model=Ensemble([m.model for m in members]))


def _no_checkpoint(run_dir: Path, checkpoint: str, path: Path) -> str:
    """Why ``checkpoint`` cannot be read, and what the run has instead."""
    if checkpoint not in CHECKPOINTS:
        return f"checkpoint not found: {path} (give best, last or a file's path)"
    if checkpoint == "averaged":
        return f"{run_dir} has no {path.name}: seq2seq-average run_dir={run_dir} makes it"
    have = [
        f"checkpoint={name}" for name, file in CHECKPOINTS.items() if (run_dir / file).is_file()
    ]
    instead = (
        f"it has {', '.join(have)}" if have else "a training writes it at its first validation"
    )
    return f"{run_dir} has no {path.name} yet: {instead}"


def read_config(path: Path) -> DictConfig:
    """A run's config.yaml; unreadable YAML, or YAML that is not a run's config, is a
    Seq2SeqError naming the file."""
    what = "restore it from a copy of the run folder"
    try:
        cfg = OmegaConf.load(path)
    except Exception as e:  # yaml's and omegaconf's many errors
        raise Seq2SeqError(f"{path} is damaged ({type(e).__name__}: {e}); {what}") from None
    needed = ("model.attention.name", "model.hidden_size", "data.src_lang", "data.tgt_lang")
    missing = [
        key
        for key in needed
        if not isinstance(cfg, DictConfig) or OmegaConf.select(cfg, key) is None
    ]
    if missing:
        raise Seq2SeqError(f"{path} is not a run's config (no {', '.join(missing)}); {what}")
    return upgrade_saved_config(cfg)
