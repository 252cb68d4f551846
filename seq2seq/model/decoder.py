"""GRU decoder with attention: teacher-forced over whole sequences, or one step at a time.

The Bahdanau and Luong data flows are two small step classes around the same GRU; the model
builder picks one from the attention registry. The embeddings' share of the GRU input is projected
for all steps in one matrix product (and, for Bahdanau, the memory's share for all source positions,
once per batch), and the recurrence runs its own GRU cell over ``nn.GRU`` parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from seq2seq.model.attention import Attention
from seq2seq.model.autocast import compute_dtype, run_gru
from seq2seq.model.linear import Linear, linear
from seq2seq.model.recurrence import LoopWeight, climb, gru_cell, gru_update, looping, upper_layers
from seq2seq.model.states import DecoderState, EncoderOutput
from seq2seq.vocab import PAD


def _accumulate(coverage: Tensor | None, weights: Tensor) -> Tensor | None:
    """The coverage after a step's weights [B, heads, S] (their mean over heads)."""
    return None if coverage is None else coverage + weights.float().mean(1)


def _next(position: Tensor | None) -> Tensor | None:
    return None if position is None else position + 1


class DecoderStep(nn.Module):
    """What both data flows share: the attention module and a GRU of one or more layers, the
    first reading the flow's input, each other the layer below (after dropout, as in
    ``nn.GRU``); attention and output read the top layer."""

    def __init__(
        self,
        emb_size: int,
        hidden_size: int,
        attention: Attention,
        feed_size: int,
        layers: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.attention = attention
        self.emb_size = emb_size
        between = dropout if layers > 1 else 0.0
        self.rnn = nn.GRU(
            emb_size + feed_size, hidden_size, layers, dropout=between, batch_first=True
        )

    @classmethod
    def build(
        cls, emb_size: int, hidden_size: int, attention: Attention, settings: Any, **stack: Any
    ) -> DecoderStep:
        """The step of a model config: ``settings`` is the attention config, whose FLOW_KEYS
        (``input_feed`` of the Luong flow, ``conditional`` of Bahdanau's) are the step's;
        ``stack``: the GRU's ``layers`` and the ``dropout`` between them. Each flow defines it."""
        raise NotImplementedError

    def layers_after(
        self, bottom: Tensor, previous: list[Tensor], upper: list | None = None
    ) -> list[Tensor]:
        """Every layer's new state from layer 0's, bottom [B, H] (`climb`); ``upper``: a loop's
        `upper_layers`."""
        if len(previous) == 1:
            return [bottom]
        upper = upper_layers(self.rnn) if upper is None else upper
        return climb(bottom, previous, upper, self.rnn.dropout, self.training)

    def compile_steps(self, compiler: Callable[[Callable], Callable]) -> None:
        """Run the search step through ``compiler``, e.g. ``torch.compile`` (decoding's
        ``compile=true``): the time-step loop stays in Python, each step one compiled unit."""
        self.step = compiler(self.step)

    def recurrence(self, dtype: torch.dtype | None = None) -> LoopWeight:
        """The state's projection W_hh h + b_hh, in ``dtype``, for the steps of one loop."""
        return LoopWeight(self.rnn.weight_hh_l0, self.rnn.bias_hh_l0, dtype)

    def cell(self, gi: Tensor, hidden: Tensor, recur: LoopWeight | None = None) -> Tensor:
        """One GRU step from the full input projection gi [B, 3H] (``recur``: the loop's)."""
        if recur is None:  # a search step
            return gru_cell(gi, hidden, self.rnn.weight_hh_l0, self.rnn.bias_hh_l0)
        return gru_update(gi, recur(hidden), hidden)

    def project_embeddings(self, emb: Tensor) -> Tensor:
        """Embeddings' share of the GRU input projection, all steps: [B, T, E] -> [T, B, 3H]."""
        weight = self.rnn.weight_ih_l0[:, : self.emb_size]
        return linear(emb.transpose(0, 1), weight, self.rnn.bias_ih_l0)

    def project_input(self, x: Tensor) -> Tensor:
        """Full GRU input projection of one step: [B, E + feed] -> [B, 3H]."""
        return linear(x, self.rnn.weight_ih_l0, self.rnn.bias_ih_l0)

    def feed_weight(self) -> Tensor:
        """Columns of the GRU input weight that multiply the fed vector: [3H, feed]."""
        return self.rnn.weight_ih_l0[:, self.emb_size :]

    def prepare(self, enc: EncoderOutput) -> EncoderOutput:
        """Per-batch work on the encoder output before the first step; none by default."""
        return enc

    def init_state(self, start: Tensor, enc: EncoderOutput) -> DecoderState:
        """The state before the first step, from the bridged encoder summary [B, L x H] (each
        layer's, the bottom first): zero coverage and position 0 where the attention reads them."""
        hidden, lower = start, None
        if self.rnn.num_layers > 1:
            hidden, lower = DecoderState.stacked(start.split(self.rnn.hidden_size, 1))
        coverage = position = None
        if self.attention.uses_coverage:
            coverage = torch.zeros(enc.mask.shape, device=hidden.device)  # [B, S]
        if self.attention.positional:
            position = torch.zeros((), dtype=torch.long, device=hidden.device)
        return DecoderState(hidden, None, coverage, position, lower)

    def forward(
        self, emb: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, Tensor]:
        """Teacher forcing: emb [B, T, E] -> (features [B, T, H], weights [B, heads, T, S])."""
        raise NotImplementedError

    def step(
        self, emb: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One step: emb [B, E] -> (features [B, H], state, weights [B, heads, S])."""
        raise NotImplementedError


class BahdanauStep(DecoderStep):
    """Bahdanau flow: s_{t-1} queries; GRU input [emb; context]; readout of [s_t; context; emb].

    ``conditional``: Nematus's conditional GRU (Sennrich et al. 2017), where the query knows the
    previous word: s'_t = GRU_1(s_{t-1}, E y_{t-1}) queries, s_t = GRU_2(s'_t, c_t).
    """

    def __init__(
        self,
        emb_size: int,
        hidden_size: int,
        attention: Attention,
        conditional: bool = False,
        **stack: Any,
    ) -> None:
        feed_size = 0 if conditional else attention.context_size  # GRU_1 reads the word only
        super().__init__(emb_size, hidden_size, attention, feed_size, **stack)
        self.conditional = conditional
        self.context_rnn = None  # GRU_2 of the conditional GRU, which reads the context
        if conditional:
            self.context_rnn = nn.GRU(attention.context_size, hidden_size, batch_first=True)
        self.readout = Linear(hidden_size + attention.context_size + emb_size, hidden_size)

    @classmethod
    def build(
        cls, emb_size: int, hidden_size: int, attention: Attention, settings: Any, **stack: Any
    ) -> DecoderStep:
        conditional = bool(getattr(settings, "conditional", False))
        return cls(emb_size, hidden_size, attention, conditional, **stack)

    def feed_weight(self) -> Tensor:
        """The input weight that multiplies the context: the GRU's (GRU_2's) [3H, C]."""
        if self.context_rnn is not None:
            return self.context_rnn.weight_ih_l0
        return super().feed_weight()

    def prepare(self, enc: EncoderOutput) -> EncoderOutput:
        """The context enters the GRU only through W_ih, and W_ih (sum_j a_j h_j) equals
        sum_j a_j (W_ih h_j): weighing the values projected once per batch (``gates``) replaces
        a per-step [B, C] x [C, 3H] product by one [B*S, C] x [C, 3H] product."""
        return replace(enc, gates=linear(enc.values, self.feed_weight()))  # [B, S, 3H]

    def forward(
        self, emb: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, Tensor]:
        """Teacher forcing: emb [B, T, E] -> (readout [B, T, H], weights [B, heads, T, S])."""
        gi_emb = self.project_embeddings(emb)  # [T, B, 3H]
        dtype = compute_dtype(emb.device)  # the loop's weights cast once
        recur, upper = self.recurrences(dtype), upper_layers(self.rnn, dtype)  # the loop's
        layers, coverage = state.layers(), state.coverage
        states, weights = [], []
        with looping(self.attention.loop_layers(), dtype):
            for gi_t in gi_emb:
                layers, w, coverage = self._advance(gi_t, layers, coverage, enc, recur, upper)
                states.append(layers[-1])
                weights.append(w)
        weights = torch.stack(weights, 2)  # [B, 1, T, S]
        contexts = self.attention.read(weights, enc.values)  # [B, T, C], all steps at once
        features = torch.cat([torch.stack(states, 1), contexts, emb], -1)
        return torch.tanh(self.readout(features)), weights

    def recurrences(self, dtype: torch.dtype | None = None) -> tuple[LoopWeight, ...]:
        """The state projections of the GRU and (conditional) GRU_2, for one loop."""
        if self.context_rnn is None:
            return (self.recurrence(dtype),)
        rnn = self.context_rnn
        return self.recurrence(dtype), LoopWeight(rnn.weight_hh_l0, rnn.bias_hh_l0, dtype)

    def _advance(
        self,
        gi_t: Tensor,
        layers: list[Tensor],
        coverage: Tensor | None,
        enc: EncoderOutput,
        recur: tuple[LoopWeight, ...] | None = None,
        upper: list | None = None,
    ) -> tuple[list[Tensor], Tensor, Tensor | None]:
        """One step from the word's share of the GRU input gi_t [B, 3H] (its bias included) and
        each layer's state, the bottom first: (their states s_t, weights [B, 1, S], coverage);
        ``recur``, ``upper``: the loop's (`recurrences`, `upper_layers`)."""
        recur = recur or (None, None)
        hidden = layers[0]  # the bottom layer's s_{t-1}
        # the query: the conditional GRU's s'_t, else the top layer's s_{t-1}
        query = self.cell(gi_t, hidden, recur[0]) if self.conditional else layers[-1]
        weights = self.attention.weigh(query, enc.keys, enc.mask, coverage=coverage)
        if self.context_rnn is None:  # gi_t + W_ih c_t [B, 3H]
            gi = torch.baddbmm(gi_t.unsqueeze(1), weights, enc.gates).squeeze(1)
            hidden = self.cell(gi, hidden, recur[0])
        else:  # GRU_2 from s'_t; its input projection, but the bias, is W_ih c_t
            rnn = self.context_rnn
            gi = torch.bmm(weights, enc.gates).squeeze(1)
            gi = gi + rnn.bias_ih_l0.to(gi.dtype)  # autocast's dtype, as the state's
            if recur[1] is None:  # a search step
                hidden = gru_cell(gi, query, rnn.weight_hh_l0, rnn.bias_hh_l0)
            else:
                hidden = gru_update(gi, recur[1](query), query)
        return self.layers_after(hidden, layers, upper), weights, _accumulate(coverage, weights)

    def step(
        self, emb: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One step: emb [B, E] -> (readout [B, H], state, weights [B, heads, S])."""
        gi = linear(emb, self.rnn.weight_ih_l0[:, : self.emb_size], self.rnn.bias_ih_l0)
        layers, weights, coverage = self._advance(gi, state.layers(), state.coverage, enc)
        hidden, lower = DecoderState.stacked(layers)
        context = self.attention.read(weights.unsqueeze(2), enc.values).squeeze(1)  # [B, C]
        readout = torch.tanh(self.readout(torch.cat([hidden, context, emb], -1)))
        return readout, DecoderState(hidden, None, coverage, lower=lower), weights


class LuongStep(DecoderStep):
    """Luong flow: GRU input emb (+ previous attentional vector); s_t queries; tanh(W_c[c; s])."""

    def __init__(
        self,
        emb_size: int,
        hidden_size: int,
        attention: Attention,
        input_feed: bool,
        **stack: Any,
    ) -> None:
        feed_size = hidden_size if input_feed else 0
        super().__init__(emb_size, hidden_size, attention, feed_size, **stack)
        self.input_feed = input_feed
        self.combine = Linear(attention.context_size + hidden_size, hidden_size, bias=False)

    @classmethod
    def build(
        cls, emb_size: int, hidden_size: int, attention: Attention, settings: Any, **stack: Any
    ) -> LuongStep:
        input_feed = bool(getattr(settings, "input_feed", False))
        return cls(emb_size, hidden_size, attention, input_feed, **stack)

    def init_state(self, start: Tensor, enc: EncoderOutput) -> DecoderState:
        state = super().init_state(start, enc)
        return replace(state, feed=torch.zeros_like(state.hidden) if self.input_feed else None)

    def attentional(
        self, hidden: Tensor, enc: EncoderOutput, position: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """States [B, H] or [B, T, H] from target ``position`` on -> (tanh(W_c [c; s]) of the
        same shape, weights)."""
        context, weights = self.attention(hidden, enc.keys, enc.values, enc.mask, position)
        features = torch.cat([context, hidden], -1)
        return torch.tanh(self.combine(features)), weights  # W_c [c; s]

    def forward(
        self, emb: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, Tensor]:
        """Teacher forcing: emb [B, T, E] -> (attentional vectors [B, T, H], weights)."""
        dtype = compute_dtype(emb.device)  # the GRU's weights cast once
        if not self.input_feed:  # no feedback: the GRU and the attention each run once
            states, _ = run_gru(self.rnn, dtype, emb, torch.stack(state.layers()))  # [B, T, H]
            return self.attentional(states, enc, state.position)
        gi_emb = self.project_embeddings(emb)  # [T, B, 3H]
        # the GRU input's columns that read the fed vector [3H, H], and W_hh, b_hh
        columns, recur = LoopWeight(self.feed_weight(), dtype=dtype), self.recurrence(dtype)
        upper = upper_layers(self.rnn, dtype)
        layers, feed, position = state.layers(), state.feed, state.position
        outputs, weights = [], []
        with looping([self.combine, *self.attention.loop_layers()], dtype):  # W_c, the query's
            for gi_t in gi_emb:
                bottom = self.cell(columns(feed, gi_t), layers[0], recur)  # [B, H]
                layers = self.layers_after(bottom, layers, upper)
                feed, w = self.attentional(layers[-1], enc, position)  # [B, H]
                position = _next(position)
                outputs.append(feed)
                weights.append(w)
        return torch.stack(outputs, 1), torch.stack(weights, 2)

    def step(
        self, emb: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One step: emb [B, E] -> (attentional vector [B, H], state, weights [B, heads, S])."""
        x = torch.cat([emb, state.feed], -1) if self.input_feed else emb
        layers = state.layers()
        layers = self.layers_after(self.cell(self.project_input(x), layers[0]), layers)
        hidden, lower = DecoderState.stacked(layers)
        output, weights = self.attentional(hidden, enc, state.position)
        feed = output if self.input_feed else None
        return output, DecoderState(hidden, feed, None, _next(state.position), lower), weights


class Decoder(nn.Module):
    """Target embedding, initial state from the encoder summary, a data flow, the output layer."""

    def __init__(
        self,
        vocab_size: int,
        memory_size: int,
        flow: DecoderStep,
        dropout: float = 0.0,
        tie_embeddings: bool = False,
    ) -> None:
        super().__init__()
        emb_size, hidden_size = flow.emb_size, flow.rnn.hidden_size
        self.embedding = nn.Embedding(vocab_size, emb_size, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        self.bridge = Linear(memory_size, flow.rnn.num_layers * hidden_size)  # each layer's start
        self.flow = flow
        if tie_embeddings:  # readout -> emb_size, then the transposed target embedding
            # N(0, 1/E), not nn.Embedding's N(0, 1): as the output layer's weights that gives
            # logits of unit scale, not sqrt(E) times more (a saturated softmax at the start)
            nn.init.normal_(self.embedding.weight, std=emb_size**-0.5)
            with torch.no_grad():
                self.embedding.weight[PAD].zero_()
            projection = Linear(emb_size, vocab_size)
            projection.weight = self.embedding.weight
            self.output_layer = nn.Sequential(Linear(hidden_size, emb_size, bias=False), projection)
        else:
            self.output_layer = Linear(hidden_size, vocab_size)

    @property
    def attention(self) -> Attention:
        return self.flow.attention

    @property
    def heads(self) -> int:
        """Attention heads in the weights ``step`` returns (1 for single-head attentions)."""
        return self.attention.heads

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """Initial state tanh(W final), each layer's (+ a zero attentional vector for Luong input
        feeding)."""
        return self.flow.init_state(torch.tanh(self.bridge(enc.final)), enc)  # [B, L x H]

    def forward(self, tgt_in: Tensor, enc: EncoderOutput) -> tuple[Tensor, Tensor]:
        """Teacher forcing: tgt_in [B, T] -> (features [B, T, H], weights [B, heads, T, S])."""
        emb = self.dropout(self.embedding(tgt_in))  # [B, T, E]
        features, weights = self.flow(emb, self.init_state(enc), enc)
        return self.dropout(features), weights

    def step(
        self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """prev_tokens [B] -> (log_probs [B, V], state, weights [B, heads, S])."""
        emb = self.dropout(self.embedding(prev_tokens))  # [B, E]
        features, state, weights = self.flow.step(emb, state, enc)
        logits = self.output_layer(self.dropout(features))  # [B, V], bf16 under bf16 autocast
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # search adds them up: in fp32
        return log_probs, state, weights
