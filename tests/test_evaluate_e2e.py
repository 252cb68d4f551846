"""`seq2seq-evaluate` on a trained smoke run: its files, sacrebleu CLI scores, TensorBoard."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from run_helpers import cli, events, sacrebleu_cli

from seq2seq.commands.configs import EvaluateConfig
from seq2seq.commands.evaluate import evaluate
from seq2seq.decoding.alignment import pharaoh
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.run_folder import load_run


def run_evaluate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`seq2seq-evaluate ARGS` in its own process, from `cwd`, as a user would."""
    cmd = [*cli("evaluate"), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def result_of(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def bleu_and_chrf(reference: str, hypotheses: str) -> list[float]:
    """BLEU and chrF of the sacrebleu command line, 4 decimals."""
    return json.loads(sacrebleu_cli(reference, hypotheses, "-m", "bleu", "chrf", "-w", "4"))


@pytest.mark.slow
def test_bleu_matches_sacrebleu_cli_on_the_test_split(smoke_run: Path, tmp_path: Path) -> None:
    proc = run_evaluate(f"run_dir={smoke_run}", "beam_size=1", cwd=tmp_path)
    result = result_of(proc)
    assert not any(tmp_path.iterdir()), "evaluate wrote into the current directory"
    assert result["split"] == "test_2016_flickr"
    assert (result["beam_size"], result["sentences"]) == (1, 1000)
    assert result["signature"].startswith("nrefs:1|") and result["seconds"] > 0

    hyp = Path(result["hypotheses"])
    assert hyp.parent == smoke_run / "eval"
    assert len(hyp.read_text(encoding="utf-8").split("\n")) == 1000 + 1  # trailing newline
    assert json.loads(hyp.with_suffix(".json").read_text(encoding="utf-8")) == result
    bleu, chrf = bleu_and_chrf(result["reference"], str(hyp))
    assert result["bleu"] == pytest.approx(bleu, abs=5e-5)
    assert result["chrf"] == pytest.approx(chrf, abs=5e-5)

    # Alignments and soft weights: one line per sentence, pairs within the subwords of each.
    alignments = Path(result["alignments"]).read_text(encoding="utf-8").split("\n")[:-1]
    with open(result["attention"], encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert len(alignments) == len(records) == 1000
    for line, record in zip(alignments[:50], records[:50], strict=True):
        weights = np.array(record["weights"])
        assert weights.shape == (len(record["target"]), len(record["source"]))
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-3)
        assert record["source"][-1] == record["target"][-1] == "</s>"
        for pair in line.split():
            i, j = map(int, pair.split("-"))
            assert i < len(record["source"]) - 1 and j < len(record["target"]) - 1

    logged = [(e.step, round(e.value, 3)) for e in events(smoke_run).Scalars("hparams/test_bleu")]
    assert (result["step"], round(result["bleu"], 3)) in logged

    # The references' perplexity is the one seq2seq-score gives the same two files.
    files = [f"src_file={result['source']}", f"tgt_file={result['reference']}"]
    scored = subprocess.run(
        [*cli("score"), f"run_dir={smoke_run}", *files, f"output={tmp_path / 'scores'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result["ppl"] == pytest.approx(result_of(scored)["ppl"], rel=1e-4)
    logged = [e.value for e in events(smoke_run).Scalars("eval/test_2016_flickr_ppl")]
    assert result["ppl"] == pytest.approx(logged[-1], rel=1e-4)


def test_files_nbest_and_attention_heatmaps(
    smoke_run: Path, multi30k_dir: Path, tmp_path: Path
) -> None:
    """input=/reference= files (one source line empty), beam 5 with n-best, K heatmaps logged."""
    sides = {}
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            sides[lang] = [next(f).strip() for _ in range(8)]
    sides["de"][5] = ""
    for lang, lines in sides.items():
        (tmp_path / f"sample.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = run_evaluate(
        f"run_dir={smoke_run}",
        f"input={tmp_path / 'sample.de'}",
        f"reference={tmp_path / 'sample.en'}",
        "nbest=3",
        "log_attention=3",
        cwd=cwd,
    )
    result = result_of(proc)
    assert not any(cwd.iterdir())
    assert (result["split"], result["beam_size"], result["sentences"]) == (None, 5, 8)
    hypotheses = Path(result["hypotheses"]).read_text(encoding="utf-8").split("\n")[:-1]
    assert len(hypotheses) == 8 and hypotheses[5] == ""
    bleu, _ = bleu_and_chrf(str(tmp_path / "sample.en"), result["hypotheses"])
    assert result["bleu"] == pytest.approx(bleu, abs=5e-5)

    nbest: dict[int, list[tuple[str, float]]] = {}
    for line in Path(result["nbest"]).read_text(encoding="utf-8").splitlines():
        index, text, score = line.split(" ||| ")
        nbest.setdefault(int(index), []).append((text, float(score)))
    assert sorted(nbest) == [0, 1, 2, 3, 4, 6, 7]
    for index, candidates in nbest.items():
        assert len(candidates) == 3
        assert [s for _, s in candidates] == sorted((s for _, s in candidates), reverse=True)
        assert candidates[0][0] == hypotheses[index]

    images = [tag for tag in events(smoke_run).Tags()["images"] if tag.startswith("attention/")]
    assert sorted(t for t in images if t.startswith("attention/sample.de_")) == [
        f"attention/sample.de_{i}" for i in range(3)
    ]


@pytest.mark.parametrize("engine", ["auto", "fbgemm"])
def test_int8_decodes_with_the_chosen_engine_and_says_which(
    smoke_run: Path, multi30k_dir: Path, tmp_path: Path, engine: str
) -> None:
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = "".join(next(f) for _ in range(8))
        (tmp_path / f"sample.{lang}").write_text(lines, encoding="utf-8")
    proc = run_evaluate(
        f"run_dir={smoke_run}",
        f"input={tmp_path / 'sample.de'}",
        f"reference={tmp_path / 'sample.en'}",
        "precision=int8",
        f"int8_engine={engine}",
        "beam_size=2",
        cwd=tmp_path,
    )
    result = result_of(proc)
    assert result["sentences"] == 8
    assert len(Path(result["hypotheses"]).read_text(encoding="utf-8").splitlines()) == 8
    # its own files beside fp32's: an int8 evaluation does not overwrite the model's result
    # (``sample.de-<digest>``: the other engine's case evaluated a sample.de of another folder)
    assert re.fullmatch(
        r"sample\.de(-[0-9a-f]{6})?\.best\.beam2\.int8\.hyp", Path(result["hypotheses"]).name
    )
    said = [line for line in proc.stderr.splitlines() if "int8 engine:" in line]
    assert len(said) == 1
    why = "timed on a decoding probe" if engine == "auto" else "int8_engine=fbgemm"
    assert why in said[0] and ("fbgemm" in said[0] or engine == "auto")
    # the record says what ran: the engine chosen, the threads, the fp32 products
    assert result["int8_engine"] in said[0] and result["threads"] >= 1
    assert result["products"] in ("onednn", "pytorch") and result["precision"] == "int8"


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    proc = run_evaluate(f"run_dir={tmp_path / 'missing'}", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "is not a training run or release folder" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_is_refused_before_the_model_loads(smoke_run: Path, tmp_path) -> None:
    (tmp_path / "in.de").write_text("Ein Hund.\n", encoding="utf-8")
    proc = run_evaluate(
        f"run_dir={smoke_run}", "input=in.de", "reference=in.en", "terms=g.tsv", cwd=tmp_path
    )
    assert proc.returncode == 1 and proc.stdout == ""
    said = "reference=in.en does not exist; terms=g.tsv does not exist"
    assert proc.stderr.strip() == f"[ERROR] {said}"  # nothing loaded or timed before it


@pytest.fixture
def cs_run(smoke_run: Path, tmp_path: Path) -> Path:
    """A copy of the smoke run whose config claims Czech sources (same model and tokenizers)."""
    run = tmp_path / "cs_run"
    run.mkdir()
    for name in ("best.pt", "src.model", "tgt.model"):
        shutil.copy(smoke_run / name, run / name)
    cfg = OmegaConf.load(smoke_run / "config.yaml")
    cfg.data.src_lang = "cs"
    OmegaConf.save(cfg, run / "config.yaml")
    return run


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"checkpoint": "nowhere.pt"}, "checkpoint not found"),
        ({"split": "test_2099"}, "unknown Multi30k split 'test_2099'"),
        ({"nbest": 6}, "nbest=6 needs at least as many beams"),
    ],
)
def test_bad_settings_are_user_errors(smoke_run: Path, overrides: dict, message: str) -> None:
    cfg = OmegaConf.structured(EvaluateConfig(run_dir=str(smoke_run), **overrides))
    with pytest.raises(Seq2SeqError, match=message):
        evaluate(cfg)


def test_a_run_without_the_checkpoint_asked_for_says_what_it_has(smoke_run, tmp_path) -> None:
    run = tmp_path / "run"  # a training before its first validation: no checkpoint yet
    run.mkdir()
    for name in ("config.yaml", "src.model", "tgt.model"):
        shutil.copy(smoke_run / name, run / name)
    with pytest.raises(Seq2SeqError, match="has no best.pt yet: a training writes it at its"):
        load_run(run)
    shutil.copy(smoke_run / "last.pt", run / "last.pt")
    with pytest.raises(Seq2SeqError, match="has no best.pt yet: it has checkpoint=last$"):
        load_run(run)
    with pytest.raises(Seq2SeqError, match=f"averaged.pt: seq2seq-average run_dir={run} makes"):
        load_run(run, "averaged")
    assert load_run(run, "last").step > 0


def test_a_split_without_the_source_language_is_a_user_error(cs_run: Path) -> None:
    cfg = OmegaConf.structured(EvaluateConfig(run_dir=str(cs_run), split="test_2017_flickr"))
    with pytest.raises(Seq2SeqError, match="test_2017_flickr has no language 'cs'"):
        evaluate(cfg)


def test_pharaoh_aligns_each_target_subword_to_its_strongest_source_subword() -> None:
    attention = np.array(
        [
            [0.7, 0.2, 0.1],  # target 0 -> source 0
            [0.1, 0.1, 0.8],  # target 1 -> source EOS: unaligned
            [0.2, 0.6, 0.2],  # target 2 -> source 1
            [0.0, 0.0, 1.0],  # the EOS row is not a target subword
        ]
    )
    assert pharaoh(attention) == "0-0 1-2"


@pytest.mark.slow
def test_each_decoding_setting_has_its_own_files_and_out_takes_them(
    smoke_run: Path, tmp_path: Path
) -> None:
    """Another alpha or length rule never overwrites an earlier result, and out= takes every
    output (and the TensorBoard events) away from the run folder."""
    src, ref = tmp_path / "few.de", tmp_path / "few.en"
    src.write_text("Ein Hund läuft .\nZwei Männer spielen Fußball .\n", encoding="utf-8")
    ref.write_text("A dog runs .\nTwo men play soccer .\n", encoding="utf-8")
    out = tmp_path / "results"
    common = [f"run_dir={smoke_run}", f"input={src}", f"reference={ref}", f"out={out}"]
    first = result_of(run_evaluate(*common, "beam_size=2", cwd=tmp_path))
    other = ["alpha=1.0", "max_len_a=2", "max_len_b=10", "nbest=2"]
    second = result_of(run_evaluate(*common, "beam_size=2", *other, cwd=tmp_path))
    assert Path(first["hypotheses"]).name == "few.de.best.beam2.hyp"
    assert Path(second["hypotheses"]).name == "few.de.best.beam2.alpha1.len2x+10.nbest2.hyp"
    assert (second["alpha"], second["max_len_a"], second["max_len_b"]) == (1.0, 2.0, 10)
    for result in (first, second):
        assert all(Path(result[key]).parent == out for key in ("hypotheses", "attention"))
    assert (out / "few.de.best.beam2.json").is_file() and (out / "tensorboard").is_dir()
    assert not list((smoke_run / "eval").glob("few.de.*"))
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    refused = run_evaluate(*common[:3], f"out={blocked / 'x'}", cwd=tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"cannot write into {blocked / 'x'}" in refused.stderr


def test_inputs_of_one_name_and_a_checkpoint_from_elsewhere_keep_their_own_results(
    smoke_run: Path, tmp_path: Path
) -> None:
    """a/x.de and b/x.de never overwrite each other's results, nor does a best.pt from outside
    the run overwrite the run's own best's."""
    out, configs = tmp_path / "results", []
    for folder, line in (("a", "Ein Hund läuft ."), ("b", "Zwei Männer spielen .")):
        (tmp_path / folder).mkdir()
        for lang in ("de", "en"):
            (tmp_path / folder / f"x.{lang}").write_text(line + "\n", encoding="utf-8")
        files = {
            key: str(tmp_path / folder / f"x.{lang}")
            for key, lang in (("input", "de"), ("reference", "en"))
        }
        configs.append(EvaluateConfig(run_dir=str(smoke_run), out=str(out), beam_size=1, **files))
    first, second = (evaluate(OmegaConf.structured(cfg)) for cfg in configs)
    assert Path(first["hypotheses"]).name == "x.de.best.beam1.hyp"
    assert Path(second["hypotheses"]).name.startswith("x.de-")
    assert json.loads((out / "x.de.best.beam1.json").read_text())["source"] == first["source"]
    again = evaluate(OmegaConf.structured(configs[0]))
    assert again["hypotheses"] == first["hypotheses"]
    elsewhere = tmp_path / "other" / "best.pt"
    elsewhere.parent.mkdir()
    shutil.copy(smoke_run / "best.pt", elsewhere)
    configs[0].checkpoint = str(elsewhere)
    foreign = evaluate(OmegaConf.structured(configs[0]))
    assert Path(foreign["hypotheses"]).name.startswith("x.de.best-")
    steered = []
    for folder, term in (("a", "puppy"), ("b", "hound")):  # two glossaries of one name
        (tmp_path / folder / "g.tsv").write_text(f"Hund\t{term}\n", encoding="utf-8")
        glossary = str(tmp_path / folder / "g.tsv")
        cfg = replace(configs[0], checkpoint="best", beam_size=2, terms=glossary)
        steered.append(evaluate(OmegaConf.structured(cfg)))
    names = [Path(result["hypotheses"]).name for result in steered]
    assert names[0] == "x.de.best.beam2.terms-g.tsv.hyp" and names[1].startswith("x.de-")
    assert steered[0]["terms"] != steered[1]["terms"]
    kept = json.loads((out / "x.de.best.beam2.terms-g.tsv.json").read_text())
    assert kept["terms"] == steered[0]["terms"]
