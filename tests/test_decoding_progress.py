"""Evaluating a file and distilling a chunk tell their progress, decoding in slices of whole
batches that give the same translations as one call."""

from __future__ import annotations

import gzip
import io
import logging
import re
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seq2seq.commands import translate
from seq2seq.commands.configs import TranslateConfig
from seq2seq.config import DecodeConfig
from seq2seq.decoding import progress
from seq2seq.decoding.inference import Translator
from seq2seq.decoding.progress import translate_told
from seq2seq.runtime.run_folder import load_run


@pytest.fixture(scope="module")
def lines(multi30k_dir: Path) -> list[str]:
    with gzip.open(multi30k_dir / "val.de.gz", "rt", encoding="utf-8") as f:
        text = [next(f).strip() for _ in range(21)]
    return [*text[:5], "", *text[5:], "  "]  # blank lines stay blank, in place


@pytest.mark.parametrize(
    "search",
    [
        {"beam_size": 1},
        {"beam_size": 3, "nbest": 2},
        {"sampling": True, "nbest": 2, "seed": 7},
    ],
)
def test_slices_translate_as_one_call(smoke_run, lines, search, monkeypatch, caplog) -> None:
    monkeypatch.setattr(progress, "SLICE_SENTENCES", 4)  # 2 batches of 2: 6 slices
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    translator = Translator.from_run(load_run(smoke_run), DecodeConfig(batch_size=2, **search))
    with caplog.at_level(logging.INFO, logger="seq2seq.decoding"):
        told = translate_told(translator, lines, "val.de", seed=3)
    whole = translator.translate(lines, seed=3)
    for one, other in zip(told, whole, strict=True):
        assert one.source_ids == other.source_ids
        assert [(h.tokens, h.score) for h in one.hypotheses] == [
            (h.tokens, h.score) for h in other.hypotheses
        ]
    said = [r.getMessage() for r in caplog.records]
    assert re.fullmatch(r"val\.de: 4 of 21 sentences, [\d.]+/s, ETA \d+:\d\d:\d\d", said[0])
    assert len(said) == 5  # not after the last slice


def test_translate_of_a_long_file_says_how_far(smoke_run, lines, tmp_path, monkeypatch, caplog):
    source = tmp_path / "in.de"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    monkeypatch.setattr(translate, "LOG_EVERY_S", 0.0)
    # BUFFER_BATCHES (8) batches of one line are read at a time
    cfg = OmegaConf.structured(TranslateConfig(run_dir=str(smoke_run), batch_size=1))
    translator = Translator.from_run(load_run(smoke_run), cfg)
    with open(source, "rb") as raw, caplog.at_level(logging.INFO, logger="seq2seq.translate"):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw))
        translate.piped(translator, cfg)
    said = [r.getMessage() for r in caplog.records]
    assert [line.split(",")[0] for line in said] == [
        "standard input: 8 lines translated",
        "standard input: 16 lines translated",
        "standard input: 23 lines translated",
    ]
