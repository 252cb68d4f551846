"""Encoder, attention variants, decoder and the composed model."""

from seq2seq.model.attention import (
    Attention,
    BahdanauAttention,
    LuongAttention,
    MultiHeadAttention,
)
from seq2seq.model.decoder import Decoder, DecoderState, EncoderOutput
from seq2seq.model.encoder import Encoder
from seq2seq.model.seq2seq import Seq2Seq, build_model

__all__ = [
    "Attention",
    "BahdanauAttention",
    "Decoder",
    "DecoderState",
    "Encoder",
    "EncoderOutput",
    "LuongAttention",
    "MultiHeadAttention",
    "Seq2Seq",
    "build_model",
]
