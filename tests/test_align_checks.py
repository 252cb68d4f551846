"""Two traps of word alignment told in one line: pairs that do not read like the run's
languages (another language pair, or the sides swapped), and a gold file without sure links
(recall 0). Both in `seq2seq-align` and in the training's alignment probe."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from align_helpers import pairs_of, run_align
from omegaconf import OmegaConf

from seq2seq.decoding.aer import parse_gold, sure_links_missing
from seq2seq.decoding.pairlangs import MIN_WORDS, pair_language_problem
from seq2seq.decoding.wordalign import read_pairs
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import load_run
from seq2seq.training.alignment import AlignmentProbe

HANSARDS = Path(__file__).resolve().parents[2] / "shared" / "data" / "alignment"
SWAPPED = "are the sides swapped?"
NO_SURE = "possible links (ipj) only, no sure one (i-j)"


def swapped_pairs(lines: list[str], path: Path) -> Path:
    """The `de ||| en` lines written `en ||| de`."""
    path.write_text("".join(f"{b} ||| {a}\n" for a, b in (x.split(" ||| ") for x in lines)))
    return path


def possible_only(lines: list[str], path: Path) -> Path:
    """A gold file of possible links only: each pair's first words linked."""
    path.write_text("1p1\n" * len(lines))
    return path


@pytest.mark.slow
def test_pairs_are_judged_by_the_runs_tokenizers(smoke_run: Path, multi30k_dir, tmp_path):
    run = load_run(smoke_run)
    path, _ = pairs_of(multi30k_dir, tmp_path, count=200)
    pairs = read_pairs(path)
    assert pair_language_problem(pairs, run.src_tok, run.tgt_tok, ("de", "en")) is None
    flipped = [(tgt, src) for src, tgt in pairs]
    said = pair_language_problem(flipped, run.src_tok, run.tgt_tok, ("de", "en"))
    assert said.startswith("the source side reads like the run's target language (en), not its")
    assert said.endswith(SWAPPED)
    undone = pair_language_problem(flipped, run.src_tok, run.tgt_tok, ("de", "en"), swapped=True)
    assert undone.endswith("drop swap=true: the file is de ||| en already")  # swap=true given
    short = flipped[:2]
    assert sum(len(s) + len(t) for s, t in short) < MIN_WORDS
    assert pair_language_problem(short, run.src_tok, run.tgt_tok, ("de", "en")) is None
    one_model = pair_language_problem(flipped, run.src_tok, run.src_tok, ("de", "en"))
    assert one_model is None  # a joint model cannot tell
    if (HANSARDS / "en-fr.hansards.txt").is_file():  # English-French under a de-en run
        hansards = read_pairs(HANSARDS / "en-fr.hansards.txt")
        said = pair_language_problem(hansards, run.src_tok, run.tgt_tok, ("de", "en"))
        assert said is not None and "source side reads like the run's target language" in said


@pytest.mark.slow
def test_align_warns_of_swapped_pairs_and_gold_without_sure_links(
    smoke_run: Path, multi30k_dir, tmp_path
):
    _, lines = pairs_of(multi30k_dir, tmp_path)
    swapped = swapped_pairs(lines, tmp_path / "swapped.txt")
    gold = possible_only(lines, tmp_path / "possible.talp")
    proc = run_align(f"run_dir={smoke_run}", f"input={swapped}", f"gold={gold}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(SWAPPED) == 1 and proc.stderr.count(NO_SURE) == 1
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["recall"] == 0.0 and result["aer"] == pytest.approx(1 - result["precision"])
    # read the right way round, with sure links: nothing to say
    (tmp_path / "sure.talp").write_text("1-1\n" * len(lines))
    right = run_align(
        f"run_dir={smoke_run}", f"input={swapped}", "swap=true", "gold=sure.talp", cwd=tmp_path
    )
    assert right.returncode == 0, right.stderr
    assert SWAPPED not in right.stderr and NO_SURE not in right.stderr


@pytest.mark.slow
def test_the_probe_warns_once(smoke_run: Path, multi30k_dir, tmp_path, caplog):
    _, lines = pairs_of(multi30k_dir, tmp_path)
    cfg = OmegaConf.create(
        {
            "data": {"src_lang": "de", "tgt_lang": "en"},
            "log": {
                "alignment_pairs": str(swapped_pairs(lines, tmp_path / "swapped.txt")),
                "alignment_links": str(possible_only(lines, tmp_path / "possible.talp")),
            },
        }
    )
    run = load_run(smoke_run)
    with caplog.at_level(logging.WARNING):
        probe = AlignmentProbe.from_config(cfg, (run.src_tok, run.tgt_tok))
        for _ in range(2):  # every validation measures: told once, at the start
            probe.measure(run.model, run.src_tok, run.tgt_tok, Engine.create("cpu"))
    said = [r.getMessage() for r in caplog.records]
    assert sum(NO_SURE in m for m in said) == 1 and sum(SWAPPED in m for m in said) == 1
    assert all("\n" not in m for m in said)


def test_a_gold_file_without_any_link_is_said() -> None:
    empty = [parse_gold("") for _ in range(3)]
    assert sure_links_missing(empty, "gold=g.talp") == (
        "gold=g.talp holds no links at all: recall and AER against it say nothing"
    )
    assert sure_links_missing([parse_gold("1-1")], "gold=g.talp") is None
