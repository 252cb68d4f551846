"""The one migration of old run folders: a saved config (config.yaml, a checkpoint's) read in
today's keys, so that every loader sees one schema and no other module keeps an old spelling."""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

from omegaconf import OmegaConf, open_dict

from seq2seq.model.config import ATTENTION_CONFIGS

log = logging.getLogger("seq2seq.config")


def upgrade_saved_config(cfg: Any) -> Any:
    """A run's saved config (config.yaml, a checkpoint's) in today's keys: written before
    ``data.kind`` (``data.name`` said it), before ``precision`` (``train.precision``), or before
    ``input_feed`` moved from the model to the attentions whose data flow has it, or before
    Luong's dot and general scores were scaled by default (such a run keeps its unscaled score;
    ``score=scaled_dot`` is dot with scale), or before ``log.alignment_gold`` was
    ``log.alignment_pairs``, or with ``train.compile``."""
    with open_dict(cfg):
        attention = cfg.model.attention
        if attention.get("score") == "scaled_dot":
            attention.score, attention.scale = "dot", True
        if attention.name == "luong" and "scale" not in attention:
            attention.scale = False
        if OmegaConf.select(cfg, "data.kind") is None:
            cfg.data.kind = OmegaConf.select(cfg, "data.name", default="custom")
        old = cfg.train.pop("precision", None) if "train" in cfg else None
        if OmegaConf.select(cfg, "precision") is None:
            cfg.precision = old or "fp32"
        if "log" in cfg and (gold := cfg.log.pop("alignment_gold", None)) is not None:
            cfg.log.alignment_pairs = gold
        if "train" in cfg and cfg.train.pop("compile", False):
            log.warning("train.compile was removed; this run goes on without it")
        if "input_feed" in cfg.model:
            feed = cfg.model.pop("input_feed")
            schema = ATTENTION_CONFIGS.get(cfg.model.attention.name)
            if schema is not None and "input_feed" in {f.name for f in fields(schema)}:
                cfg.model.attention.input_feed = feed
    return cfg


def upgrade_saved_state(state: dict[str, Any]) -> dict[str, Any]:
    """A training checkpoint in today's keys: its epoch plan ("plan") and "precision" read from
    its config where the checkpoint predates them; from before train.best_metric, best.pt was
    chosen by BLEU ("best_metric", "best_score")."""
    config = state.get("config", {})
    train, data = config.get("train", {}), config.get("data", {})
    state.setdefault(
        "plan",
        {
            "train.seed": train.get("seed"),
            "train.batch_tokens": train.get("batch_tokens"),
            "train.accumulate": state.get("accumulate", 1),
            "data.sampling_alpha": data.get("sampling_alpha", 0.0),
            "processes": state.get("world_size", 1),
        },
    )
    if "precision" not in state and (config.get("precision") or train.get("precision")):
        state["precision"] = config.get("precision") or train.get("precision")
    if "best_metric" not in state and "step" in state:
        state["best_metric"] = "bleu"
        state["best_score"] = state["best_bleu"] if state.get("best_bleu", -1.0) >= 0 else None
    return state
