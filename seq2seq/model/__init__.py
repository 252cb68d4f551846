"""Encoder, attention variants and their registry, decoder and the composed model."""

from seq2seq.model.attention import (
    Attention,
    BahdanauAttention,
    LuongAttention,
    MultiHeadAttention,
)
from seq2seq.model.decoder import Decoder, DecoderState, EncoderOutput
from seq2seq.model.encoder import Encoder
from seq2seq.model.registry import ATTENTIONS, attention_type
from seq2seq.model.seq2seq import Seq2Seq, build_model

__all__ = [
    "ATTENTIONS",
    "Attention",
    "BahdanauAttention",
    "Decoder",
    "DecoderState",
    "Encoder",
    "EncoderOutput",
    "LuongAttention",
    "MultiHeadAttention",
    "Seq2Seq",
    "attention_type",
    "build_model",
]
