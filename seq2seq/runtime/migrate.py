"""The one migration of old run folders: a saved config (config.yaml, a checkpoint's) read in
today's keys, so that every loader sees one schema and no other module keeps an old spelling."""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

from omegaconf import OmegaConf, open_dict

from seq2seq.model.config import ATTENTION_CONFIGS

log = logging.getLogger("seq2seq.config")

# keys taken out, and what to use instead: refused in one line where given, dropped from a saved
# run's config (a resumed run has nothing to change)
REMOVED = {
    "train.compile": "it trained slower than without on a GPU and no faster on the CPU "
    "(docs/gpu.md); delete it: on a GPU, train.cuda_graphs=auto (the default) is the fast path",
}


def upgrade_saved_config(cfg: Any) -> Any:
    """A run's saved config (config.yaml, a checkpoint's) in today's keys: written before
    ``data.kind`` (``data.name`` said it), before ``precision`` (``train.precision``), or before
    ``input_feed`` moved from the model to the attentions whose data flow has it, or before
    Luong's dot and general scores were scaled by default (such a run keeps its unscaled score),
    or before ``log.alignment_gold`` was ``log.alignment_pairs``, or with ``train.compile``."""
    with open_dict(cfg):
        attention = cfg.model.attention
        if attention.name == "luong" and "scale" not in attention:
            attention.scale = False
        if OmegaConf.select(cfg, "data.kind") is None:
            cfg.data.kind = OmegaConf.select(cfg, "data.name", default="custom")
        if OmegaConf.select(cfg, "precision") is None:
            cfg.precision = OmegaConf.select(cfg, "train.precision", default=None) or "fp32"
        if OmegaConf.select(cfg, "log.alignment_gold", default=None) is not None:
            cfg.log.alignment_pairs = cfg.log.pop("alignment_gold")
        if "train" in cfg and cfg.train.pop("compile", False):
            log.warning("train.compile was removed; this run goes on without it")
        if "input_feed" in cfg.model:
            feed = cfg.model.pop("input_feed")
            schema = ATTENTION_CONFIGS.get(cfg.model.attention.name)
            if schema is not None and "input_feed" in {f.name for f in fields(schema)}:
                cfg.model.attention.input_feed = feed
    return cfg
