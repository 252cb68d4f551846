"""The host-side rules every search follows (the length penalty, the length limit, no EOS at the
first step, the input and manifest checks, the search settings' names) exist once, in
seq2seq_lite.rules and seq2seq.decoding.settings: the torch and numpy searches use them, and the
browser's search.js, the one copy a browser needs, gives what they give."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields

import numpy as np
import pytest
import seq2seq_lite
import torch
from run_helpers import browser_search
from seq2seq_lite import rules, steering
from seq2seq_lite import search as lite_search

from seq2seq.config import DecodeConfig
from seq2seq.decoding import hypothesis, settings
from seq2seq.decoding.inference import InputTooLong, Translator
from seq2seq.errors import Seq2SeqError
from seq2seq.storage import manifest
from seq2seq.vocab import BOS, EOS, PAD

ALPHAS = (0.0, 0.6, 1.0, 2.0, -0.5)
LENGTH_RULES = ((1.5, 5), (0.0, 0), (1.2, 10), (0.5, -3), (2.0, 0), (1.1, 1))
IDS = {"pad": PAD, "bos": BOS, "eos": EOS}
VOCAB = 7
# token histories of every length up to 12 over four tokens: many repeated n-grams
HISTORIES = np.random.default_rng(0).integers(4, 8, (40, 12))
HISTORIES = [row[: i % 13].tolist() for i, row in enumerate(HISTORIES)]
# (nbest-th finished score, best live score, best penalty), float32 (-inf: none finished/live)
SCORES = np.float32([-np.inf, -7.3, -3.1, -2.2, -1.0, -0.4])
ENDS = np.array(
    [(k, b, p) for k in SCORES for b in SCORES for p in np.float32([1.0, 1.2, 2.3, 3.7])]
)

# search.js's rules on the same grids, as JSON
JS_RULES = """
import { lengthPenalty, maxLength, minLength, ngramBans, restrict, settled } from "%s";
const [alphas, lengthRules, ids, vocab, histories, ends] = %s;
const lengths = [...Array(80).keys()];
const longest = (n) => maxLength(n, 1.2, 4);
const byValue = (x, y) => x - y;
const restricted = [];
for (const first of [false, true]) for (const atLimit of [false, true]) {
  const row = Float32Array.from({ length: vocab }, (_, i) => -1 - i / 10);
  const out = restrict(row, vocab, atLimit, ids, first);
  restricted.push(Array.from(out, (x) => (x === -Infinity ? null : x)));
}
console.log(JSON.stringify({
  penalties: alphas.map((alpha) => lengths.map((n) => lengthPenalty(n, alpha))),
  limits: lengthRules.map(([a, b]) => lengths.map((n) => maxLength(n, a, b))),
  minimums: lengthRules.map(([a, b]) => lengths.map((n) => minLength(n, a, b, longest(n)))),
  bans: [0, 1, 2, 3, 4].map((n) => histories.map((h) => [...ngramBans(h, n)].sort(byValue))),
  restricted,
  settled: ends.map(([kept, live, p]) => settled(kept ?? -Infinity, live ?? -Infinity, p)),
}));
"""


def _browser_rules() -> dict:
    ends = [[None if x == -np.inf else float(x) for x in row] for row in ENDS]
    grids = [ALPHAS, LENGTH_RULES, IDS, VOCAB, HISTORIES, ends]
    return browser_search(JS_RULES, json.dumps(grids))


def _row(first: bool, at_limit: bool) -> list[float | None]:
    """lite's restriction of one row, as search.js's output spells it (-inf: None)."""
    row = np.array([[-1 - i / 10 for i in range(VOCAB)]], dtype=np.float32)
    out = lite_search.restrict(row, np.array([at_limit]), IDS, first)[0]
    return [None if x == -np.inf else float(x) for x in out]


def test_the_browser_search_follows_the_python_rules() -> None:
    found, lengths = _browser_rules(), np.arange(80)
    for alpha, penalties in zip(ALPHAS, found["penalties"], strict=True):
        # Math.pow and C's pow may differ in the last bit of a double
        assert penalties == pytest.approx(rules.length_penalty(lengths, alpha), rel=1e-14)
    for (a, b), limits in zip(LENGTH_RULES, found["limits"], strict=True):
        assert limits == rules.max_lengths(lengths, a, b).tolist()
    longest = rules.max_lengths(lengths, 1.2, 4)
    for (a, b), minimums in zip(LENGTH_RULES, found["minimums"], strict=True):
        assert minimums == rules.min_lengths(lengths, a, b, longest).tolist()
    for n, bans in enumerate(found["bans"]):
        assert bans == [sorted(rules.ngram_bans(h, n)) for h in HISTORIES]
    assert any(found["bans"][2]) and any(found["bans"][3])
    cases = [(first, at_limit) for first in (False, True) for at_limit in (False, True)]
    assert found["restricted"] == [_row(*case) for case in cases]
    kept, live, penalty = ENDS.astype(np.float32).T
    assert found["settled"] == rules.settled(kept, live, penalty).tolist()
    assert any(found["settled"]) and not all(found["settled"])


def test_the_torch_and_numpy_beams_settle_alike() -> None:
    kept, live, penalty = ENDS.astype(np.float32).T
    want = rules.settled(kept, live, penalty)
    tensors = (torch.from_numpy(x) for x in (kept, live, penalty))
    assert rules.settled(*tensors).tolist() == want.tolist()
    assert not want[kept == -np.inf].any()  # nothing finished: never settled


@pytest.mark.parametrize("look", [True, False])
def test_the_torch_and_numpy_searches_restrict_alike(look: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    at_limit = torch.tensor([False, True, False, True])
    for first in (True, False):
        log_probs = torch.randn(4, VOCAB, generator=gen).log_softmax(-1)
        want = lite_search.restrict(log_probs.numpy().copy(), at_limit.numpy(), IDS, first)
        got = hypothesis.restrict(log_probs.clone(), at_limit, look, first, hypothesis.Bans())
        assert np.array_equal(got.numpy(), want)
        banned = rules.eos_banned(first, at_limit)
        expected = [False] * 4 if banned is None else banned.tolist()
        assert (got[:, EOS] == -np.inf).tolist() == expected


def test_the_length_rules_take_numbers_arrays_and_tensors() -> None:
    lengths = [1, 2, 7, 33]
    for alpha in ALPHAS:
        as_floats = [rules.length_penalty(n, alpha) for n in lengths]
        assert rules.length_penalty(np.array(lengths), alpha).tolist() == as_floats
        penalties = rules.length_penalty(torch.tensor(lengths).double(), alpha)
        assert penalties.tolist() == pytest.approx(as_floats, rel=1e-14)
    for a, b in LENGTH_RULES:
        limits = hypothesis.max_lengths(torch.tensor(lengths), a, b)
        assert limits.dtype == torch.long and limits.tolist() == [
            max(int(np.floor(n * a + b)), 0) for n in lengths
        ]


def test_back_pointers_are_followed_for_every_hypothesis_at_once() -> None:
    # step 0 fed tokens 5 and 6 into rows 0 and 1 of step 1; a sentence left the batch there, so
    # step 2's single row continues row 1 of step 1 with token 7
    parents, fed = [np.array([0, 0]), np.array([1])], [np.array([5, 6]), np.array([7])]
    # EOS at step 2 from its row 0; at step 1 from row 1 (step 2 has no row 1), and from row 0
    tokens, at = rules.follow_back(parents, fed, np.array([2, 1, 1]), np.array([0, 1, 0]), PAD)
    assert tokens.tolist() == [[6, 7], [6, PAD], [5, PAD]]
    assert at.tolist() == [[0, 1, 0], [0, 1, 0], [0, 0, 0]]  # each one's row at steps 0..2
    tokens, at = rules.follow_back(parents, fed, np.array([0]), np.array([3]), PAD)  # EOS first
    assert tokens.shape == (1, 0) and at.tolist() == [[3]]


def test_every_search_reads_the_one_copy() -> None:
    from seq2seq.decoding import beam, search
    from seq2seq.serving import onnx_models

    assert search.length_penalty is beam.length_penalty is lite_search.length_penalty
    assert search.length_penalty is rules.length_penalty
    assert lite_search.max_lengths is rules.max_lengths
    assert lite_search.min_lengths is rules.min_lengths
    assert lite_search.ngram_bans is rules.ngram_bans
    assert beam.follow_back is lite_search.follow_back is rules.follow_back
    assert beam.settled is lite_search.settled is rules.settled
    assert manifest.damage is rules.damage and manifest.sha256_file is rules.sha256_file
    assert tuple(f.name for f in fields(DecodeConfig)) == settings.SEARCH_KEYS
    assert onnx_models.SEARCH_KEYS is settings.SEARCH_KEYS
    # what backtranslate.json records, and resuming compares (the ban keys since issue 53:
    # chunks recorded before lack them, made at BAN_DEFAULTS)
    bans = ("no_repeat_ngram", "min_len_a", "min_len_b")
    recorded = ("beam_size", "alpha", "max_len_a", "max_len_b", *bans, "sampling")
    assert recorded == settings.RECORDED_KEYS
    assert tuple(settings.BAN_DEFAULTS) == bans
    assert settings.SAMPLING_KEYS == ("temperature", "top_k", "top_p", "seed")


def test_every_path_asks_the_one_constraints_rule() -> None:
    """Phrases need beam search: the torch search, the schema, the server and lite ask
    ``constraints_problem``, which refuses greedy search and sampling only."""
    from seq2seq.commands import rules as schema_rules
    from seq2seq.decoding import search
    from seq2seq.serving import api

    ask = steering.constraints_problem
    assert search.constraints_problem is schema_rules.constraints_problem is ask
    assert api.constraints_problem is seq2seq_lite.constraints_problem is ask
    assert ask(True, 1) == ask(True, 5, sampling=True) == steering.CONSTRAINTS_NEED_BEAM
    assert ask(True, 2) is ask(False, 1, sampling=True) is None
    assert rules.one_line(" a\tb\n c ") == "a b c"


@pytest.mark.parametrize("key", rules.NOT_NEGATIVE)
def test_the_torch_translator_refuses_what_lites_refuses(key: str) -> None:
    search = DecodeConfig(**{key: -1})
    with pytest.raises(Seq2SeqError, match=f"{key} must not be negative, not -1"):
        Translator(None, None, _Vocab(), search)  # type: ignore[arg-type]  # refused before use
    keys = ("beam_size", "nbest", "batch_size", "max_source_len")
    others = {k: getattr(search, k) for k in rules.NOT_NEGATIVE}
    assert rules.search_problem(**{k: getattr(search, k) for k in keys}, **others)


def test_a_line_too_long_is_refused_in_each_packages_words() -> None:
    def encode(text: list[str]) -> list[list[int]]:
        return [[5] * len(line.split()) for line in text]

    assert rules.encode_lines(encode, ["a b", " ", "\udcff c"], 2) == [[5, 5], [], [5, 5]]
    for error, option, base in (
        (InputTooLong, "max_source_len=...", Seq2SeqError),
        (seq2seq_lite.InputTooLong, "--max-source-len", seq2seq_lite.ReleaseError),
    ):
        with pytest.raises(error) as refused:
            rules.encode_lines(encode, ["a", "a b c d"], 3, error)
        assert isinstance(refused.value, base) and refused.value.index == 1
        assert (
            str(refused.value)
            == f"input line 2 has 4 subwords; at most 3 are translated ({option})"
        )
    assert (
        rules.search_problem(5, 6, 1, 1) == "nbest=6 needs at least as many beams: add beam_size=6"
    )
    assert rules.search_problem(5, 6, 1, 1, sampling=True) is None
    assert rules.search_problem(5, 1, 0, 1) == "batch_size must be at least 1, not 0"


def test_importing_lite_imports_neither_torch_seq2seq_nor_onnxruntime() -> None:
    """seq2seq imports seq2seq_lite for its rules, also where onnxruntime is not installed."""
    code = (
        "import sys, seq2seq_lite; print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'seq2seq', 'onnxruntime')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class _Vocab:
    vocab_size = 500  # a target tokenizer's size, all the rule reads


@pytest.mark.parametrize("key", ("alpha", "max_len_a", "min_len_a"))
@pytest.mark.parametrize("value", (float("nan"), float("inf")))
def test_a_number_that_is_not_finite_is_refused_by_every_search(key: str, value: float) -> None:
    message = f"{key}={value} must be a finite number"
    with pytest.raises(Seq2SeqError, match=f"^{message}$"):
        Translator(None, None, _Vocab(), DecodeConfig(**{key: value}))  # type: ignore[arg-type]
    assert rules.search_problem(5, 1, 1, 1, **{key: value}) == message


def test_the_largest_beam_is_half_the_target_vocabulary_in_every_search() -> None:
    assert rules.largest_beam(500) == 250 and rules.largest_beam(1) == 1
    assert rules.beam_problem(250, 500) is None
    message = rules.beam_problem(251, 500)
    assert message is not None and "beam_size=251" in message and "largest beam is 250" in message
    assert rules.search_problem(251, 1, 1, 1, vocab_size=500) == message
    assert rules.search_problem(251, 1, 1, 1, sampling=True, vocab_size=500) is None
    with pytest.raises(Seq2SeqError, match="the largest beam is 250"):
        Translator(None, None, _Vocab(), DecodeConfig(beam_size=400))  # type: ignore[arg-type]
