"""Prefix completion (issue 53): a target prefix per sentence, forced through the decoder at the
first steps, then the search goes on. Every output starts with its prefix, whose log-probs
count in the score; the prefix follows its sentence when a batch is sorted by length; without
prefixes the search is unchanged; the lite (numpy) search completes prefixes as torch does."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from model_helpers import assert_same, forced_log_prob, peaky_model, settings, sources
from run_helpers import cli
from seq2seq_lite import rules
from seq2seq_lite import search as lite_search
from seq2seq_lite.steering import (
    LineSteering,
    SteeringIds,
    encode_steering,
    forced_max_lengths,
    steering_arrays,
)

from seq2seq.config import DecodeConfig
from seq2seq.decoding import hypothesis
from seq2seq.decoding.hypothesis import BatchSteering
from seq2seq.decoding.search import decode, decode_sources, max_lengths
from seq2seq.errors import Seq2SeqError
from seq2seq.vocab import PAD

PREFIXES = [[5, 6, 7], [], [9], [10, 10, 10, 10, 10], [4, 8]]  # one per sentence of `sources`
LONG = dict(a=2.0, b=6)


def _cfg(search: str) -> DecodeConfig:
    """Greedy search, beam search (4 beams, 4 best) or sampling (3 drawn)."""
    if search == "sampling":
        return replace(settings(nbest=3, **LONG), sampling=True, temperature=0.7, seed=1)
    return settings(**LONG) if search == "greedy" else settings(4, 0.6, 4, **LONG)


def _prefixed(prefixes: list[list[int]]) -> BatchSteering:
    return BatchSteering.of([SteeringIds(p) for p in prefixes], range(len(prefixes)))


def _listed(src: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
    return [src[i, : lengths[i]].tolist() for i in range(len(src))]


@pytest.mark.parametrize("search", ["greedy", "beam", "sampling"])
@pytest.mark.parametrize("name", ["bahdanau", "multihead"])
def test_every_output_starts_with_its_prefix_and_goes_on(name: str, search: str) -> None:
    model, (src, lengths) = peaky_model(name), sources()
    found = decode(model, src, lengths, _cfg(search), _prefixed(PREFIXES))
    for prefix, hyps in zip(PREFIXES, found, strict=True):
        assert hyps
        for h in hyps:
            assert h.tokens[: len(prefix)] == prefix and len(h.tokens) > len(prefix)


def test_the_forced_tokens_count_in_the_score() -> None:
    """Greedy's score is the teacher-forced log-prob of its output over the length penalty."""
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = _cfg("greedy")
    found = decode(model, src, lengths, cfg, _prefixed(PREFIXES))
    for i, [h] in enumerate(found):
        whole = forced_log_prob(model, src[i, : lengths[i]], h.tokens)
        penalty = rules.length_penalty(len(h.tokens) + 1, cfg.alpha)
        assert h.score == pytest.approx(whole / penalty, abs=1e-4)


@pytest.mark.parametrize("search", ["greedy", "beam", "sampling"])
def test_the_prefix_follows_its_sentence_when_sorted_by_length(search: str) -> None:
    """Sources of different lengths, each with its own prefix, in one batch sorted by length:
    each result is the one its sentence gets decoded alone (sampling: its draws differ, and
    start with its prefix)."""
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = replace(_cfg(search), batch_size=8)
    together = decode_sources(
        model, _listed(src, lengths), cfg, steer=[SteeringIds(p) for p in PREFIXES]
    )
    for i, prefix in enumerate(PREFIXES):
        one = src[i : i + 1, : lengths[i]]
        [alone] = decode(model, one, lengths[i : i + 1], cfg, _prefixed([prefix]))
        if search != "sampling":
            assert [h.tokens for h in together[i]] == [h.tokens for h in alone]
        assert all(h.tokens[: len(prefix)] == prefix for h in together[i])


@pytest.mark.parametrize("search", ["greedy", "beam", "sampling"])
def test_without_prefixes_nothing_changes(search: str) -> None:
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = _cfg(search)
    limits = max_lengths(lengths, cfg.max_len_a, cfg.max_len_b)
    assert BatchSteering.of([SteeringIds()] * 5, range(5)) is None  # no work where none has one
    assert hypothesis.user_bans(cfg, lengths, limits, src.device, None) is None
    plain = decode_sources(model, _listed(src, lengths), cfg)
    empty = decode_sources(model, _listed(src, lengths), cfg, steer=[SteeringIds()] * 5)
    for a_list, b_list in zip(plain, empty, strict=True):
        for a, b in zip(a_list, b_list, strict=True):
            assert_same(a, b, exact=True)


def test_a_prefix_past_the_length_limit_leaves_room_for_one_more() -> None:
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = settings(a=0.0, b=2)  # at most 2 tokens before EOS
    long = [4, 5, 6, 7, 8, 9]
    found = decode(model, src, lengths, cfg, _prefixed([long] * 5))
    prefix = np.array([[4, 5, 6, 7, 8, 9], [4, PAD, PAD, PAD, PAD, PAD]])
    limits = forced_max_lengths(np.array([2, 0]), prefix, None, PAD)
    assert limits.tolist() == [7, 2]
    for [h] in found:
        assert h.tokens[:6] == long and len(h.tokens) == 7


def test_prefixes_are_encoded_alone_and_padded_in_batch_order() -> None:
    def encode(texts: list[str]) -> list[list[int]]:
        return [[4 + len(t)] * len(t.split()) for t in texts]

    assert encode_steering(encode, [LineSteering(""), None]) is None  # no work
    encoded = encode_steering(encode, [LineSteering("a b"), None, LineSteering(" c ")])
    assert [e.prefix for e in encoded] == [[7, 7], [], [5]]
    prefix, phrases = steering_arrays(encoded, [2, 0, 1], PAD)
    assert prefix.tolist() == [[5, PAD], [7, 7], [PAD, PAD]] and phrases is None


# -- the lite search, against torch, on the graphs of two tiny models --------------------------


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_lite_search_completes_prefixes_as_torch_does(peaky_graphs, beam_size: int) -> None:
    model, graphs = peaky_graphs
    src, lengths = sources()
    cfg = settings(beam_size, 0.6, beam_size, **LONG)
    search = {k: getattr(cfg, k) for k in ("beam_size", "nbest", "alpha", "max_len_a", "max_len_b")}
    prefix = _prefixed(PREFIXES)
    expected = decode(model, src, lengths, cfg, prefix)
    args = (graphs, src.numpy(), lengths.numpy(), search, prefix.prefix.numpy())
    greedy = beam_size == 1
    found = [[h] for h in lite_search.greedy(*args)] if greedy else lite_search.beam(*args)
    for want, got in zip(expected, found, strict=True):
        assert [h.tokens for h in got] == [h.tokens for h in want]
        for a, b in zip(want, got, strict=True):
            assert abs(a.score - b.score) < 1e-4


# -- the Translator, on the smoke model: text prefixes ----------------------------------------

LINES = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee auf einer großen Wiese neben dem Haus.",
    "Eine Frau.",
]
TEXTS = ["A dog", "", "The young woman is"]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_translator_outputs_start_with_the_prefix_text(smoke_run, beam_size: int) -> None:
    from seq2seq.decoding.inference import Translator
    from seq2seq.runtime.run_folder import load_run

    translator = Translator.from_run(load_run(smoke_run), DecodeConfig(beam_size=beam_size))
    plain = translator.translate(LINES)
    steered = translator.translate(LINES, steer=[LineSteering(t) for t in TEXTS])
    for text, a, b in zip(TEXTS, plain, steered, strict=True):
        assert translator.best_text(b).startswith(text)
        if not text:
            assert [h.tokens for h in a.hypotheses] == [h.tokens for h in b.hypotheses]
    with pytest.raises(Seq2SeqError, match="steering for 1 lines, 3 lines to translate"):
        translator.translate(LINES, steer=[LineSteering("A")])


# -- the commands: prefix=<file> ---------------------------------------------------------------


def test_the_commands_refuse_name_and_record_prefix(tmp_path) -> None:
    from omegaconf import OmegaConf

    from seq2seq.commands.configs import EvaluateConfig, register_schemas
    from seq2seq.commands.evaluate import _settings_part, search_facts
    from seq2seq.commands.keys import check_command_line
    from seq2seq.commands.rules import check_config
    from seq2seq.data.steering import SteeringFiles

    register_schemas()
    for key in ("prefix", "constraints"):
        with pytest.raises(Seq2SeqError, match=f"^{key}: no such key; each request sends its own"):
            check_command_line("serve", ["run_dir=x", f"{key}=p.txt"])
    check_config(OmegaConf.structured(replace(EvaluateConfig(), run_dir="x", prefix="p.txt")))
    given = replace(EvaluateConfig(), prefix=str(tmp_path / "p.txt"))
    assert _settings_part(given) == "best.beam5.prefix-p.txt"
    assert search_facts(given)["prefix"] == str(tmp_path / "p.txt")
    assert "prefix" not in search_facts(EvaluateConfig())
    (tmp_path / "p.txt").write_text("A dog\n\nThe\n")
    files = SteeringFiles.read(str(tmp_path / "p.txt"), None, None)
    files.check_count(3, "test.de")
    assert [s.prefix for s in files.for_lines(["x"] * 3)] == ["A dog", "", "The"]
    with pytest.raises(Seq2SeqError, match=r"^prefix=\S+ has 3 lines, test.de has 4: give one"):
        files.check_count(4, "test.de")


def test_translate_completes_the_prefixes_of_piped_lines(smoke_run, tmp_path) -> None:
    import subprocess

    from serve_helpers import cli_translations

    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("".join(t + "\n" for t in TEXTS))
    found = cli_translations(smoke_run, LINES, f"prefix={prefixes}", "beam_size=2")
    assert len(found) == len(LINES)
    assert all(out.startswith(text) for out, text in zip(found, TEXTS, strict=True))
    proc = subprocess.run(
        [*cli("translate"), f"run_dir={smoke_run}"] + [f"prefix={prefixes}"],
        input="".join(line + "\n" for line in LINES[:2]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "prefix=" in proc.stderr
    assert "has 3 lines, standard input has 2: give one line" in proc.stderr
