"""The model as two graphs of plain tensors, for ONNX: an encoder and one decoder step.

The search calls ``model.encode`` once per batch and ``model.decoder.step`` once per target
position, passing dataclasses (`EncoderOutput`, `DecoderState`) whose fields depend on the
attention and the data flow. Here those fields become named tensors: the encoder graph maps the
source ids to the attention's memory (``MEMORY``) and the state before the first step
(``STATE``); the step graph maps the previous token, the state and the memory to log-probs, the
next state and the attention weights. `graph_names` says which optional fields a model has, so
that a runtime without torch can run any attention of the registry without knowing it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.model.states import DecoderState, EncoderOutput
from seq2seq.vocab import BOS, PAD

MEMORY = ("keys", "values", "mask", "gates")  # EncoderOutput fields a step reads
STATE = ("hidden", "feed", "coverage", "position", "lower")  # DecoderState fields


@dataclass(frozen=True)
class GraphNames:
    """The inputs and outputs of a model's two graphs (fields its flow leaves None are absent)."""

    memory: tuple[str, ...]
    state: tuple[str, ...]

    @property
    def encoder_outputs(self) -> tuple[str, ...]:
        return self.memory + self.state

    @property
    def step_inputs(self) -> tuple[str, ...]:
        return ("prev_tokens", *self.state, *self.memory)

    @property
    def step_outputs(self) -> tuple[str, ...]:
        return ("log_probs", *(f"next_{name}" for name in self.state), "weights")


def _encode(model: Seq2Seq, src: Tensor) -> tuple[EncoderOutput, DecoderState]:
    """The encoder output and the first state of a padded batch src [B, S], without packing."""
    enc = model.encode(src, (src != PAD).sum(1), packed=False)  # memory [B, S, 2H], ...
    return enc, model.decoder.init_state(enc)


def graph_names(model: Seq2Seq) -> GraphNames:
    """Which memory and state fields ``model`` has (traced on a one-sentence batch)."""
    src = torch.tensor([[BOS, PAD]], device=next(model.parameters()).device)
    with torch.no_grad():
        enc, state = _encode(model, src)
    memory = tuple(name for name in MEMORY if getattr(enc, name) is not None)
    return GraphNames(memory, tuple(name for name in STATE if getattr(state, name) is not None))


class EncoderGraph(nn.Module):
    """src [B, S] (ids, PAD after each sentence) -> the memory fields, then the first state."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.model = model
        self.names = graph_names(model)

    def forward(self, src: Tensor) -> tuple[Tensor, ...]:
        enc, state = _encode(self.model, src)
        return tuple(getattr(enc, n) for n in self.names.memory) + tuple(
            getattr(state, n) for n in self.names.state
        )


class StepGraph(nn.Module):
    """prev_tokens [B], the state fields, the memory fields -> (log_probs [B, V], the next
    state fields, weights [B, heads, S])."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.model = model
        self.names = graph_names(model)

    def forward(self, prev_tokens: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
        fields = dict(zip(self.names.state + self.names.memory, tensors, strict=True))
        state = DecoderState(*(fields.get(name) for name in STATE))
        # a step reads keys, values, gates and mask only: memory and final are not inputs
        keys, values, mask = fields["keys"], fields["values"], fields["mask"]
        enc = EncoderOutput(values, mask, keys, values, fields["hidden"], fields.get("gates"))
        log_probs, state, weights = self.model.decoder.step(prev_tokens, state, enc)
        return (log_probs, *(getattr(state, n) for n in self.names.state), weights)
