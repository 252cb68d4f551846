"""`seq2seq-align` on a trained smoke run (forced decoding, links, AER, both directions), the
alignment probe of training (valid/aer in TensorBoard), and the statistical aligner's script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from align_helpers import pairs_of, run_align
from omegaconf import OmegaConf
from run_helpers import cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.config import DecodeConfig
from seq2seq.decoding.forced import ForcedAligner, segment
from seq2seq.decoding.inference import Translator
from seq2seq.runtime.run_folder import load_run
from seq2seq.storage.manifest import write_manifest
from seq2seq.storage.rundir import CONFIG_FILE, MANIFEST

ROOT = Path(__file__).resolve().parents[1]


def labelled_the_other_way(run: Path, dest: Path) -> Path:
    """A copy of ``run`` whose config names the other direction (its manifest written anew):
    a stand-in for a run of the other direction, without training one."""
    shutil.copytree(run, dest)
    cfg = OmegaConf.load(dest / CONFIG_FILE)
    cfg.data.src_lang, cfg.data.tgt_lang = cfg.data.tgt_lang, cfg.data.src_lang
    OmegaConf.save(cfg, dest / CONFIG_FILE)
    names = json.loads((dest / MANIFEST).read_text())
    write_manifest(dest / MANIFEST, [dest / name for name in names])
    return dest


@pytest.mark.slow
def test_forced_attention_is_the_searchs_attention_on_its_own_output(smoke_run: Path) -> None:
    """Teacher forcing a greedy translation attends exactly where greedy search did."""
    torch.set_num_threads(1)
    run = load_run(smoke_run)
    sources = ["ein mann fährt fahrrad .", "zwei hunde spielen im schnee ."]
    translator = Translator.from_run(run, DecodeConfig(beam_size=1))
    best = [t.hypotheses[0] for t in translator.translate(sources)]
    forced = ForcedAligner(run.model, run.src_tok, run.tgt_tok)
    src = [segment(run.src_tok, s.split()) for s in sources]
    tgt = [type(src[0])(h.tokens, list(range(len(h.tokens)))) for h in best]
    pieces = forced.piece_attention(src, tgt)
    for weights, hypothesis, s in zip(pieces, best, src, strict=True):
        assert weights.shape == (len(hypothesis.tokens) + 1, len(s.ids) + 1)
        np.testing.assert_allclose(weights, hypothesis.attention.numpy(), atol=1e-5)


@pytest.mark.slow
def test_align_writes_links_and_scores_them(smoke_run: Path, multi30k_dir: Path, tmp_path):
    pairs, lines = pairs_of(multi30k_dir, tmp_path)
    out, weights = tmp_path / "links.txt", tmp_path / "weights.jsonl"
    proc = run_align(
        f"run_dir={smoke_run}",
        f"input={pairs}",
        f"output={out}",
        f"weights={weights}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["pairs"] == 40 and "aer" not in result
    links = out.read_text(encoding="utf-8").splitlines()
    assert len(links) == 40
    for line, link_line in zip(lines, links, strict=True):
        src, tgt = (side.split() for side in line.split("|||"))
        for item in link_line.split():
            i, j = map(int, item.split("-"))
            assert 0 <= i < len(src) and 0 <= j < len(tgt)
    record = json.loads(weights.read_text(encoding="utf-8").splitlines()[0])
    w = np.array(record["weights"])
    assert w.shape == (len(record["target"]), len(record["source"]) + 1)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=2e-3)

    # its own links as sure gold: AER 0; shifted by one word: nothing right
    gold = tmp_path / "gold.talp"
    gold.write_text(
        "".join(
            " ".join(f"{int(x.split('-')[0]) + 1}-{int(x.split('-')[1]) + 1}" for x in line.split())
            + "\n"
            for line in links
        )
    )
    same = run_align(f"run_dir={smoke_run}", f"input={pairs}", f"gold={gold}", cwd=tmp_path)
    scores = json.loads(same.stdout.splitlines()[-1])
    assert scores["aer"] == 0.0 and scores["precision"] == scores["recall"] == 1.0
    assert same.stdout.splitlines()[:-1] == links  # links on stdout without output=


@pytest.mark.slow
def test_parallel_files_swap_and_both_directions(smoke_run: Path, multi30k_dir, tmp_path):
    pairs, lines = pairs_of(multi30k_dir, tmp_path)
    de, en = tmp_path / "s.de", tmp_path / "s.en"
    de.write_text("".join(x.split(" ||| ")[0] + "\n" for x in lines), encoding="utf-8")
    en.write_text("".join(x.split(" ||| ")[1] + "\n" for x in lines), encoding="utf-8")
    one = run_align(f"run_dir={smoke_run}", f"input={pairs}", cwd=tmp_path)
    files = run_align(f"run_dir={smoke_run}", f"src_file={de}", f"tgt_file={en}", cwd=tmp_path)
    assert one.stdout == files.stdout and len(one.stdout.splitlines()) == 40  # links alone
    # the same pairs written en ||| de, read with swap=true: the same links, flipped
    swapped = tmp_path / "swapped.txt"
    swapped.write_text("".join(f"{b} ||| {a}\n" for a, b in (x.split(" ||| ") for x in lines)))
    back = run_align(f"run_dir={smoke_run}", f"input={swapped}", "swap=true", cwd=tmp_path)
    flip = [
        " ".join(sorted(f"{j}-{i}" for i, j in (x.split("-") for x in line.split())))
        for line in one.stdout.splitlines()
    ]
    assert [" ".join(sorted(x.split())) for x in back.stdout.splitlines()] == flip
    # with a reverse run (the same weights, labelled en->de): the intersection is inside the union
    reverse = labelled_the_other_way(smoke_run, tmp_path / "reverse")
    found = {}
    for how in ("intersection", "grow_diag_final", "union"):
        proc = run_align(
            f"run_dir={smoke_run}",
            f"input={pairs}",
            f"reverse_run_dir={reverse}",
            f"symmetrize={how}",
            f"output={how}.align",
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["symmetrize"] == how  # the summary alone
        found[how] = [set(x.split()) for x in (tmp_path / f"{how}.align").read_text().splitlines()]
    for inter, grow, union in zip(*found.values(), strict=True):
        assert inter <= grow <= union


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("input=pairs.txt",), "give run_dir=<a run or release folder>"),
        (("input=missing.txt",), "input=missing.txt does not exist"),
        (("input=.",), "input=. is a folder, not a file"),
        (("input=pairs.txt", "output=pairs.txt"), "output=pairs.txt is also input="),
        (("input=pairs.txt", "reverse_run_dir=RUN"), "reverse_run_dir translates de->en; a run"),
        (("input=pairs.txt", "src_file=pairs.txt"), "give the pairs as input="),
        (("input=pairs.txt", "gold=short.talp"), "1 lines of links for 40 sentence pairs"),
        (("input=pairs.txt", "threshold=0"), "threshold=0.0 must be above 0 and at most 1"),
        (("input=pairs.txt", "methd=argmax"), "methd"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(smoke_run, multi30k_dir, tmp_path, args, message):
    pairs_of(multi30k_dir, tmp_path)
    (tmp_path / "short.talp").write_text("1-1\n")
    run_arg = () if message.startswith("give run_dir") else (f"run_dir={smoke_run}",)
    args = [a.replace("=RUN", f"={smoke_run}") for a in args]  # the same direction again
    proc = run_align(*run_arg, *args, cwd=tmp_path)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_training_logs_aer_at_every_validation(multi30k_dir, data_dirs, tmp_path) -> None:
    pairs, lines = pairs_of(multi30k_dir, tmp_path, count=20)
    gold = tmp_path / "gold.talp"  # a diagonal of sure links, as far as both sides reach
    gold.write_text(
        "".join(
            " ".join(
                f"{k}-{k}"
                for k in range(
                    1, min(len(x.split(" ||| ")[0].split()), len(x.split(" ||| ")[1].split())) + 1
                )
            )
            + "\n"
            for x in lines
        )
    )
    run = tmp_path / "run"
    cmd = [
        *cli("train"),
        "experiment=smoke",
        "data.train_limit=500",
        "train.max_steps=6",
        "train.validate_every=3",
        "log.progress=false",
        f"log.alignment_pairs={pairs}",
        f"log.alignment_links={gold}",
        f"hydra.run.dir={run}",
        *data_dirs,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    for tag in ("valid/aer", "valid/alignment_precision", "valid/alignment_recall"):
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [3, 6]
        assert all(0.0 <= e.value <= 1.0 for e in events)
    assert [e.step for e in acc.Scalars("hparams/aer")] == [3, 6]
    assert "AER" in (run / "train.log").read_text(encoding="utf-8")


@pytest.mark.slow
def test_training_refuses_half_a_gold_pair(data_dirs, tmp_path) -> None:
    cmd = [
        *cli("train"),
        "experiment=smoke",
        "log.alignment_pairs=x",
        f"hydra.run.dir={tmp_path / 'run'}",
        *data_dirs,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "go together" in proc.stdout + proc.stderr


def test_statistical_aligner_script_scores_with_the_same_aer(tmp_path) -> None:
    pytest.importorskip("eflomal", reason="eflomal is an optional extra: pip install -e '.[align]'")
    rng = np.random.default_rng(0)
    words = [f"w{k}" for k in range(12)]
    lines = [" ".join(rng.choice(words, size=5, replace=False)) for _ in range(100)]
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("".join(f"{x} ||| {x.upper()}\n" for x in lines))
    gold = tmp_path / "gold.talp"
    gold.write_text("".join(" ".join(f"{k}-{k}" for k in range(1, 6)) + "\n" for _ in lines))
    # the same words, upper-cased, in the same places: the links are the diagonal
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "statistical_align.py"),
        "--pairs",
        str(pairs),
        "--gold",
        str(gold),
        "--out",
        str(tmp_path / "out"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["intersection"]["aer"] < 0.2
    links = (tmp_path / "out" / "forward.gold.align").read_text().splitlines()
    assert len(links) == 100


def test_statistical_aligner_links_training_lines_in_their_own_words(tmp_path) -> None:
    pytest.importorskip("eflomal", reason="eflomal is an optional extra: pip install -e '.[align]'")
    rng = np.random.default_rng(1)
    words = [f"w{k}" for k in range(12)]
    lines = [list(rng.choice(words, size=4, replace=False)) for _ in range(60)]
    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    src.write_text("".join(f"{a}, {b} {c} {d}.\n" for a, b, c, d in lines))  # 4 words, 6 tokens
    tgt.write_text("".join(" ".join(x).upper() + "\n" for x in lines))
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "statistical_align.py"),
        "--raw-pairs",
        str(src),
        str(tgt),
        "--train",
        str(src),
        str(tgt),
        "--out",
        str(out),
        "--train-links",
        str(tmp_path / "train.align"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    links = (tmp_path / "train.align").read_text().splitlines()
    assert len(links) == 60
    pairs = [(int(x.split("-")[0]), int(x.split("-")[1])) for line in links for x in line.split()]
    assert max(i for i, _ in pairs) <= 3 and max(j for _, j in pairs) <= 3  # whitespace words
    assert sum(i == j for i, j in pairs) / len(pairs) > 0.8
    assert (out / "pairs.txt").read_text().splitlines()[0].count(" ||| ") == 1
    # the pairs are the training lines again: each distinct pair is aligned once
    assert json.loads(proc.stdout.splitlines()[-1])["sentences"] == len(set(map(tuple, lines)))
    assert len((out / "intersection.talp").read_text().splitlines()) == 60


@pytest.mark.slow
def test_alignment_table_script(smoke_run: Path, multi30k_dir: Path, tmp_path: Path) -> None:
    pairs, lines = pairs_of(multi30k_dir, tmp_path, count=20)
    gold = tmp_path / "gold.talp"
    gold.write_text("1-1\n" * 20)
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "alignment_table.py"),
        "--pairs",
        str(pairs),
        "--gold",
        str(gold),
        "--run",
        f"smoke={smoke_run}",
        "--reverse",
        f"smoke={smoke_run}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    methods = result["runs"]["smoke"]["methods"]
    assert {"argmax, shift +0", "threshold 0.3, shift -1", "both, intersection"} <= set(methods)
    # the diagonal links every target word once, the first to the first source word (gold):
    # AER = 1 - 2 * 20 / (target words + 20)
    targets = sum(len(line.split(" ||| ")[1].split()) for line in lines)
    assert result["diagonal"] == pytest.approx(1 - 40 / (targets + 20))
