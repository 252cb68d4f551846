"""seq2seq-distill: the teacher's beam output for every source of a split, as a corpus data=custom
reads (and the originals followed by it), equal to what seq2seq-evaluate decodes; an interrupted
run takes up its chunks, removed once the corpus is written; chunks of other settings are refused
in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from run_helpers import TRAIN_TIMEOUT, cli, command, gz_lines, started, wait_for_file
from sacrebleu.metrics import BLEU

from seq2seq.decoding.chunked import Nearest
from seq2seq.decoding.splits import split_pairs
from seq2seq.errors import DataError
from seq2seq.runtime.run_folder import load_run

SEARCH = ["split=valid", "beam_size=2", "chunk_sentences=400"]


def distill(smoke_run: Path, out: Path, *overrides: str) -> subprocess.CompletedProcess:
    return command("distill", f"run_dir={smoke_run}", f"out={out}", *overrides)


@pytest.mark.slow
def test_the_distilled_corpus_is_the_teachers_beam_output(smoke_run: Path, tmp_path: Path) -> None:
    """Killed once two of its three chunks are kept: chunks of other settings are refused, the
    rerun decodes the last one only, and once the corpus is written its chunks are removed."""
    out = tmp_path / "distilled"
    killed = started("distill", f"run_dir={smoke_run}", f"out={out}", *SEARCH)
    wait_for_file(out / ".parts" / "00001.txt", killed)
    killed.kill()
    killed.communicate()
    other = distill(smoke_run, out, "split=valid", "beam_size=3", "chunk_sentences=400")
    assert other.returncode == 1 and "holds chunks of other settings" in other.stderr
    assert "Traceback" not in other.stderr
    proc = distill(smoke_run, out, *SEARCH)
    assert proc.returncode == 0, proc.stderr
    decoded = [line for line in proc.stderr.splitlines() if "] chunk " in line]
    assert len(decoded) == 1 and "chunk 3/3" in decoded[0], proc.stderr
    assert not (out / ".parts").exists()
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    sources, targets = gz_lines(out / "valid.de.gz"), gz_lines(out / "valid.en.gz")
    assert len(sources) == len(targets) == result["sentences"] > 400  # several chunks
    evaluated = subprocess.run(
        [*cli("evaluate"), f"run_dir={smoke_run}", "split=valid"]
        + ["beam_size=2", f"out={tmp_path / 'eval'}"],
        capture_output=True,
        text=True,
        timeout=TRAIN_TIMEOUT,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    hypotheses = json.loads(evaluated.stdout.strip().splitlines()[-1])["hypotheses"]
    assert targets == Path(hypotheses).read_text(encoding="utf-8").split("\n")[:-1]
    mixed = gz_lines(out / "valid_mixed.en.gz")
    assert mixed[len(targets) :] == targets and len(mixed) == 2 * len(targets)
    assert gz_lines(out / "valid_mixed.de.gz") == sources + sources


@pytest.mark.slow
def test_pick_closest_keeps_the_hypothesis_nearest_the_reference(
    smoke_run: Path, tmp_path: Path
) -> None:
    """Seq-Inter: of the teacher's 2 best, each line keeps the one of the higher sentence BLEU
    against the reference, which is sometimes not the best one."""
    best, closest = tmp_path / "best", tmp_path / "closest"
    for out, pick in ((best, []), (closest, ["pick=closest", "nbest=2"])):
        proc = distill(smoke_run, out, *SEARCH, *pick)
        assert proc.returncode == 0, proc.stderr
    assert json.loads((closest / "distill.json").read_text())["pick"] == "closest"
    tops, nears = gz_lines(best / "valid.en.gz"), gz_lines(closest / "valid.en.gz")
    references = gz_lines(closest / "valid_mixed.en.gz")[: len(nears)]  # the originals first
    bleu = BLEU(effective_order=True)
    for top, near, reference in zip(tops, nears, references, strict=True):
        assert bleu.sentence_score(near, [reference]).score >= (
            bleu.sentence_score(top, [reference]).score
        )
    assert sum(top != near for top, near in zip(tops, nears, strict=True)) > 0


def test_nearest_picks_the_highest_sentence_bleu_and_the_first_of_equals() -> None:
    nearest = Nearest(["a man rides a horse .", "two dogs play ."])
    assert nearest.pick(0, ["a man walks .", "a man rides a horse ."]) == "a man rides a horse ."
    assert nearest.pick(1, ["cats", "birds"]) == "cats"
    assert nearest.pick(1, []) == ""


def test_distill_needs_an_out_folder_and_a_search(tmp_path: Path) -> None:
    for overrides, says in (
        ([], "give out=<a folder for the distilled corpus>"),
        ([f"out={tmp_path / 'x'}", "sampling=true"], "leave out sampling"),
        ([f"out={tmp_path / 'x'}", "pick=closest"], "pick=closest chooses among"),
    ):
        proc = subprocess.run(
            [*cli("distill"), f"run_dir={tmp_path}", *overrides],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 1 and says in proc.stderr, proc.stderr


def test_a_split_may_name_another_corpus_files(smoke_run, multi30k_dir, tmp_path) -> None:
    """``split=<prefix>`` reads ``<prefix>.<lang>.gz`` too, whatever the teacher's corpus (a
    Multi30k teacher took it for a Multi30k split name)."""
    run = load_run(smoke_run)
    prefix = str(multi30k_dir / "val")
    got = split_pairs(run, run.cfg.data, prefix, tmp_path)
    assert got == (prefix, multi30k_dir / "val.de.gz", multi30k_dir / "val.en.gz")
    with pytest.raises(DataError, match="neither .*nothing.de nor"):
        split_pairs(run, run.cfg.data, str(tmp_path / "nothing"), tmp_path)


def test_a_split_not_found_says_what_to_give_and_an_unknown_one_does_not(
    smoke_run, tmp_path, monkeypatch
) -> None:
    """Relative corpus paths are taken from the current directory: where the files are not
    found, the hint names what to give (both commands that read splits have the keys); an
    unknown split's name is not a matter of place."""
    run = load_run(smoke_run)
    monkeypatch.chdir(tmp_path)
    data = OmegaConf.merge(run.cfg.data, {"root": "elsewhere", "source": "nowhere"})
    with pytest.raises(DataError, match="run from where training was started, or give data_s"):
        split_pairs(run, data, "test_2016_flickr", tmp_path)
    for place, given in ((str(tmp_path / "nowhere"), False), ("nowhere", True)):  # clear
        data = OmegaConf.merge(run.cfg.data, {"root": "elsewhere", "source": place})
        with pytest.raises(DataError, match=r"^could not fetch [^;]*$"):
            split_pairs(run, data, "test_2016_flickr", tmp_path, given=given)
    with pytest.raises(DataError, match="^unknown Multi30k split 'test_2099'; splits are: [^;]*$"):
        split_pairs(run, data, "test_2099", tmp_path)


@pytest.mark.slow
def test_a_split_that_is_not_there_leaves_no_out_folder(smoke_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "distilled"
    proc = distill(smoke_run, out, f"split={tmp_path / 'nothing'}")
    assert proc.returncode == 1 and "nothing.de nor" in proc.stderr
    assert not out.exists()  # not even the chunks' folder


@pytest.mark.slow
def test_an_out_folder_that_holds_the_split_is_refused(smoke_run, multi30k_dir, tmp_path) -> None:
    """The split's own files would be overwritten, and beside a plain ``x.en`` the distilled
    ``x.en.gz`` would never be read: both refused in one line, the files untouched."""
    packed, plain = tmp_path / "packed", tmp_path / "plain"
    packed.mkdir(), plain.mkdir()
    for lang in ("de", "en"):
        (packed / f"x.{lang}.gz").write_bytes((multi30k_dir / f"val.{lang}.gz").read_bytes())
        (plain / f"x.{lang}").write_text("\n".join(gz_lines(packed / f"x.{lang}.gz")[:20]) + "\n")
    proc = distill(smoke_run, packed, f"split={packed / 'x'}")
    assert proc.returncode == 1 and "would overwrite the split's own" in proc.stderr, proc.stderr
    proc = distill(smoke_run, plain, f"split={plain / 'x'}")
    assert proc.returncode == 1 and f"holds {plain / 'x.de'}, which data" in proc.stderr
    assert sorted(p.name for p in plain.iterdir()) == ["x.de", "x.en"]
    assert (packed / "x.en.gz").read_bytes() == (multi30k_dir / "val.en.gz").read_bytes()
