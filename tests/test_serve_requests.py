"""Requests refused in one line before decoding, straight through the ASGI app of a stand-in
model (no process, no lifespan): a beam the vocabulary cannot fill, query parameters, a prefix
with a line break, a glossary's terms at beam 1."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from serve_helpers import asgi_call

from seq2seq.serving.app import create_app
from seq2seq.serving.models import ServedModel
from seq2seq.serving.settings import ServeConfig


class WordTokenizer:
    def encode_batch(self, texts: list[str], threads: int | None = None) -> list[list[int]]:
        return [[5] * len(text.split()) for text in texts]


def post(payload: Any, query: str = "", **settings: Any) -> tuple[int, dict]:
    """(status, JSON) of POST /translate?query to a stand-in model of 500 target subwords."""
    settings = {"request_timeout_s": 1.0, **settings}
    cfg = OmegaConf.structured(ServeConfig(run_dir="unused", **settings))
    model = ServedModel("m", {"name": "m"}, WordTokenizer(), "cpu", lambda s: None, 500)  # type: ignore[arg-type]
    app = create_app([model], cfg, ThreadPoolExecutor(1))
    status, _, data = asyncio.run(asgi_call(app, "POST", "/translate", payload, query))
    return status, data


def test_a_beam_over_what_the_vocabulary_allows_is_422_naming_the_largest() -> None:
    status, data = post({"sentences": ["Ein Hund."], "beam_size": 400}, max_beam=1000)
    assert status == 422
    assert "beam_size=400" in data["error"] and "the largest beam is 250" in data["error"]


def test_query_parameters_are_refused_not_ignored() -> None:
    status, data = post(["Ein Hund."], query="beam_size=3")
    assert status == 422
    assert "beam_size" in data["error"] and "JSON body" in data["error"]


def test_a_prefix_with_a_line_break_or_an_empty_constraint_is_refused() -> None:
    status, data = post({"sentences": ["Ein Hund."], "prefixes": ["A\ndog"]})
    assert status == 422 and "line break" in data["error"]
    for phrase in ("a\ndog", "a\tdog"):  # a constraints file's line holds tab-separated ones
        status, data = post({"sentences": ["Ein Hund."], "constraints": [[phrase]]})
        assert status == 422 and "one phrase an item" in data["error"], data
    for phrase in ("", "  "):  # would be left out in silence
        status, data = post({"sentences": ["Ein Hund."], "constraints": [["dog", phrase]]})
        assert status == 422, data
        assert data["error"] == "sentence 0's constraints hold an empty phrase"


def test_a_glossary_hit_at_beam_1_names_the_glossary(tmp_path: Path) -> None:
    glossary = tmp_path / "g.tsv"
    glossary.write_text("Hund\tdog\n", encoding="utf-8")
    request = {"sentences": ["Ein Hund."], "beam_size": 1}
    status, data = post(request, terms=str(glossary), beam_size=2)
    assert status == 422
    assert data["error"].startswith(f"the glossary's terms (the server's terms={glossary})")


def test_a_glossary_phrase_over_max_chars_stops_the_server_at_start(tmp_path: Path) -> None:
    from seq2seq.errors import Seq2SeqError

    glossary = tmp_path / "g.tsv"
    glossary.write_text("Hund\tdog\nWiese\t" + "meadow " * 20 + "\n", encoding="utf-8")
    with pytest.raises(
        Seq2SeqError,
        match=r"g.tsv, line 2: the target phrase has 139 characters; at most max_chars=100",
    ):
        post({"sentences": ["Ein Hund."]}, terms=str(glossary), max_chars=100)


def test_a_sentences_constraints_and_terms_together_are_within_the_limits(tmp_path: Path) -> None:
    glossary = tmp_path / "g.tsv"
    glossary.write_text("Hund\tdog\nWiese\tmeadow\nMann\tman\n", encoding="utf-8")
    request = {"sentences": ["Ein Hund, ein Mann, eine Wiese."], "beam_size": 2}
    status, data = post(
        {**request, "constraints": [["grass"]]}, terms=str(glossary), max_constraints=3
    )
    assert status == 413, data
    assert data["error"] == (
        "sentence 0 has 1 constraints and 3 of the glossary's terms; at most 3 in all"
    )
    glossary.write_text("Hund\tlarge brown dog\nMann\ttall old man\n", encoding="utf-8")
    status, data = post({**request, "sentences": ["Hund Mann"]}, terms=str(glossary), max_chars=20)
    assert status == 413 and data["error"] == (
        "sentence 0's constraints and terms: 27 characters; at most 20"
    )


def test_the_access_log_counts_one_sentence_in_the_singular(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for sentences, said in (
        (["Ein Hund."], "1 sentence "),
        (["Ein Hund.", "Zwei."], "2 sentences "),
    ):
        caplog.clear()
        with caplog.at_level("INFO", logger="seq2seq.serve.access"):
            post({"sentences": sentences, "beam_size": 400}, max_beam=1000)  # refused: 422
        assert f"POST /translate 422 {said}" in caplog.text
