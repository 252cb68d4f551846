"""Steered requests (issue 53) on both backends: "prefixes" and "constraints" per sentence and
the served glossary (terms=) give what seq2seq-translate gives with the same files, the hits in
each answer; malformed ones are refused in one line. The server's own search settings
(no_repeat_ngram=, nbest=, ...) are each request's defaults; what they make impossible is said."""

from __future__ import annotations

import pytest
from serve_helpers import SENTENCES, cli_translations, post, server

PREFIXES = ["A", None, "", None]
CONSTRAINTS = [["grass"], [], ["smiling woman", "bench"], ["beach"]]
GLOSSARY = "Männer\tguys\n"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_steered_requests_answer_as_translate_does(onnx_release, backend, tmp_path) -> None:
    (tmp_path / "terms.tsv").write_text(GLOSSARY)
    (tmp_path / "prefix.txt").write_text("".join((p or "") + "\n" for p in PREFIXES))
    (tmp_path / "c.tsv").write_text("".join("\t".join(c) + "\n" for c in CONSTRAINTS))
    expected = cli_translations(
        onnx_release,
        SENTENCES,
        "beam_size=3",
        f"prefix={tmp_path / 'prefix.txt'}",
        f"constraints={tmp_path / 'c.tsv'}",
        f"terms={tmp_path / 'terms.tsv'}",
    )
    with server(onnx_release, f"backend={backend}", f"terms={tmp_path / 'terms.tsv'}") as (url, _):
        request = {"sentences": SENTENCES, "beam_size": 3}
        status, data = post(url, {**request, "prefixes": PREFIXES, "constraints": CONSTRAINTS})
        assert status == 200, data
        found = [item["translation"] for item in data["translations"]]
        assert found == expected
        assert found[0].startswith("A") and "grass" in found[0] and "guys" in found[1]
        assert data["translations"][1]["terms"] == [["Männer", "guys"]]
        assert "terms" not in data["translations"][0]
        for bad, says in (
            ({"prefixes": ["A"]}, "prefixes must be a list of 4 strings"),
            ({"constraints": [["a"], [], [], "b"]}, "constraints must be a list of 4 lists"),
            ({"constraints": CONSTRAINTS, "beam_size": 1}, "constraints need beam search"),
        ):
            status, data = post(url, {**request, **bad})
            assert status == 422 and says in data["error"], data


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_the_servers_search_settings_are_each_requests_defaults(onnx_release, backend) -> None:
    settings = ("beam_size=3", "no_repeat_ngram=1")
    expected = cli_translations(onnx_release, SENTENCES, *settings)
    assert expected != cli_translations(onnx_release, SENTENCES, "beam_size=3")
    with server(onnx_release, f"backend={backend}", *settings, "nbest=2") as (url, _):
        status, data = post(url, {"sentences": SENTENCES})
        assert status == 200, data
        assert [item["translation"] for item in data["translations"]] == expected
        assert all(len(item["nbest"]) == 2 for item in data["translations"])
        status, data = post(url, {"sentences": SENTENCES, "beam_size": 1})  # nbest capped
        assert status == 200 and "nbest" not in data["translations"][0], data
        impossible = {"sentences": SENTENCES[:1], "constraints": [["dog dog"]]}
        status, data = post(url, impossible)  # no_repeat_ngram=1 bans it: left out, and said
        assert status == 200, data
        (item,) = data["translations"]
        assert item["translation"] == expected[0]
        assert item["warnings"] == [
            "constraint 'dog dog' repeats a target piece of itself, which no_repeat_ngram=1 "
            "bans: left out"
        ]
