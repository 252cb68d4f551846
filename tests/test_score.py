"""`seq2seq-score`: log P(target | source) of given pairs by forced decoding, per pair and as the
perplexity of them all (the figure training's validation logs)."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from model_helpers import SETUPS, TGT_VOCAB, hand_batch, tiny_model
from omegaconf import OmegaConf
from run_helpers import command, scalars

from seq2seq.commands.configs import ScoreConfig
from seq2seq.commands.score import score
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.forced import score_pairs, target_log_probs
from seq2seq.errors import DataError
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import TrainedRun
from seq2seq.storage.rundir import TGT_TOKENIZER
from seq2seq.vocab import PAD


@pytest.mark.parametrize("setup", ["bahdanau", "luong-nofeed", "multihead"])
def test_the_pairs_log_probs_are_the_nll_training_reports(setup: str) -> None:
    model, batch = tiny_model(**SETUPS[setup]), hand_batch(3)
    with torch.inference_mode():
        log_probs = target_log_probs(model, batch)
        _, nll = model(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out)
    assert log_probs.shape == (batch.src.size(0),)
    torch.testing.assert_close(-log_probs.sum(), nll, rtol=1e-5, atol=1e-5)
    assert (log_probs < 0).all()


def test_each_pair_scores_alone_as_in_its_batch_and_in_the_given_order() -> None:
    """The pairs are read longest first in token-budget batches: each score still lands on its
    own line, equal to the pair read alone (padding changes nothing)."""
    model, rng = tiny_model(**SETUPS["bahdanau"]), np.random.default_rng(0)
    lengths = [(int(rng.integers(0, 9)), int(rng.integers(0, 9))) for _ in range(23)]
    sources = [list(rng.integers(4, 20, n)) for n, _ in lengths]
    targets = [list(rng.integers(4, TGT_VOCAB, m)) for _, m in lengths]
    engine = Engine.create("cpu", "fp32")
    together = score_pairs(model, sources, targets, engine, batch_tokens=40)
    pairs = zip(sources, targets, strict=True)
    alone = [score_pairs(model, [s], [t], engine, 1)[0] for s, t in pairs]
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-5)
    assert len(set(np.round(together, 3))) > 20  # distinct pairs, distinct scores
    assert score_pairs(model, [], [], engine, 40).shape == (0,)


def test_a_padded_position_counts_for_nothing() -> None:
    model, batch = tiny_model(**SETUPS["bahdanau"]), hand_batch(5)
    wider = torch.nn.functional.pad(batch.tgt_out, (0, 3), value=PAD)
    padded = type(batch)(**{**batch.__dict__, "tgt_out": wider})
    padded.tgt_in = torch.nn.functional.pad(batch.tgt_in, (0, 3), value=PAD)
    with torch.inference_mode():
        torch.testing.assert_close(target_log_probs(model, padded), target_log_probs(model, batch))


def _first_lines(multi30k_dir: Path, split: str, lang: str, count: int, out: Path) -> Path:
    with gzip.open(multi30k_dir / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(count)]
    out.write_text("".join(lines), encoding="utf-8")
    return out


@pytest.mark.slow
def test_the_perplexity_of_the_validation_pairs_is_the_one_training_logged(
    smoke_run: Path, multi30k_dir: Path, tmp_path: Path
) -> None:
    """The smoke run validates on the first 100 validation pairs: scored from the files, they
    have the perplexity TensorBoard holds for best.pt's step."""
    src, tgt = (
        _first_lines(multi30k_dir, "val", k, 100, tmp_path / f"v.{k}") for k in ["de", "en"]
    )
    scores = tmp_path / "scores.txt"
    args = [f"run_dir={smoke_run}", f"src_file={src}", f"tgt_file={tgt}", "products=pytorch"]
    proc = command("score", *args, f"output={scores}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    logged = dict(scalars(smoke_run, "valid/ppl"))[result["step"]]
    assert result["ppl"] == pytest.approx(logged, rel=1e-4)
    assert result["pairs"] == 100 and result["normalize"] is False
    sums = [float(line) for line in scores.read_text().splitlines()]
    assert len(sums) == 100 and max(sums) < 0
    assert -sum(sums) / result["target_pieces"] == pytest.approx(result["nll"], abs=1e-4)

    piped = command("score", *args, "normalize=true")  # stdout: the scores alone
    assert piped.returncode == 0, piped.stderr
    means = [float(line) for line in piped.stdout.splitlines()]
    assert len(means) == 100 and "perplexity" in piped.stderr
    pieces = Tokenizer.load(smoke_run / TGT_TOKENIZER).encode_batch(tgt.read_text().splitlines())
    expected = [total / (len(ids) + 1) for total, ids in zip(sums, pieces, strict=True)]
    assert means == pytest.approx(expected, abs=2e-4)  # each sum over its pieces and EOS


@pytest.mark.slow
def test_an_ensembles_score_is_the_mean_of_its_members(
    smoke_run: Path, luong_run: Path, tmp_path: Path
) -> None:
    """ensemble=[...]: each pair's score is the mean of the runs' own, the sum over steps of the
    mean log-probability that an ensemble search adds up; the result names every run."""
    (tmp_path / "a.de").write_text("Ein Hund läuft .\nZwei Männer .\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("A dog runs .\nTwo men .\n", encoding="utf-8")
    files = [f"src_file={tmp_path / 'a.de'}", f"tgt_file={tmp_path / 'a.en'}"]

    def scores(*args: str) -> tuple[list[float], dict]:
        out = tmp_path / "scores.txt"
        proc = command("score", *files, *args, f"output={out}")
        assert proc.returncode == 0, proc.stderr
        return [float(line) for line in out.read_text().splitlines()], json.loads(proc.stdout)

    alone, _ = scores(f"run_dir={smoke_run}")
    other, _ = scores(f"run_dir={luong_run}")
    both, result = scores(f"run_dir={smoke_run}", f"ensemble=[{luong_run}]")
    assert alone != pytest.approx(other, abs=1e-2)  # two models that disagree
    assert both == pytest.approx([(a + b) / 2 for a, b in zip(alone, other, strict=True)], abs=2e-4)
    assert result["runs"] == [str(smoke_run.resolve()), str(luong_run.resolve())]


def test_files_of_other_lengths_are_refused_before_any_score_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On stdout the scores of the pairs before the shorter file's end came first, then the
    refusal: the files are read whole before the run is even loaded."""
    (tmp_path / "a.de").write_text("Ein Hund .\nZwei Männer .\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("A dog .\n", encoding="utf-8")
    files = {"src_file": str(tmp_path / "a.de"), "tgt_file": str(tmp_path / "a.en")}
    cfg = OmegaConf.structured(ScoreConfig(run_dir=str(tmp_path / "no_run"), **files))
    with pytest.raises(DataError, match="a.de has 2 lines, .*a.en has 1$"):
        score(cfg)
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_files_of_other_lengths_or_languages(smoke_run: Path, tmp_path: Path) -> None:
    (tmp_path / "a.de").write_text("Ein Hund .\nZwei Männer .\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("A dog .\n", encoding="utf-8")
    out = tmp_path / "scores.txt"
    files = [f"src_file={tmp_path / 'a.de'}", f"tgt_file={tmp_path / 'a.en'}"]
    proc = command("score", f"run_dir={smoke_run}", *files, f"output={out}")
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip().endswith("a.de has 2 lines, " + f"{tmp_path / 'a.en'} has 1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.de", "a.en"]
    proc = command("score", f"run_dir={smoke_run}", *files)  # stdout: no score, then the error
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    proc = command("score", f"run_dir={smoke_run}", *files, f"output={tmp_path}")
    assert proc.returncode == 1 and proc.stderr.strip().endswith("is a folder: give a file's name")

    (tmp_path / "a.en").write_text("A dog .\nTwo men .\n", encoding="utf-8")
    swapped = [f"src_file={tmp_path / 'a.en'}", f"tgt_file={tmp_path / 'a.de'}"]
    proc = command("score", f"run_dir={smoke_run}", *swapped)  # scored, and warned of
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 2, proc.stderr
    assert proc.stderr.count("are the files the wrong way round?") == 2


@pytest.mark.parametrize(
    ("path", "side", "warned"),
    [
        ("test.en", "source", True),  # a de->en run reading English as its source
        ("corpus/test.de.gz", "target", True),
        ("test.de", "source", False),
        ("test.en", "target", False),
        ("sources.txt", "source", False),  # a name that says no language
        (None, "source", False),
    ],
)
def test_a_file_named_for_the_other_language_is_warned_of(path, side, warned, caplog) -> None:
    cfg = OmegaConf.create({"data": {"src_lang": "de", "tgt_lang": "en"}})
    run = TrainedRun(Path("run"), cfg, None, None, None, Path("best.pt"), 0)  # names alone
    with caplog.at_level(logging.WARNING):
        run.check_language("src_file", path, side)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == int(warned)
    if warned:
        assert lines[0].startswith(f"src_file={path}: its name says ")
        assert "are the files the wrong way round?" in lines[0]
