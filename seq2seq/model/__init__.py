"""Encoder, attention variants and their registry, decoder and the composed model.

Names are imported on first use, so that ``seq2seq.model.config`` (the model's schema, which the
app's config composes) loads without torch."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Attention": "attention",
    "BahdanauAttention": "attention",
    "LuongAttention": "attention",
    "MultiHeadAttention": "attention",
    "Decoder": "decoder",
    "DecoderState": "states",
    "EncoderOutput": "states",
    "Encoder": "encoder",
    "ATTENTIONS": "registry",
    "attention_type": "registry",
    "Seq2Seq": "seq2seq",
    "build_model": "seq2seq",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
