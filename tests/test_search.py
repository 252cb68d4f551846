"""Greedy and beam search: beam 1 is greedy, batches equal sentences alone, n-best order."""

from __future__ import annotations

import math

import pytest
import reference_search
import torch
from model_helpers import (
    ATTENTIONS,
    A,
    B,
    assert_same,
    forced_log_prob,
    peaky_model,
    settings,
    sources,
)

from seq2seq.config import DecodeConfig
from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.search import (
    beam_search,
    decode,
    decode_sources,
    greedy_search,
    length_penalty,
    max_lengths,
)
from seq2seq.runtime.run_folder import load_run
from seq2seq.vocab import EOS


@pytest.mark.parametrize("name", ATTENTIONS)
def test_beam_one_is_greedy(name: str) -> None:
    model, (src, lengths) = peaky_model(name), sources()
    assert len({len(h.tokens) for h in greedy_search(model, src, lengths, settings())}) > 1
    for alpha in (0.0, 0.6):  # one meaning of score: the log-prob sum over the length penalty
        greedy = greedy_search(model, src, lengths, settings(alpha=alpha))
        beam = beam_search(model, src, lengths, settings(1, alpha, 1))
        for g, (b,) in zip(greedy, beam, strict=True):
            assert g.tokens == b.tokens and torch.equal(g.attention, b.attention)
            assert b.score == pytest.approx(g.score)


@pytest.mark.parametrize("check_every", [1, 3])
@pytest.mark.parametrize("name", ATTENTIONS)
def test_batch_equals_alone(name: str, check_every: int) -> None:
    """Also when finished sentences stay in the batch for a few steps (``check_every``)."""
    model, (src, lengths) = peaky_model(name), sources()
    greedy = greedy_search(model, src, lengths, settings(), check_every=check_every)
    beam = beam_search(model, src, lengths, settings(4, 0.6, 4), check_every=check_every)
    for i, n in enumerate(lengths.tolist()):
        alone_src, alone_len = src[i : i + 1, :n], lengths[i : i + 1]
        assert_same(greedy[i], greedy_search(model, alone_src, alone_len, settings())[0])
        alone_beam = beam_search(model, alone_src, alone_len, settings(4, 0.6, 4))[0]
        assert len(beam[i]) == len(alone_beam) == 4
        for together, alone in zip(beam[i], alone_beam, strict=True):
            assert_same(together, alone)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_nbest_sorted_and_first_is_one_best(name: str) -> None:
    model, (src, lengths) = peaky_model(name), sources()
    nbest = beam_search(model, src, lengths, settings(5, 0.6, 5))
    one_best = beam_search(model, src, lengths, settings(5, 0.6, 1))
    for hyps, (best,) in zip(nbest, one_best, strict=True):
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True) and len(hyps) == 5
        assert len({tuple(h.tokens) for h in hyps}) == 5  # distinct hypotheses
        # local_p's predicted centres come from a product whose rounding may depend on how many
        # rows the batch has left (the 1-best search drops sentences sooner)
        assert_same(hyps[0], best, exact=not name.startswith("local_p"))
    # Every score is the model's own: its teacher-forced log-probability over the length penalty.
    # (Not "beam >= greedy": a beam that stops after k finished hypotheses need not find the
    # greedy one, and ties between them are decided by the CPU's rounding.)
    for i, hyps in enumerate(nbest):
        for h in hyps:
            forced = forced_log_prob(model, src[i, : lengths[i]], h.tokens)
            assert h.score * length_penalty(len(h.tokens) + 1, 0.6) == pytest.approx(
                forced, abs=1e-3
            )


@pytest.mark.parametrize("name", ATTENTIONS)
def test_attention_rows_cover_real_source(name: str) -> None:
    model, (src, lengths) = peaky_model(name), sources()
    limits = max_lengths(lengths, A, B).tolist()
    results = [[h] for h in greedy_search(model, src, lengths, settings(), check_every=5)]
    results += beam_search(model, src, lengths, settings(3, 0.6, 3), check_every=5)
    for i, hyps in enumerate(results):
        n = lengths[i % 5].item()
        for h in hyps:
            assert h.attention.shape == (len(h.tokens) + 1, n)
            total = h.attention.sum(-1)
            if name == "local_p":  # the window's weights times a Gaussian: at most 1
                assert torch.all((total > 0) & (total <= 1 + 1e-6))
            else:
                torch.testing.assert_close(total, torch.ones(len(h.tokens) + 1))
            assert len(h.tokens) <= limits[i % 5]
            assert not {0, 2, 3} & set(h.tokens)  # no PAD, BOS or EOS inside
            if name == "multihead":
                assert h.head_attention.shape == (2, len(h.tokens) + 1, n)
                torch.testing.assert_close(h.head_attention.mean(0), h.attention)
            else:
                assert h.head_attention is None


def test_length_limit_forces_eos() -> None:
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    for h in greedy_search(model, src, lengths, settings(a=0.0, b=2)):
        assert len(h.tokens) <= 2
    for hyps in beam_search(model, src, lengths, settings(3, 0.6, 3, a=0.0, b=0)):
        assert [h.tokens for h in hyps] == [[]]  # only EOS is possible


def test_no_translation_is_empty_unless_the_limit_says_so() -> None:
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    with torch.no_grad():
        model.decoder.output_layer.bias[EOS] += 100.0  # EOS first, whatever the source
    for cfg in (settings(), settings(3, 0.6, 3), settings(nbest=2)):
        cfg.sampling = cfg.nbest == 2
        for hyps in decode(model, src, lengths, cfg):
            assert all(len(h.tokens) == 1 for h in hyps)  # one token, then the EOS it prefers


def test_decode_sources_keeps_input_order() -> None:
    model, (src, lengths) = peaky_model("luong"), sources()
    seqs = [src[i, :n].tolist() for i, n in enumerate(lengths.tolist())]
    for beam_size in (1, 3):
        cfg = DecodeConfig(beam_size=beam_size, nbest=2, max_len_a=A, max_len_b=B, batch_size=2)
        results = decode_sources(model, seqs, cfg)
        assert [len(r) for r in results] == [1 if beam_size == 1 else 2] * 5
        expected = decode(model, src, lengths, cfg)
        for got, want in zip(results, expected, strict=True):
            assert_same(got[0], want[0])


def padded(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in sequences])
    src = torch.zeros(len(sequences), int(lengths.max()), dtype=torch.long)
    for i, s in enumerate(sequences):
        src[i, : len(s)] = torch.tensor(s)
    return src, lengths


@pytest.mark.parametrize("check_every", [1, 4])
def test_same_translations_as_the_reference_search(
    smoke_run, multi30k_dir, check_every: int
) -> None:
    """Today's search (preallocated, sync-free, looking at the device every few steps) gives
    the n-best lists of the search it replaced, on a trained smoke model: the same tokens, and
    scores equal to float rounding (1e-4); also where it stops a sentence before it has
    ``beam_size`` finished hypotheses (nbest below beam_size)."""
    run = load_run(smoke_run)
    lines, _ = read_parallel(
        multi30k_dir / "test_2016_flickr.de.gz", multi30k_dir / "test_2016_flickr.en.gz", 96
    )
    sources = sorted(([*ids, EOS] for ids in run.src_tok.encode_batch(lines)), key=len)
    for start in range(0, len(sources), 32):
        src, lengths = padded(sources[start : start + 32])
        greedy = settings(a=1.5, b=5)
        old = reference_search.greedy_search(run.model, src, lengths, greedy)
        new = greedy_search(run.model, src, lengths, greedy, check_every=check_every)
        for a, b in zip(old, new, strict=True):
            assert_same(a, b)
        for nbest, alpha in ((5, 0.6), (1, 0.6), (2, 1.0), (1, 0.0)):  # 1, 2: stops early
            beam = settings(5, alpha, nbest, a=1.5, b=5)
            old_beams = reference_search.beam_search(run.model, src, lengths, beam)
            new_beams = beam_search(run.model, src, lengths, beam, check_every=check_every)
            for a_list, b_list in zip(old_beams, new_beams, strict=True):
                assert len(a_list) == len(b_list) == nbest
                for a, b in zip(a_list, b_list, strict=True):
                    assert_same(a, b)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_stopping_early_keeps_the_nbest_lists(name: str) -> None:
    """A sentence whose ``nbest`` finished hypotheses no live beam can pass stops before it has
    ``beam_size`` of them; its n-best list stays that of the search that waits for all of them
    (the reference), also where the length penalty rewards longer hypotheses strongly."""
    model = peaky_model(name)
    gen = torch.Generator().manual_seed(2)
    lengths = torch.randint(1, 9, (48,), generator=gen)
    src = torch.randint(4, 20, (48, 8), generator=gen)
    src[torch.arange(8) >= lengths[:, None]] = 0
    src[torch.arange(48), lengths - 1] = EOS
    for nbest, alpha, beta in ((1, 0.6, 0.0), (1, 2.0, 0.0), (2, 1.0, 0.0), (2, 0.6, 0.4)):
        beam = settings(4, alpha, nbest, a=1.5, b=6, coverage_penalty=beta)
        want = reference_search.beam_search(model, src, lengths, beam)
        got = beam_search(model, src, lengths, beam)
        for a_list, b_list in zip(want, got, strict=True):
            assert len(a_list) == len(b_list) == nbest
            for a, b in zip(a_list, b_list, strict=True):
                assert_same(a, b)


@pytest.mark.parametrize("name", ["bahdanau", "bahdanau-sparsemax"])
def test_the_coverage_penalty_reranks_without_losing_sentences(name: str) -> None:
    """beta > 0 adds beta x sum_j log(min(attention on j, 1)) to each finished hypothesis; with
    sparse attention a word may get no weight at all, which counts as 1e-6, not log(0): every
    sentence keeps its hypotheses with finite scores."""
    model = peaky_model(name)
    src, lengths = sources()
    plain = beam_search(model, src, lengths, settings(4, nbest=4))
    covered = beam_search(model, src, lengths, settings(4, nbest=4, coverage_penalty=1.0))
    changed = 0
    for p_list, c_list, n in zip(plain, covered, lengths.tolist(), strict=True):
        assert len(c_list) == 4 and all(math.isfinite(h.score) for h in c_list)
        for h in c_list:
            attended = h.attention.sum(0)[:n].clamp(1e-6, 1.0)
            penalty = float(attended.log().sum())
            assert penalty <= 0
            assert h.score <= max(p.score for p in p_list) + 1e-5  # a penalty only lowers
        changed += [h.tokens for h in p_list] != [h.tokens for h in c_list]
    assert changed  # it reranks
