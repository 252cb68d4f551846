"""The attention registry: ``model.attention.name`` -> its attention class and decoder data flow.

The one place an attention choice is read: the model builder, logging and TensorBoard's HParams all
go through it (or through the name itself), never through ``isinstance`` or class names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from seq2seq.errors import Seq2SeqError
from seq2seq.model.attention import (
    Attention,
    BahdanauAttention,
    LuongAttention,
    MultiHeadAttention,
)
from seq2seq.model.config import (
    ATTENTION_CONFIGS,
    AttentionConfig,
    BahdanauConfig,
    LocalMConfig,
    LocalPConfig,
    LuongConfig,
    MultiHeadConfig,
)
from seq2seq.model.decoder import BahdanauStep, DecoderStep, LuongStep
from seq2seq.model.local import LocalMonotonicAttention, LocalPredictiveAttention


@dataclass(frozen=True)
class AttentionType:
    """An attention's config schema, its class, and the decoder step whose data flow uses it."""

    config: type[AttentionConfig]
    attention: type[Attention]
    step: type[DecoderStep]


_MODULES: dict[type[AttentionConfig], tuple[type[Attention], type[DecoderStep]]] = {
    BahdanauConfig: (BahdanauAttention, BahdanauStep),
    LuongConfig: (LuongAttention, LuongStep),
    MultiHeadConfig: (MultiHeadAttention, LuongStep),
    LocalMConfig: (LocalMonotonicAttention, LuongStep),
    LocalPConfig: (LocalPredictiveAttention, LuongStep),
}
# every variant of the schema, by name (what Hydra's model/attention group offers)
ATTENTIONS: dict[str, AttentionType] = {
    name: AttentionType(config, *_MODULES[config]) for name, config in ATTENTION_CONFIGS.items()
}


def attention_type(name: str) -> AttentionType:
    """The registry entry of ``name``; an unknown name lists the valid ones."""
    try:
        return ATTENTIONS[name]
    except KeyError:
        valid = ", ".join(ATTENTIONS)
        raise Seq2SeqError(f"unknown attention {name!r}; choose one of: {valid}") from None


# attention config keys that belong to the decoder step (its data flow), not the attention class
FLOW_KEYS = ("input_feed", "conditional")


def build_attention(cfg: Any, query_size: int, memory_size: int) -> Attention:
    """The attention module of an attention config: its name picks the class, the other fields
    (but FLOW_KEYS, the decoder step's) are that class's keyword arguments."""
    settings = OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)
    for key in FLOW_KEYS:
        settings.pop(key, None)
    kind = attention_type(settings.pop("name"))
    return kind.attention(**settings, query_size=query_size, memory_size=memory_size)


def describe_attention(cfg: Any) -> str:
    """The attention in a few words for logs and model cards, e.g. ``luong (general, scaled)``
    or ``bahdanau (coverage, sparsemax)``: the name and the settings that set it apart."""

    def value(key: str, default: Any = None) -> Any:
        found = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
        return getattr(found, "value", found)  # an enum member in a typed config

    parts = []
    if (score := value("score")) is not None:
        scaled = value("scale", True) and score in ("dot", "general")
        parts.append(f"{score}, scaled" if scaled else score)
    if (heads := value("heads")) is not None:
        parts.append(f"{heads} heads")
    if (window := value("window")) is not None:
        parts.append(f"window {window}")
    if value("input_feed") is False:
        parts.append("no input feeding")
    if value("conditional"):
        parts.append("conditional GRU")
    if value("coverage"):
        parts.append("coverage")
    if value("normalizer", "softmax") != "softmax":
        parts.append(value("normalizer"))
    name = value("name")
    return f"{name} ({', '.join(parts)})" if parts else name
