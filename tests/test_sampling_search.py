"""sampling=true in evaluate and translate: translations drawn from the model's distribution
(temperature, top_k, top_p), the same for the same seed and other for another, n-best from
sampling, scores as the search gives them; limits refused in one line."""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from model_helpers import forced_log_prob, peaky_model, settings, sources
from run_helpers import cli
from serve_helpers import SENTENCES, cli_translations

from seq2seq.decoding.search import greedy_search, length_penalty, sample


def sampling(**keys) -> object:
    return replace(settings(), sampling=True, **keys)


def texts(found) -> list[list[tuple[int, ...]]]:
    return [[tuple(h.tokens) for h in hyps] for hyps in found]


def test_the_same_seed_draws_the_same_and_another_seed_others() -> None:
    model, (src, lengths) = peaky_model("bahdanau"), sources()
    cfg = sampling(temperature=2.0, nbest=4)
    first = texts(sample(model, src, lengths, cfg, seed=1))
    assert first == texts(sample(model, src, lengths, cfg, seed=1))
    assert first != texts(sample(model, src, lengths, cfg, seed=2))
    assert all(len(hyps) == 4 for hyps in first)


def test_a_narrow_top_k_or_top_p_is_greedy_search() -> None:
    model, (src, lengths) = peaky_model("luong"), sources()
    greedy = [(h.tokens,) for h in greedy_search(model, src, lengths, settings())]
    for narrow in ({"top_k": 1}, {"top_p": 1e-6}):
        found = sample(model, src, lengths, sampling(temperature=5.0, **narrow), seed=3)
        assert [(hyps[0].tokens,) for hyps in found] == greedy


def test_samples_are_scored_as_searches_are_and_ranked() -> None:
    model, (src, lengths) = peaky_model("multihead"), sources()
    cfg = sampling(nbest=3, top_p=0.9)
    for row, hyps in enumerate(sample(model, src, lengths, cfg, seed=0)):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            log_prob = forced_log_prob(model, src[row, : lengths[row]], h.tokens)
            expected = log_prob / length_penalty(len(h.tokens) + 1, cfg.alpha)
            assert math.isclose(h.score, expected, rel_tol=1e-4, abs_tol=1e-4)


@pytest.mark.slow
def test_translate_and_evaluate_sample(smoke_run: Path, tmp_path: Path) -> None:
    draw = ["sampling=true", "temperature=1.5", "nbest=3"]
    first = cli_translations(smoke_run, SENTENCES, *draw, "seed=1")
    assert first == cli_translations(smoke_run, SENTENCES, *draw, "seed=1")
    assert first != cli_translations(smoke_run, SENTENCES, *draw, "seed=2")
    assert all(line.count(" ||| ") == 2 for line in first)  # three candidates a line
    proc = subprocess.run(
        [
            *cli("evaluate"),
            f"run_dir={smoke_run}",
            "sampling=true",
            "top_k=10",
            "seed=4",
            f"out={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sampling"] is True and (result["top_k"], result["seed"]) == (10, 4)
    assert (tmp_path / "test_2016_flickr.best.sample.k10.seed4.hyp").is_file()


@pytest.mark.parametrize(
    ("command", "overrides", "says"),
    [
        ("translate", ["top_p=0"], "top_p=0.0 must be above 0"),
        ("translate", ["temperature=0"], "temperature=0.0 must be positive"),
        ("evaluate", ["sampling=true", "coverage_penalty=0.2"], "not with sampling=true"),
        ("serve", ["sampling=true"], "sampling=true is for evaluate and translate"),
    ],
)
def test_sampling_limits_are_refused_in_one_line(command, overrides, says, tmp_path) -> None:
    proc = subprocess.run(
        [*cli(command), f"run_dir={tmp_path}", *overrides],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
