"""Recipes (experiment configs), kept checkpoints and their average, ensembles, the time budget,
and the results table script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from run_helpers import REPO, cli, composed, run, scalars
from torch.utils.tensorboard import SummaryWriter

from seq2seq.commands.keys import check_command_line
from seq2seq.config import DecodeConfig
from seq2seq.decoding.inference import Translator
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.checkpoint import kept_steps, load_checkpoint
from seq2seq.runtime.migrate import upgrade_saved_config
from seq2seq.runtime.run_folder import load_run
from seq2seq.storage.manifest import write_manifest
from seq2seq.storage.rundir import KEPT_DIR, kept_checkpoint


def test_recipes_compose() -> None:
    default, de_en = composed(), composed("experiment=multi30k_de_en")
    assert OmegaConf.to_container(default) == OmegaConf.to_container(de_en)  # the default recipe
    en_de = composed("experiment=multi30k_en_de")
    assert (en_de.data.src_lang, en_de.data.tgt_lang) == ("en", "de")
    cpu = composed("experiment=multi30k_de_en_cpu")
    assert cpu.train.max_minutes == 30 and cpu.precision.value == "auto"
    rows = {  # row: (attention, input feeding, scaled score, normalizer, coverage)
        "bahdanau": ("bahdanau", None, None, "softmax", False),  # no input feeding in its flow
        "bahdanau_conditional": ("bahdanau", None, None, "softmax", False),
        "luong": ("luong", True, True, "softmax", None),
        "luong_unscaled": ("luong", True, False, "softmax", None),
        "luong_nofeed": ("luong", False, True, "softmax", None),
        "luong_concat": ("luong", True, True, "softmax", None),
        "multihead": ("multihead", True, None, "softmax", None),
        "multihead_1head": ("multihead", True, None, "softmax", None),
        "multihead_wide": ("multihead", True, None, "softmax", None),
        "local_m": ("local_m", True, True, "softmax", None),
        "local_p": ("local_p", True, True, "softmax", None),
        "sparsemax": ("bahdanau", None, None, "sparsemax", False),
        "entmax15": ("bahdanau", None, None, "entmax15", False),
        "coverage": ("bahdanau", None, None, "softmax", True),
        "coverage_score": ("bahdanau", None, None, "softmax", True),
    }
    for row, expected in rows.items():
        cfg = composed("experiment=attention_comparison", f"+compare={row}")
        attention = cfg.model.attention
        keys = ("input_feed", "scale", "normalizer", "coverage")
        found = tuple(attention.get(key) for key in keys)
        found = tuple(getattr(v, "value", v) for v in found)
        assert (attention.name, *found) == expected, row
        assert (cfg.model.hidden_size, cfg.train.max_steps) == (256, 800)  # one footing for all
        assert attention.get("conditional", False) == (row == "bahdanau_conditional")
        assert attention.get("heads") == {
            "multihead": 8,
            "multihead_1head": 1,
            "multihead_wide": 8,
        }.get(row)
        assert attention.size == (512 if row == "multihead_wide" else 256)
        assert cfg.train.coverage_weight == (1.0 if row == "coverage" else 0.0)
    sweep = OmegaConf.load(REPO / "configs/experiment/attention_comparison.yaml")
    params = sweep.hydra.sweeper.params
    assert params["+compare"].split(",") == list(rows) and params["train.seed"] == "1,2"
    en_fr = composed("experiment=attention_comparison_en_fr", "+compare=local_p")
    assert (en_fr.data.src_lang, en_fr.data.tgt_lang, en_fr.model.hidden_size) == ("en", "fr", 256)
    assert en_fr.log.alignment_pairs is not None


def test_a_sweep_resumed_finds_its_jobs_folders() -> None:
    """A job's folder is named by its settings, not by train.resume: the interrupted sweep,
    given again with train.resume=true and its hydra.sweep.dir, resumes each job in place."""
    job = ["experiment=smoke", "train.seed=2", "data.source=/x"]
    with initialize_config_module("seq2seq.configs", version_base=None):
        names = [
            compose("config", overrides, return_hydra_config=True).hydra.job.override_dirname
            for overrides in (job, [*job, "train.resume=true"])
        ]
    assert names[0] == names[1] == "experiment:smoke__train.seed:2"


@pytest.mark.slow
def test_kept_checkpoints_average_into_one_that_evaluates(tmp_path: Path, data_dirs) -> None:
    folder = tmp_path / "run"
    run(
        "train",
        "experiment=smoke",
        "log.progress=false",
        f"hydra.run.dir={folder}",
        "train.keep_checkpoints=2",
        "train.max_steps=40",  # four validations inside the first epoch
        "train.validate_every=10",
        *data_dirs,
    )
    steps = kept_steps(folder)
    bleu = dict(scalars(folder, "valid/bleu"))
    assert 2 <= len(steps) <= 4 and all(steps[s] == pytest.approx(bleu[s]) for s in steps)
    latest = sorted(bleu)[-2:]
    best = sorted(bleu, key=lambda s: -bleu[s])[:2]
    assert set(steps) == set(latest) | set(best)  # the 2 latest and the 2 best
    assert sorted(p.name for p in (folder / KEPT_DIR).glob("*.pt")) == sorted(
        kept_checkpoint(folder, s).name for s in steps
    )
    out = run("average", f"run_dir={folder}", "n=2", "select=last")
    averaged = load_checkpoint(folder / "averaged.pt")
    a, b = (load_checkpoint(kept_checkpoint(folder, s))["model"] for s in latest)
    for name in ("decoder.output_layer.weight", "encoder.rnn.weight_hh_l0"):
        torch.testing.assert_close(averaged["model"][name], (a[name] + b[name]) / 2)
    assert "averaged steps" in out
    result = run("evaluate", f"run_dir={folder}", "checkpoint=averaged", "split=val", "beam_size=1")
    assert json.loads(result.splitlines()[-1])["checkpoint"].endswith("averaged.pt")
    # the run's averaged.pt replaced by another average is said, with what scored the old one
    out = run("average", f"run_dir={folder}", "n=1", "select=last")
    replaced = f"replacing {folder / 'averaged.pt'}, the average of steps {latest}, with that of "
    assert replaced in out
    assert f"steps {latest[-1:]}; eval/val.averaged.beam1.json scored the old" in out
    assert "replacing" not in run("average", f"run_dir={folder}", "n=1", "select=last")
    run("export", f"run_dir={folder}", "checkpoint=averaged", f"out={tmp_path / 'release'}")
    card = (tmp_path / "release" / "README.md").read_text()
    assert f"| weights | the average of the checkpoints of updates {latest[-1]} |" in card


@pytest.mark.slow
def test_an_ensemble_of_a_model_with_itself_is_the_model(smoke_run: Path) -> None:
    single = run("evaluate", f"run_dir={smoke_run}", "split=val", "beam_size=3")
    double = run(
        "evaluate", f"run_dir={smoke_run}", f"ensemble=[{smoke_run}]", "split=val", "beam_size=3"
    )
    assert f") in an ensemble of 2 (with {smoke_run}), beam 3" in double  # the log says so
    single, double = (json.loads(out.splitlines()[-1]) for out in (single, double))
    assert double["bleu"] == pytest.approx(single["bleu"], abs=1e-9)
    assert double["runs"] == [str(smoke_run.resolve())] * 2
    eval_dir = smoke_run / "eval"  # the ensemble has its own files; the single model's stay
    assert json.loads((eval_dir / "val.best.beam3.json").read_text())["runs"] == single["runs"]
    assert json.loads((eval_dir / "val.ensemble2.best.beam3.json").read_text()) == double


@pytest.mark.slow
def test_an_ensemble_needs_the_same_tokenizers(smoke_run: Path, tmp_path, data_dirs) -> None:
    other = tmp_path / "other"
    run(
        "train",
        "experiment=smoke",
        "log.progress=false",
        f"hydra.run.dir={other}",
        "train.max_steps=2",
        "data.tokenizer.vocab_size=300",
        *data_dirs,
    )
    proc = subprocess.run(
        [
            *cli("translate"),
            f"run_dir={smoke_run}",
            f"ensemble=[{other}]",
        ],
        input="Ein Hund.\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "other tokenizers" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_time_budget_stops_and_validates(tmp_path: Path, data_dirs) -> None:
    folder = tmp_path / "run"
    out = run(
        "train",
        "experiment=smoke",
        "log.progress=false",
        f"hydra.run.dir={folder}",
        "train.max_minutes=0.05",
        *data_dirs,
    )
    last = load_checkpoint(folder / "last.pt")
    assert 3 <= last["seconds"] < 60 and last["epoch"] < 4, out
    assert [step for step, _ in scalars(folder, "valid/loss")][-1] == last["step"]


@pytest.mark.slow
def test_results_table_and_pictures(smoke_run: Path, tmp_path: Path, multi30k_url: str) -> None:
    run("evaluate", f"run_dir={smoke_run}")  # test_2016_flickr, beam 5
    run("evaluate", f"run_dir={smoke_run}", f"ensemble=[{smoke_run}]")
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/results.py",
            str(smoke_run),
            str(tmp_path / "not-a-run"),
            "--pictures",
            str(tmp_path),
            "--data-source",
            multi30k_url,
            "--data-root",
            str(tmp_path / "multi30k"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.splitlines()
    assert table[0].startswith("| direction | attention | test BLEU")
    row, ensemble = [line for line in table if line.startswith("| de→en")]
    cells = [cell.strip() for cell in row.split("|")]
    assert float(cells[3]) > 0 and float(cells[5]) > 0  # test BLEU, lowercased tokenized BLEU
    cells = [cell.strip() for cell in ensemble.split("|")]
    result = smoke_run / "eval" / "test_2016_flickr.ensemble2.best.beam5.json"
    assert cells[2].endswith("ensemble of 2")
    assert float(cells[3]) == pytest.approx(json.loads(result.read_text())["bleu"], abs=0.005)
    for name in ("val_bleu_minutes.png", "attention_best.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_results_curve_leaves_out_the_pause_of_a_resume(tmp_path: Path, monkeypatch) -> None:
    """Two event files of one run, an hour apart: the curve counts training minutes only, and
    the earlier file's validation at or after the resumed step is dropped."""
    sys.path.insert(0, str(REPO / "scripts"))
    import results

    tb = tmp_path / "tensorboard"
    tb.mkdir()
    now = time.time()
    for name, start, events in [
        (
            "1000.host.1.0",
            now,
            [("train/loss", 50, 60), ("valid/bleu", 100, 120), ("valid/bleu", 200, 240)],
        ),
        ("2000.host.2.0", now + 3600, [("train/loss", 150, 30), ("valid/bleu", 200, 90)]),
        ("3000.host.3.0", now + 7200, [("eval/test_bleu", 200, 10)]),  # seq2seq-evaluate's
    ]:
        monkeypatch.setattr(time, "time", lambda start=start: start)  # the file's first event
        with SummaryWriter(str(tmp_path / name)) as writer:
            for tag, step, seconds in events:
                writer.add_scalar(tag, 1.0 + step, step, walltime=start + seconds)
        [written] = (tmp_path / name).iterdir()
        written.rename(tb / f"events.out.tfevents.{name}")
    monkeypatch.undo()
    points = results.curve(tmp_path)
    assert [bleu for _, bleu in points] == [101.0, 201.0]
    assert points[0][0] == pytest.approx(2.0)  # 120 s into the first file
    assert points[1][0] == pytest.approx(4.0 + 1.5)  # the first file's 240 s, then 90 s


def test_a_model_card_states_the_models_own_scores(smoke_run: Path, tmp_path: Path) -> None:
    """An ensemble's, an int8, another checkpoint's (a file of the same name rewritten since,
    or an evaluation from before checkpoints were fingerprinted) or given files' evaluation
    writes into the run's folder too; the card states the model's own score on a split."""
    from types import SimpleNamespace

    from seq2seq.commands.export import facts, model_card
    from seq2seq.storage.manifest import sha256_file

    folder = tmp_path / "run"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("eval"))
    (folder / "eval").mkdir()
    base = {"signature": "s", "chrf": 1.0, "chrf_signature": "c", "beam_size": 5, "sentences": 9}
    weights = sha256_file(folder / "best.pt")
    for name, bleu, runs, precision, split, sha in [
        ("test_2016_flickr.best.beam5", 10.0, [folder], "fp32", "x", weights),
        ("test_2016_flickr.ensemble2.best.beam5", 20.0, [folder, "x"], "fp32", "x", None),
        ("test_2017_flickr.best.beam5.int8", 9.0, [folder], "int8", "x", weights),
        ("test_2018_flickr.best.beam5", 8.0, [folder], "fp32", "x", "0" * 64),
        ("test_2017_mscoco.best.beam5", 7.0, [folder], "fp32", "x", None),
        ("mine.best.beam5", 6.0, [folder], "fp32", None, weights),
    ]:
        result = {**base, "bleu": bleu, "runs": [str(r) for r in runs], "precision": precision}
        result |= {"split": split, "checkpoint_sha256": sha, "ppl": bleu / 2}
        (folder / "eval" / f"{name}.json").write_text(json.dumps(result))
    cfg = OmegaConf.load(folder / "config.yaml")
    model = torch.nn.Linear(2, 2)
    run = SimpleNamespace(
        cfg=cfg, run_dir=folder, model=model, step=1, checkpoint=folder / "best.pt"
    )
    stated = facts(run, "best")
    assert stated["test"] == {"test_2016_flickr": {**base, "bleu": 10.0, "ppl": 5.0}}
    card = model_card(stated)
    assert "BLEU 10.00 (`s`), chrF 1.00 (`c`), the references' perplexity 5.00 |" in card


def test_one_precision_key() -> None:
    assert composed("precision=bf16").precision.value == "bf16"


def test_a_run_config_written_before_the_renames_reads_in_todays_keys() -> None:
    old = {
        "data": {"name": "multi30k", "src_lang": "de", "tgt_lang": "en"},
        "model": {"hidden_size": 8, "input_feed": False, "attention": {"name": "luong"}},
        "train": {"precision": "bf16"},
    }
    cfg = upgrade_saved_config(OmegaConf.create(old))
    assert (cfg.data.kind, cfg.precision) == ("multi30k", "bf16")
    assert cfg.model.attention.input_feed is False and "input_feed" not in cfg.model
    old["model"]["attention"]["name"] = "bahdanau"  # its data flow has no input feeding
    cfg = upgrade_saved_config(OmegaConf.create(old))
    assert "input_feed" not in cfg.model and "input_feed" not in cfg.model.attention


@pytest.mark.parametrize(
    ("command", "override", "today"),
    [
        ("config", "train.precision=bf16", "the top-level precision"),
        ("config", "log.alignment_gold=pairs.txt", "log.alignment_pairs"),
        ("evaluate", "source=x", "data_source"),
        ("align", "source=a.en", "src_file"),
        ("align", "target=b.fr", "tgt_file"),
    ],
)
def test_an_old_key_name_is_refused_with_todays(command: str, override: str, today: str) -> None:
    """One name, one meaning: an old spelling on a command line says which key took its place."""
    with pytest.raises(Seq2SeqError, match=today):
        check_command_line(command, ["run_dir=r", override] if command != "config" else [override])


def test_a_saved_config_with_old_key_names_reads_in_todays() -> None:
    saved = upgrade_saved_config(
        OmegaConf.create(
            {
                "model": {"attention": {"name": "bahdanau"}},
                "data": {"kind": "custom"},
                "precision": "fp32",
                "log": {"alignment_gold": "p.txt"},
            }
        )
    )
    assert saved.log.alignment_pairs == "p.txt" and "alignment_gold" not in saved.log


def test_a_run_folder_written_before_the_old_spellings_went_loads_and_translates_the_same(
    smoke_run: Path, tmp_path: Path
) -> None:
    """Main before this change saved ``train.precision: null`` and ``log.alignment_gold: null``
    in every run's config.yaml and checkpoints: such a folder loads through the one migration."""
    folder = tmp_path / "old"
    shutil.copytree(smoke_run, folder, ignore=shutil.ignore_patterns("eval", "tensorboard"))
    cfg = OmegaConf.load(folder / "config.yaml")
    cfg.train.precision, cfg.log.alignment_gold = None, None
    OmegaConf.save(cfg, folder / "config.yaml")
    manifest = folder / "manifest.json"  # as that main wrote it, with those keys
    write_manifest(manifest, [folder / name for name in json.loads(manifest.read_text())])
    search = DecodeConfig(beam_size=2)
    said = []
    for trained in (load_run(smoke_run), load_run(folder)):
        translator = Translator.from_run(trained, search)
        said.append([translator.best_text(t) for t in translator.translate(["Ein Hund läuft."])])
    assert said[0] == said[1] and said[0][0]
    migrated = load_run(folder).cfg  # in today's keys only
    assert "precision" not in migrated.train and "alignment_gold" not in migrated.log
    assert migrated.precision == cfg.precision
