"""Decoder: teacher forcing equals stepping for every data flow; tying; the fused loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from model_helpers import SETUPS, HandBatch, loss_of, tiny_model
from omegaconf import OmegaConf

from seq2seq.model import build_model
from seq2seq.model.config import LuongConfig, ModelConfig
from seq2seq.model.decoder import BahdanauStep, LuongStep
from seq2seq.model.recurrence import climb, upper_layers


@pytest.mark.parametrize("name", SETUPS)
def test_teacher_forcing_equals_stepping(name: str) -> None:
    model, batch = tiny_model(**SETUPS[name]), HandBatch()
    with torch.no_grad():
        enc = model.encode(batch.src, batch.src_lengths)
        features, weights = model.decoder(batch.tgt_in, enc)
        expected = torch.log_softmax(model.decoder.output_layer(features), -1)  # [B, T, V]
        state = model.decoder.init_state(enc)
        for t in range(batch.tgt_in.size(1)):
            log_probs, state, step_weights = model.decoder.step(batch.tgt_in[:, t], state, enc)
            torch.testing.assert_close(log_probs, expected[:, t], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(step_weights, weights[:, :, t], atol=1e-6, rtol=1e-5)
    heads = model.decoder.attention.heads
    assert features.shape == (3, 7, 12) and weights.shape == (3, heads, 7, 6)


def test_data_flow_chosen_by_attention_type() -> None:
    assert isinstance(tiny_model(**SETUPS["bahdanau"]).decoder.flow, BahdanauStep)
    assert isinstance(tiny_model(**SETUPS["luong-feed"]).decoder.flow, LuongStep)
    assert isinstance(tiny_model(**SETUPS["multihead"]).decoder.flow, LuongStep)
    # input feeding widens the GRU input by the attentional vector
    assert tiny_model(**SETUPS["luong-feed"]).decoder.flow.rnn.input_size == 8 + 12
    assert tiny_model(**SETUPS["luong-nofeed"]).decoder.flow.rnn.input_size == 8


def test_tied_embeddings_share_one_tensor() -> None:
    tied, untied = tiny_model(**SETUPS["luong-tied"]), tiny_model(**SETUPS["luong-feed"])
    decoder = tied.decoder
    assert decoder.output_layer[-1].weight is decoder.embedding.weight
    n_params = sum(p.numel() for p in tied.parameters())
    assert n_params < sum(p.numel() for p in untied.parameters())
    loss, _ = loss_of(tied, HandBatch(), 0.1)
    loss.backward()
    before = decoder.embedding.weight.detach().clone()
    with torch.no_grad():
        decoder.embedding.weight -= decoder.embedding.weight.grad
    assert not torch.equal(before, decoder.output_layer[-1].weight)


def test_a_tied_output_layer_starts_at_the_scale_of_an_untied_one() -> None:
    """The shared embedding starts as N(0, 1/E), not nn.Embedding's N(0, 1), so the output
    layer it becomes gives logits of the untied layer's order, and PAD's row is zero."""

    def output_layer(tie: bool) -> torch.nn.Module:
        torch.manual_seed(0)
        attention = LuongConfig(size=256)
        cfg = ModelConfig(emb_size=256, hidden_size=256, attention=attention, tie_embeddings=tie)
        return build_model(OmegaConf.structured(cfg), 500, 500).decoder

    tied, untied = output_layer(True), output_layer(False)
    weight = tied.embedding.weight.detach()
    assert abs(float(weight[1:].std()) - 256**-0.5) < 0.005 and not weight[0].any()
    features = torch.randn(64, 256)
    with torch.no_grad():
        scale = tied.output_layer(features).std() / untied.output_layer(features).std()
    assert scale < 3  # N(0, 1) made it about 16 (sqrt(256)) times the untied layer's


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_matches_cross_entropy_on_real_tokens(smoothing: float) -> None:
    """The fused loss equals cross-entropy against the smoothed target, gradients too."""
    model, batch = tiny_model(**SETUPS["bahdanau"]), HandBatch()
    loss, nll = loss_of(model, batch, smoothing)
    logits = model.decoder.output_layer(
        model.features(batch.src, batch.src_lengths, batch.tgt_in)[0]
    )
    flat_logits, flat_target = logits.flatten(0, 1), batch.tgt_out.flatten()
    real = flat_target != 0
    log_probs = torch.log_softmax(flat_logits[real], -1)
    # the smoothed target: 1 - eps on the word, eps spread over the ids other than PAD and BOS
    wanted = torch.full_like(log_probs, smoothing / (log_probs.size(1) - 2))
    wanted[:, [0, 2]] = 0.0
    wanted[torch.arange(len(wanted)), flat_target[real]] += 1.0 - smoothing
    expected = -(wanted * log_probs).sum()
    torch.testing.assert_close(loss, expected)
    if smoothing == 0:  # then it is plain cross-entropy
        torch.testing.assert_close(
            loss, F.cross_entropy(flat_logits, flat_target, reduction="sum", ignore_index=0)
        )
    torch.testing.assert_close(
        nll, F.cross_entropy(flat_logits, flat_target, reduction="sum", ignore_index=0)
    )
    assert batch.ntokens == 13 and not nll.requires_grad
    loss.backward()
    expected_grads = torch.autograd.grad(expected, list(model.parameters()), allow_unused=True)
    for param, grad in zip(model.parameters(), expected_grads, strict=True):
        if grad is not None:
            torch.testing.assert_close(param.grad, grad, atol=1e-6, rtol=1e-4)


def test_loss_without_autograd() -> None:
    model, batch = tiny_model(**SETUPS["multihead"]), HandBatch()
    loss, nll = loss_of(model, batch, 0.1)
    with torch.inference_mode():  # validation computes the loss like this
        loss_eval, nll_eval = loss_of(model, batch, 0.1)
    torch.testing.assert_close((loss_eval, nll_eval), (loss.detach(), nll))


def test_loss_ignores_padded_target_positions() -> None:
    model, batch = tiny_model(**SETUPS["luong-feed"]), HandBatch()
    loss, _ = loss_of(model, batch, 0.1)
    batch.tgt_in[batch.tgt_out == 0] = 5  # garbage after each sentence's end
    torch.testing.assert_close(loss_of(model, batch, 0.1)[0], loss)


def test_dropout_only_in_training() -> None:
    model, batch = tiny_model(dropout=0.5, **SETUPS["bahdanau"]), HandBatch()
    assert torch.equal(loss_of(model, batch, 0.0)[0], loss_of(model, batch, 0.0)[0])
    model.train()
    assert not torch.equal(loss_of(model, batch, 0.0)[0], loss_of(model, batch, 0.0)[0])


def test_coverage_is_the_sum_of_the_earlier_steps_weights() -> None:
    model, batch = tiny_model(**SETUPS["bahdanau-coverage"]), HandBatch()
    with torch.no_grad():
        enc = model.encode(batch.src, batch.src_lengths)
        state = model.decoder.init_state(enc)
        total = torch.zeros(3, 6)
        for t in range(3):
            torch.testing.assert_close(state.coverage, total)
            _, state, weights = model.decoder.step(batch.tgt_in[:, t], state, enc)
            total = total + weights[:, 0]
    assert tiny_model(**SETUPS["bahdanau"]).decoder.init_state(enc).coverage is None


def test_coverage_loss_is_sees_min_of_weight_and_coverage() -> None:
    from seq2seq.model.seq2seq import coverage_loss

    model, batch = tiny_model(**SETUPS["bahdanau-coverage"]), HandBatch()
    with torch.no_grad():
        _, weights = model.features(batch.src, batch.src_lengths, batch.tgt_in)
    real = batch.tgt_out != 0
    expected = 0.0
    for b in range(3):
        seen = torch.zeros(6)
        for t in range(7):
            if real[b, t]:
                expected += float(torch.minimum(weights[b, 0, t], seen).sum())
            seen = seen + weights[b, 0, t]
    assert expected > 0
    assert float(coverage_loss(weights, real)) == pytest.approx(expected, rel=1e-5)
    args = (batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, 0.0, None, 0.0)
    with torch.no_grad():
        plain, nll = model(*args, 0.0)
        weighted, same_nll = model(*args, 2.0)
    assert float(weighted - plain) == pytest.approx(2 * expected, rel=1e-4)
    assert float(nll) == float(same_nll)


def test_the_conditional_gru_queries_with_the_previous_word() -> None:
    """With conditional=true the attention's query at step t is GRU_1(s_{t-1}, E y_{t-1}): the
    weights of the first step change with the first input word; Bahdanau's own do not."""
    for name, changes in (("bahdanau-conditional", True), ("bahdanau", False)):
        model, batch = tiny_model(**SETUPS[name]), HandBatch()
        with torch.no_grad():
            enc = model.encode(batch.src, batch.src_lengths)
            state = model.decoder.init_state(enc)
            _, _, one = model.decoder.step(torch.full((3,), 5), state, enc)
            _, _, other = model.decoder.step(torch.full((3,), 9), state, enc)
        assert (not torch.allclose(one, other)) == changes, name
    flow = tiny_model(**SETUPS["bahdanau-conditional"]).decoder.flow
    assert (
        isinstance(flow, BahdanauStep) and flow.conditional and flow.rnn.input_size == 8
    )  # E only


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_search_steps_give_fp32_log_probs_under_bf16_autocast(name: str) -> None:
    """Beam search sums the steps' log-probabilities: in bf16 (8 bits of mantissa) a sum of
    twenty of them would drift; the step's log-softmax is taken in fp32 whatever the autocast
    (and every setup's step runs under it: the conditional GRU's bias once broke it)."""
    model, batch = tiny_model(**SETUPS[name]), HandBatch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        enc = model.encode(batch.src, batch.src_lengths)
        log_probs, _, _ = model.decoder.step(batch.tgt_in[:, 0], model.decoder.init_state(enc), enc)
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3))


@pytest.mark.parametrize("name", ["bahdanau-stacked", "conditional-stacked", "luong-stacked"])
def test_a_stacked_decoder_starts_each_layer_apart_and_steps_them_all(name: str) -> None:
    """model.decoder_layers=L: the bridge gives every layer its own start, the state keeps the
    top layer in ``hidden`` [B, H] and the others in ``lower`` [B, L - 1, H], and a step moves
    them all (a search reorders their rows alike)."""
    model, batch = tiny_model(**SETUPS[name]), HandBatch()
    layers = SETUPS[name]["decoder_layers"]
    assert model.decoder.flow.rnn.num_layers == layers
    with torch.no_grad():
        enc = model.encode(batch.src, batch.src_lengths)
        state = model.decoder.init_state(enc)
        assert state.hidden.shape == (3, 12) and state.lower.shape == (3, layers - 1, 12)
        assert not torch.allclose(state.lower[:, 0], state.hidden)
        _, after, _ = model.decoder.step(batch.tgt_in[:, 0], state, enc)
    assert after.lower.shape == state.lower.shape
    for before, now in zip(state.layers(), after.layers(), strict=True):
        assert not torch.allclose(before, now)
    picked = after.index_select(torch.tensor([2, 0]))
    torch.testing.assert_close(picked.lower, after.lower[[2, 0]])


def test_one_decoder_layer_keeps_the_parameters_of_earlier_runs() -> None:
    """decoder_layers=1 (the default) builds what runs from before the key saved: one GRU layer
    and a bridge of [H, M], so their checkpoints load as they are."""
    names = {n: tuple(p.shape) for n, p in tiny_model(**SETUPS["bahdanau"]).named_parameters()}
    assert names["decoder.bridge.weight"] == (12, 24)
    assert not any("_l1" in n for n in names) and "decoder.flow.rnn.weight_hh_l0" in names
    stacked = dict(tiny_model(**SETUPS["bahdanau-stacked"]).named_parameters())
    assert stacked["decoder.bridge.weight"].shape == (24, 24)
    assert stacked["decoder.flow.rnn.weight_ih_l1"].shape == (36, 12)


def test_layers_above_the_first_read_the_one_below_after_dropout() -> None:
    """`climb` drops the lower layer's output as ``nn.GRU`` does between layers: at p = 1 the
    second layer reads zeros, and outside training it reads the output as it is."""
    rnn = torch.nn.GRU(4, 5, 2, dropout=0.5)
    gen = torch.Generator().manual_seed(0)
    bottom, h0, h1 = (torch.randn(3, 5, generator=gen) for _ in range(3))
    upper = upper_layers(rnn)
    with torch.no_grad():
        _, dropped = climb(bottom, [h0, h1], upper, 1.0, training=True)
        _, kept = climb(bottom, [h0, h1], upper, 1.0, training=False)
        cell = torch.nn.GRUCell(5, 5)  # layer 1 of ``rnn``, as a cell
        layer_1 = (rnn.weight_ih_l1, rnn.weight_hh_l1, rnn.bias_ih_l1, rnn.bias_hh_l1)
        for mine, theirs in zip(cell.parameters(), layer_1, strict=True):
            mine.copy_(theirs)
        torch.testing.assert_close(dropped, cell(torch.zeros_like(bottom), h1))
        torch.testing.assert_close(kept, cell(bottom, h1))
