"""The settings that steer the search (issue 53): with no_repeat_ngram=N no hypothesis holds an
N-gram of target pieces twice, with min_len_a/min_len_b no output ends before its minimum length
(the maximum wins where they meet), and off they leave the search as it was; the torch search,
the lite (numpy) search and the browser's search.js apply them alike."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from model_helpers import assert_same, exported_graphs, peaky_model, settings, sources
from run_helpers import browser_search
from seq2seq_lite import rules
from seq2seq_lite import search as lite_search

from seq2seq.config import DecodeConfig
from seq2seq.decoding import hypothesis
from seq2seq.decoding.beam import beam_search
from seq2seq.decoding.search import decode, greedy_search, max_lengths
from seq2seq.vocab import BOS, EOS, PAD

IDS = {"pad": PAD, "unk": 1, "bos": BOS, "eos": EOS}
LONG = dict(a=2.0, b=6)  # a length rule long enough for repeats


def _cfg(search: str, **given) -> DecodeConfig:
    """Greedy search, beam search (4 beams, 4 best) or sampling (3 drawn, cooled so that they
    repeat), with ``given``."""
    cfg = {"greedy": settings(a=2.0, b=6), "beam": settings(4, 0.6, 4, **LONG)}.get(search)
    if search == "sampling":
        cfg = replace(settings(nbest=3, **LONG), sampling=True, temperature=0.5, seed=1)
    return replace(cfg, **given)


def _eos_model(name: str = "bahdanau"):
    """A model that prefers EOS soon: its outputs are shorter than a minimum length."""
    model = peaky_model(name)
    with torch.no_grad():
        model.decoder.output_layer.bias[EOS] += 4
    return model


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("search", ["greedy", "beam", "sampling"])
@pytest.mark.parametrize("name", ["bahdanau", "multihead"])
def test_no_hypothesis_holds_an_ngram_twice(name: str, search: str, n: int) -> None:
    model, (src, lengths) = peaky_model(name), sources()
    plain = decode(model, src, lengths, _cfg(search))
    assert any(rules.repeated_ngrams(h.tokens, n) for hyps in plain for h in hyps)
    banned = decode(model, src, lengths, _cfg(search, no_repeat_ngram=n))
    for hyps in banned:
        assert hyps and all(rules.repeated_ngrams(h.tokens, n) == 0 for h in hyps)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_off_or_without_effect_they_change_nothing(search: str) -> None:
    """Bit for bit: a minimum the first step already keeps (1), an n longer than any repeat."""
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = _cfg(search)
    limits = max_lengths(lengths, cfg.max_len_a, cfg.max_len_b)
    assert hypothesis.user_bans(cfg, lengths, limits, src.device) is None  # no work by default
    plain = decode(model, src, lengths, cfg)
    n = 14  # outputs of up to 18 pieces: the ban is looked up, and finds nothing
    assert not any(rules.repeated_ngrams(h.tokens, n) for hyps in plain for h in hyps)
    for given in (dict(no_repeat_ngram=n), dict(min_len_b=1)):
        assert hypothesis.user_bans(replace(cfg, **given), lengths, limits, src.device)
        steered = decode(model, src, lengths, replace(cfg, **given))
        for a_list, b_list in zip(plain, steered, strict=True):
            assert len(a_list) == len(b_list)
            for a, b in zip(a_list, b_list, strict=True):
                assert_same(a, b, exact=True)


@pytest.mark.parametrize("search", ["greedy", "beam", "sampling"])
def test_no_output_is_shorter_than_the_minimum_unless_the_maximum_is(search: str) -> None:
    model, (src, lengths) = _eos_model(), sources()
    cfg = _cfg(search)
    longest = max_lengths(lengths, cfg.max_len_a, cfg.max_len_b).numpy()
    plain = decode(model, src, lengths, cfg)
    assert min(len(h.tokens) for hyps in plain for h in hyps) < 3
    for a, b in ((1.0, 2), (6.0, 2)):  # 6x + 2: past every maximum, which wins
        shortest = rules.min_lengths(lengths.numpy(), a, b, longest)
        steered = decode(model, src, lengths, replace(cfg, min_len_a=a, min_len_b=b))
        for hyps, low, high in zip(steered, shortest, longest, strict=True):
            assert hyps and all(low <= len(h.tokens) <= high for h in hyps)
    assert (rules.min_lengths(lengths.numpy(), 6.0, 2, longest) == longest).all()


@pytest.mark.parametrize("check_every", [1, 3])
def test_the_bans_hold_in_a_batch_as_alone(check_every: int) -> None:
    """Also where ended sentences stay in the batch for a few steps (``check_every``)."""
    model, (src, lengths) = _eos_model("luong"), sources()
    given = dict(no_repeat_ngram=2, min_len_a=1.0, min_len_b=2)
    greedy_cfg, beam_cfg = _cfg("greedy", **given), _cfg("beam", **given)
    greedy = greedy_search(model, src, lengths, greedy_cfg, check_every=check_every)
    beam = beam_search(model, src, lengths, beam_cfg, check_every=check_every)
    for i, n in enumerate(lengths.tolist()):
        alone = src[i : i + 1, :n], lengths[i : i + 1]
        assert_same(greedy[i], greedy_search(model, *alone, greedy_cfg)[0])
        for together, one in zip(beam[i], beam_search(model, *alone, beam_cfg)[0], strict=True):
            assert_same(together, one)


def test_the_tensor_and_numpy_bans_are_the_rules() -> None:
    """Each row's banned tokens (and EOS where short), against rules.ngram_bans on lists."""
    rng, vocab = np.random.default_rng(0), 9
    for n in (1, 2, 3, 4):
        for t in range(10):
            history = rng.integers(4, 8, (6, t))  # four tokens: many repeats
            min_len = np.array([0, 3, t, t + 1, 9, 1])
            want = []
            for row, tokens in enumerate(history.tolist()):
                short = {EOS} if min_len[row] > t else set()
                want.append(rules.ngram_bans(tokens, n) | short | {PAD})
            log_probs = np.zeros((6, vocab), dtype=np.float32)
            log_probs[:, PAD] = -np.inf  # as restrict leaves it
            sent = np.arange(6)
            lite = lite_search.UserBans(n, min_len, EOS)
            got = lite.apply(log_probs.copy(), t, sent, history)
            assert [set(np.flatnonzero(row == -np.inf)) for row in got] == want, (n, t)
            torch_steering = hypothesis.UserBans(n, torch.from_numpy(min_len))
            tensor = torch_steering.apply(
                torch.from_numpy(log_probs), t, torch.from_numpy(sent), torch.from_numpy(history)
            )
            assert np.array_equal(tensor.numpy(), got), (n, t)


def test_the_ngram_rule() -> None:
    assert rules.ngram_bans([5, 6, 7, 5, 6], 3) == {7}
    assert rules.ngram_bans([5, 6, 7, 5, 8], 2) == set()  # no earlier bigram starts with 8
    assert rules.ngram_bans([5, 6, 5], 2) == {6}
    assert rules.ngram_bans([5, 6, 5], 1) == {5, 6}
    assert rules.ngram_bans([5, 6, 5], 0) == set() and rules.ngram_bans([5], 2) == set()
    assert rules.repeated_ngrams(["a", "b", "a", "b", "a"], 2) == 2
    longest = np.array([4, 10, 0])
    assert rules.min_lengths([3, 4, 5], 1.5, 1, longest).tolist() == [4, 7, 0]
    assert rules.min_lengths([3, 4, 5], 0.0, -2, longest).tolist() == [0, 0, 0]


# -- the commands: refusals, names and records ------------------------------------------------


def test_the_commands_refuse_name_and_record_them() -> None:
    from omegaconf import OmegaConf

    from seq2seq.commands.configs import EvaluateConfig
    from seq2seq.commands.evaluate import _settings_part, search_facts
    from seq2seq.commands.rules import check_config
    from seq2seq.errors import Seq2SeqError
    from seq2seq.serving.settings import ServeConfig

    for key, value in (("no_repeat_ngram", -1), ("min_len_a", -0.5), ("min_len_b", -2)):
        cfg = OmegaConf.merge(OmegaConf.structured(EvaluateConfig), {"run_dir": "x", key: value})
        with pytest.raises(Seq2SeqError, match=rf"^{key}={value} must not be negative$"):
            check_config(cfg)
    served = OmegaConf.merge(OmegaConf.structured(ServeConfig), {"run_dir": "x"})
    check_config(OmegaConf.merge(served, {"no_repeat_ngram": 3}))
    served = OmegaConf.merge(served, {"beam_size": 12})
    with pytest.raises(Seq2SeqError, match="^beam_size=12 is above max_beam=10: every request"):
        check_config(served)
    plain = EvaluateConfig()
    steered = replace(plain, no_repeat_ngram=3, min_len_a=0.5, min_len_b=2)
    assert _settings_part(plain) == "best.beam5" and "no_repeat_ngram" not in search_facts(plain)
    assert _settings_part(steered) == "best.beam5.norepeat3.min0.5x+2"
    facts = search_facts(steered)
    assert [facts[k] for k in ("no_repeat_ngram", "min_len_a", "min_len_b")] == [3, 0.5, 2]


def test_chunks_recorded_before_the_settings_resume_at_their_defaults(tmp_path: Path) -> None:
    from seq2seq.decoding.chunked import _same_settings
    from seq2seq.decoding.settings import RECORDED_KEYS

    defaults = {key: getattr(DecodeConfig(), key) for key in RECORDED_KEYS}
    bans = ("no_repeat_ngram", "min_len_a", "min_len_b")
    older = {k: v for k, v in defaults.items() if k not in bans}  # as recorded before them
    (tmp_path / "settings.json").write_text(json.dumps(older))
    assert _same_settings(tmp_path / "settings.json", defaults)
    assert not _same_settings(tmp_path / "settings.json", defaults | {"no_repeat_ngram": 3})
    assert not _same_settings(tmp_path / "settings.json", defaults | {"min_len_b": 1})
    assert _same_settings(tmp_path / "settings.json", older)  # seq2seq-distill's older records


# -- the lite search, against torch, on the graphs of two tiny models --------------------------


@pytest.fixture(scope="module", params=["bahdanau", "multihead"])
def exported(request, tmp_path_factory):
    model = _eos_model(request.param)
    return model, exported_graphs(model, tmp_path_factory.mktemp("release"))


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 4])
@pytest.mark.parametrize(
    "given",
    [
        dict(no_repeat_ngram=2),
        dict(no_repeat_ngram=3, min_len_a=1.0, min_len_b=2),
        dict(min_len_a=5.0, min_len_b=2),
    ],
)
def test_the_lite_search_steers_as_torch_does(exported, beam_size: int, given: dict) -> None:
    model, graphs = exported
    src, lengths = sources()
    cfg = replace(settings(beam_size, 0.6, beam_size, **LONG), **given)
    keys = ("beam_size", "nbest", "alpha", "max_len_a", "max_len_b", *given)
    search = {k: getattr(cfg, k) for k in keys}
    if beam_size == 1:
        expected = [[h] for h in greedy_search(model, src, lengths, cfg)]
        found = [[h] for h in lite_search.greedy(graphs, src.numpy(), lengths.numpy(), search)]
    else:
        expected = beam_search(model, src, lengths, cfg)
        found = lite_search.beam(graphs, src.numpy(), lengths.numpy(), search)
    for want, got in zip(expected, found, strict=True):
        assert [h.tokens for h in got] == [h.tokens for h in want]
        for a, b in zip(want, got, strict=True):
            assert abs(a.score - b.score) < 1e-4


# -- search.js, against the lite search, over stand-in graphs ---------------------------------


class Markov:
    """Stand-in graphs whose next token's log-probs at step t are ``table[t, last token]``
    (nearly the same at every step, so that a search falls into loops: what the bans are for;
    not quite, so that no two hypotheses tie)."""

    ids, heads = IDS, 1

    def __init__(self, table: np.ndarray) -> None:
        self.table, self.t = table, 0

    def encode(self, src: np.ndarray) -> tuple[dict, dict]:
        self.t, rows = 0, len(src)
        return {"m": np.zeros((rows, src.shape[1]), np.float32)}, {"s": np.zeros((rows, 1))}

    def step(self, prev: np.ndarray, state: dict, memory: dict) -> tuple:
        width = memory["m"].shape[1]
        weights = np.full((len(prev), 1, width), 1 / width, dtype=np.float32)
        self.t += 1
        return self.table[self.t - 1, prev].copy(), {"s": np.zeros((len(prev), 1))}, weights


JS_SEARCH = """
import { greedy, beam } from "%s";
const cases = %s;
const ids = { pad: 0, unk: 1, bos: 2, eos: 3 };
const out = [];
for (const [table, src, configs] of cases) {
  let t = 0;
  const step = async (prev) => ({
    logProbs: Float32Array.from(prev.flatMap((p) => table[t][p])),
    weights: new Float32Array(prev.length * src.length).fill(1 / src.length),
    state: t++,
  });
  const encode = async () => ({ memory: null, state: (t = 0) });
  const graphs = { ids, heads: 1, encode, step, rows: (x) => x };
  for (const cfg of configs) {
    const found = await (cfg.beam_size === 1 ? greedy : beam)(graphs, src, cfg);
    out.push(found.map((h) => ({ tokens: h.tokens, score: h.score })));
  }
}
console.log(JSON.stringify(out));
"""


def _table(eos: float, steps: int = 20, vocab: int = 10) -> np.ndarray:
    """Log-probs [steps, last token, next token], EOS shifted by ``eos`` (late or early)."""
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2, (vocab, vocab)) + rng.normal(0, 0.05, (steps, vocab, vocab))
    logits[:, :, EOS] += eos
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)


def _lite(graphs: Markov, src: list[int], cfg: dict) -> list:
    array, lengths = np.array([src]), np.array([len(src)])
    prefix = np.array([cfg["prefix"]]) if "prefix" in cfg else None  # the JS search's cfg.prefix
    if cfg["beam_size"] == 1:
        return lite_search.greedy(graphs, array, lengths, cfg, prefix)
    return lite_search.beam(graphs, array, lengths, cfg, prefix)[0]


def test_the_browser_search_steers_as_lite_does() -> None:
    """On a table that loops (EOS late) and one that ends soon (EOS early); prefixes too."""
    src, base = [4, 5, 6, 7, 3], dict(alpha=0.6, max_len_a=2.0, max_len_b=4)
    steered = {
        -3.0: (
            {},
            {"no_repeat_ngram": 2},
            {"no_repeat_ngram": 1, "min_len_a": 1.0},
            {"prefix": [5, 6, 5], "no_repeat_ngram": 2},  # a prefix is forced past the bans
        ),
        1.0: (
            {},
            {"min_len_a": 1.0, "min_len_b": 2},
            {"min_len_a": 2.0, "min_len_b": 2},
            {"prefix": [4] * 14},  # past the length limit: it grows to fit
        ),
    }
    cases = [
        (_table(eos), [{**base, "beam_size": k, "nbest": k, **g} for k in (1, 3) for g in given])
        for eos, given in steered.items()
    ]
    cases_json = json.dumps([[table.tolist(), src, configs] for table, configs in cases])
    found = iter(browser_search(JS_SEARCH, cases_json))
    for table, configs in cases:
        for cfg in configs:
            want, js = _lite(Markov(table), src, cfg), next(found)
            assert [h["tokens"] for h in js] == [h.tokens for h in want], cfg
            assert [h["score"] for h in js] == pytest.approx([h.score for h in want], abs=1e-6)
    looping, early = (Markov(table) for table, _ in cases)
    plain = dict(base, beam_size=1, nbest=1)
    assert rules.repeated_ngrams(_lite(looping, src, plain)[0].tokens, 2)  # the bans matter
    assert len(_lite(early, src, plain)[0].tokens) < 7  # and so do the minimum lengths
