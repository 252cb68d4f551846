"""The model's hyperparameters as plain dataclasses: what building a model needs, and nothing
of the commands that train or run it (seq2seq.config composes these into the app's config)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from omegaconf import MISSING


class LuongScore(str, Enum):
    dot = "dot"
    general = "general"
    concat = "concat"
    scaled_dot = "scaled_dot"


@dataclass
class AttentionConfig:
    """Base of the attention group; ``name`` is the key of ``seq2seq.model.registry.ATTENTIONS``,
    ``input_feed`` (Luong flow) belongs to the decoder step, and every other field is a keyword
    argument of that attention class."""

    name: str = MISSING
    size: int = 512  # hidden size of the score function / projections


@dataclass
class BahdanauConfig(AttentionConfig):
    """Additive attention; previous decoder state queries, context enters the GRU input."""

    name: str = "bahdanau"


@dataclass
class LuongConfig(AttentionConfig):
    """Global attention; current decoder state queries, attentional vector feeds the output."""

    name: str = "luong"
    score: LuongScore = LuongScore.general
    input_feed: bool = True  # feed the previous attentional vector to the GRU


@dataclass
class MultiHeadConfig(AttentionConfig):
    """Scaled dot-product attention with several heads; Luong data flow."""

    name: str = "multihead"
    heads: int = 8
    input_feed: bool = True  # feed the previous attentional vector to the GRU


# The attention variants: each name's schema. seq2seq.model.registry adds each one's modules.
ATTENTION_CONFIGS: dict[str, type[AttentionConfig]] = {
    c.name: c for c in (BahdanauConfig, LuongConfig, MultiHeadConfig)
}


@dataclass
class ModelConfig:
    emb_size: int = 256
    hidden_size: int = 512  # the decoder GRU, and each encoder direction unless encoder_size
    encoder_size: Optional[int] = None  # per encoder direction; None: hidden_size
    encoder_layers: int = 1
    dropout: float = 0.3
    tie_embeddings: bool = False  # share target embedding and output projection
    attention: AttentionConfig = MISSING
