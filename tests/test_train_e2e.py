"""End to end: `seq2seq-train experiment=smoke` for every attention choice, what TensorBoard
reads from a smoke run, and resume."""

from __future__ import annotations

import io
import math
import os
import re
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from PIL import Image
from run_helpers import (
    TRAIN_TIMEOUT,
    cli,
    events,
    finish,
    poll,
    request,
    scalars,
    tensorboard_server,
)

from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.monitor import Monitor, _markdown_cell
from seq2seq.storage.manifest import damage
from seq2seq.storage.rundir import TENSORBOARD_DIR

HEADS = 4
ATTENTIONS = [
    ["model/attention=bahdanau"],
    ["model/attention=luong", "model.attention.score=dot"],
    ["model/attention=luong", "model.attention.score=general"],
    ["model/attention=luong", "model.attention.score=concat", "model.attention.input_feed=false"],
    ["model/attention=multihead", f"model.attention.heads={HEADS}"],
]
BAHDANAU = ATTENTIONS[0]  # also the default: the resume test reuses its run
# Half the smoke experiment's epochs: two validations show the loss falling, and resume after one.
EPOCHS = "train.max_epochs=2"
# The other attentions: two validations in a part of the first epoch show their loss falling too.
SHORT = ["train.max_steps=30", "train.validate_every=15"]
SAMPLES = 2  # log.attention_samples of experiment=smoke
TRAIN_SCALARS = {"train/loss", "train/lr", "train/tokens_per_s", "train/grad_norm"}
VALID_SCALARS = {
    f"valid/{name}"
    for name in ("loss", "ppl", "bleu", "chrf", "attention_entropy", "attention_max_weight")
}


def train(run_dir: Path, *overrides: str, wait: bool = True) -> subprocess.Popen | str:
    """`seq2seq-train` in its own process, as a user would."""
    cmd = [
        *cli("train"),
        "experiment=smoke",
        f"hydra.run.dir={run_dir}",
        "log.progress=false",
        # one fp32 product path for every run: products=auto may time its way to either where
        # both are about as fast, and the resume test compares two runs to the float
        "products=onednn",
        *overrides,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        return proc
    out = finish(proc, TRAIN_TIMEOUT)
    assert proc.returncode == 0, out
    return out


def _name(overrides: list[str]) -> str:
    return "-".join(o.split("=")[1] for o in overrides)


@pytest.fixture(scope="module")
def smoke_runs(
    tmp_path_factory: pytest.TempPathFactory, data_dirs: list[str]
) -> Callable[[list[str]], Path]:
    """The run folder of a smoke run with these overrides, trained once for the whole module."""
    runs: dict[str, Path] = {}

    def run(attention: list[str]) -> Path:
        name = _name(attention)
        if name not in runs:
            folder = tmp_path_factory.mktemp(name) / "run"
            train(folder, *data_dirs, *([EPOCHS] if attention == BAHDANAU else SHORT), *attention)
            runs[name] = folder
        return runs[name]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("attention", ATTENTIONS, ids=_name)
def test_smoke_training_learns(smoke_runs, attention: list[str]) -> None:
    run = smoke_runs(attention)
    for name in ("best.pt", "last.pt", "config.yaml", "src.model", "tgt.model", "train.log"):
        assert (run / name).is_file(), name
    losses = scalars(run, "valid/loss")
    assert len(losses) >= 2
    assert losses[-1][1] < losses[0][1], losses
    state = torch.load(run / "best.pt", weights_only=True)
    assert state["step"] > 0 and state["best_bleu"] >= 0

    acc = events(run)
    heads = [f"/head_{h}" for h in range(HEADS)] if "multihead" in _name(attention) else []
    tags = {f"attention/val_{i}{head}" for i in range(SAMPLES) for head in ["", *heads]}
    assert set(acc.Tags()["images"]) == tags
    for tag in tags:  # every validation draws the same sentences
        assert [e.step for e in acc.Images(tag)] == [step for step, _ in losses], tag


@pytest.mark.slow
def test_smoke_run_logs_what_tensorboard_shows(smoke_runs, multi30k_dir: Path) -> None:
    run = smoke_runs(BAHDANAU)
    acc = events(run)
    validations = [e.step for e in acc.Scalars("valid/loss")]
    assert len(validations) >= 2
    assert TRAIN_SCALARS | VALID_SCALARS | {"hparams/best_valid_bleu"} <= set(acc.Tags()["scalars"])
    for tag in VALID_SCALARS | {"hparams/best_valid_bleu"}:
        assert [e.step for e in acc.Scalars(tag)] == validations, tag
    value = {tag: [e.value for e in acc.Scalars(tag)] for tag in VALID_SCALARS}
    for chrf, bleu in zip(value["valid/chrf"], value["valid/bleu"], strict=True):
        assert 0 < chrf <= 100 and 0 <= bleu <= 100
    for entropy, largest in zip(
        value["valid/attention_entropy"], value["valid/attention_max_weight"], strict=True
    ):  # the mean largest weight is at least exp(-mean entropy), and nats are non-negative
        assert entropy >= 0 and math.exp(-entropy) <= largest * (1 + 1e-5) and largest <= 1
    best = [e.value for e in acc.Scalars("hparams/best_valid_bleu")]
    assert best == pytest.approx(list(accumulate(value["valid/bleu"], max)))
    assert best[-1] == pytest.approx(torch.load(run / "best.pt", weights_only=True)["best_bleu"])
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(
        acc.PluginTagToContent("hparams")
    )

    for i in range(SAMPLES):
        images = acc.Images(f"attention/val_{i}")
        assert len({e.step for e in images}) >= 2
        decoded = Image.open(io.BytesIO(images[-1].encoded_image_string))
        assert decoded.size == (images[-1].width, images[-1].height) and decoded.mode == "RGB"

    texts = acc.Tensors("samples/text_summary")
    assert [e.step for e in texts] == validations
    sources, references = read_parallel(
        multi30k_dir / "val.de.gz", multi30k_dir / "val.en.gz", SAMPLES
    )
    for text in texts:  # the same sentences at every validation
        table = text.tensor_proto.string_val[0].decode().splitlines()
        assert table[0] == "| | source | reference | hypothesis |" and len(table) == 2 + SAMPLES
        for row, source, reference in zip(table[2:], sources, references, strict=True):
            assert f" {_markdown_cell(source)} | {_markdown_cell(reference)} | " in row


@pytest.mark.slow
def test_tensorboard_server_lists_the_smoke_runs_attention_images(
    smoke_runs, tmp_path: Path
) -> None:
    run = smoke_runs(BAHDANAU)
    validations = [step for step, _ in scalars(run, "valid/loss")]
    tags = {f"attention/val_{i}" for i in range(SAMPLES)}
    with tensorboard_server(run, tmp_path / "tensorboard.txt") as url:
        found = poll(f"{url}/data/plugin/images/tags", lambda t: TENSORBOARD_DIR in t)
        assert set(found[TENSORBOARD_DIR]) == tags
        query = urllib.parse.urlencode({"run": TENSORBOARD_DIR, "tag": "attention/val_0"})
        images = request(f"{url}/data/plugin/images/images?{query}")
        assert [image["step"] for image in images] == validations

        body = {"startIndex": 0, "sliceSize": 10, "allowedStatuses": ["STATUS_SUCCESS"]}
        groups = poll(f"{url}/data/plugin/hparams/session_groups", lambda g: g, body)
        [group] = groups["sessionGroups"]
        assert group["hparams"]["attention"] == "bahdanau"
        metrics = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        best = torch.load(run / "best.pt", weights_only=True)["best_bleu"]
        assert metrics["hparams/best_valid_bleu"] == pytest.approx(best)


@pytest.mark.slow
def test_multirun_folders_are_flat_and_tensorboard_compares_them(
    tmp_path: Path, data_dirs: list[str]
) -> None:
    """`-m model/attention=bahdanau,luong`: one folder per run directly in the sweep folder (no
    "/" of a group or a path nesting them, no "=" or "," that run_dir= would misread), and the
    HParams tab lists both with their BLEU."""
    sweep = tmp_path / "sweep"
    cmd = [
        *cli("train"),
        "-m",
        "experiment=smoke",
        "train.max_epochs=1",
    ]
    cmd += ["log.progress=false", f"hydra.sweep.dir={sweep}", *data_dirs]
    proc = subprocess.Popen(
        [*cmd, "model/attention=bahdanau,luong"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = finish(proc, TRAIN_TIMEOUT)
    assert proc.returncode == 0, out
    runs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert runs == [
        "0_experiment:smoke__model.attention:bahdanau__train.max_epochs:1",
        "1_experiment:smoke__model.attention:luong__train.max_epochs:1",
    ]
    parser = OverridesParser.create()  # a folder passes back to a command as run_dir=, unquoted
    for run in runs:
        assert parser.parse_override(f"run_dir={sweep / run}").value() == str(sweep / run)
    assert all((sweep / run / "best.pt").is_file() for run in runs)

    with tensorboard_server(sweep, tmp_path / "tensorboard.txt") as url:
        body = {"startIndex": 0, "sliceSize": 10, "allowedStatuses": ["STATUS_SUCCESS"]}
        groups = poll(
            f"{url}/data/plugin/hparams/session_groups",
            lambda g: len(g.get("sessionGroups", [])) == 2,
            body,
        )
    compared = {}
    for group in groups["sessionGroups"]:
        metrics = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        compared[group["hparams"]["attention"]] = metrics["hparams/best_valid_bleu"]
    for run in runs:
        best = torch.load(sweep / run / "best.pt", weights_only=True)["best_bleu"]
        assert compared[run.split("attention:")[1].split("__")[0]] == pytest.approx(best)


@pytest.mark.slow
def test_interrupted_run_resumes_where_it_stopped(
    tmp_path: Path, data_dirs: list[str], smoke_runs
) -> None:
    full = smoke_runs(BAHDANAU)  # the default attention: the run below, uninterrupted
    expected = torch.load(full / "last.pt", weights_only=True)

    run = tmp_path / "run"
    proc = train(run, *data_dirs, EPOCHS, wait=False)
    deadline = time.monotonic() + TRAIN_TIMEOUT
    while not (run / "last.pt").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no last.pt before the run ended or timed out:\n{proc.communicate()[0]}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = finish(proc, 120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert f"rerun seq2seq-train with train.resume=true hydra.run.dir={run} to continue" in out
    stopped = torch.load(run / "last.pt", weights_only=True)
    assert 0 < stopped["step"] < expected["step"]
    # As if the run had logged up to its checkpoint's step and beyond before it died.
    with Monitor(run) as monitor:
        for step in (stopped["step"], stopped["step"] + 1):
            monitor.scalars(step, {"test/marker": float(step)})

    out = train(run, *data_dirs, EPOCHS, "train.resume=true")
    assert f"resumed from last.pt: step {stopped['step']}" in out
    final = torch.load(run / "last.pt", weights_only=True)
    assert (final["step"], final["epoch"]) == (expected["step"], expected["epoch"])
    steps = [step for step, _ in scalars(run, "valid/loss")]
    assert steps == sorted(set(steps)), "a validation step was repeated"
    assert steps == [step for step, _ in scalars(full, "valid/loss")]
    assert scalars(run, "test/marker") == [(stopped["step"], float(stopped["step"]))]
    # Model, optimizer, schedule, random state and data order all resume: the same run, to the
    # float (on the CPU, whose products are deterministic for the same shapes and threads).
    assert scalars(run, "valid/bleu")[-1] == scalars(full, "valid/bleu")[-1]
    assert scalars(run, "valid/loss")[-1] == scalars(full, "valid/loss")[-1]


@pytest.mark.slow
def test_resume_keeps_the_epoch_plan_and_validates_a_step_once(
    tmp_path: Path, data_dirs: list[str]
) -> None:
    """Another batch size is refused in the middle of an epoch and taken from an epoch's end;
    a run stopped by train.max_steps on an epoch's last update is not validated twice there."""
    run = tmp_path / "run"
    out = train(run, *data_dirs, "train.max_steps=5")
    per_epoch = int(re.search(r"(\d+) updates per epoch", out).group(1))
    other = ["train.resume=true", "train.max_steps=10", "train.batch_tokens=999"]
    proc = train(run, *data_dirs, *other, wait=False)
    out = finish(proc, TRAIN_TIMEOUT)
    assert proc.returncode == 1 and "Traceback" not in out, out
    assert "5 updates into epoch 1" in out and "train.batch_tokens 1500 (now 999)" in out
    train(run, *data_dirs, "train.resume=true", f"train.max_steps={per_epoch}")
    out = train(run, *data_dirs, *other[:1], f"train.max_steps={per_epoch + 3}", *other[2:])
    assert "epoch 2 starts with a new plan: train.batch_tokens 1500 (now 999)" in out
    steps = [step for step, _ in scalars(run, "valid/loss")]
    assert steps == [5, per_epoch, per_epoch + 3]


@pytest.mark.slow
def test_precision_auto_is_chosen_logged_and_kept_on_resume(
    tmp_path: Path, data_dirs: list[str]
) -> None:
    run = tmp_path / "run"
    out = train(run, *data_dirs, "precision=auto", "train.max_steps=2")
    line = next(x for x in out.splitlines() if "precision=auto: " in x)
    chosen = torch.load(run / "last.pt", weights_only=True)
    assert chosen["precision"] in ("fp32", "bf16") and f"auto: {chosen['precision']}" in line
    assert chosen["config"]["precision"] == chosen["precision"]  # what ran, not "auto"
    # config.yaml says what ran too: every choice made at the start, and the libraries
    recorded = OmegaConf.load(run / "config.yaml")
    assert recorded.precision == chosen["precision"] and recorded.device == "cpu"
    assert recorded.products in ("onednn", "pytorch") and recorded.train.threads >= 1
    assert recorded.versions.torch == torch.__version__ and damage(run / "manifest.json") == []
    out = train(run, *data_dirs, "precision=auto", "train.max_steps=4", "train.resume=true")
    assert f"auto: {chosen['precision']} (the run's choice before it was resumed)" in out
    assert torch.load(run / "last.pt", weights_only=True)["precision"] == chosen["precision"]
    # training again from the run's own config.yaml takes the same paths without choosing
    again = tmp_path / "again"
    rerun = [*cli("train"), "--config-path", str(run)]
    rerun += ["--config-name", "config", f"hydra.run.dir={again}", "train.max_steps=2"]
    proc = subprocess.Popen(rerun, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = finish(proc, TRAIN_TIMEOUT)
    assert proc.returncode == 0, out
    assert "precision=auto" not in out and "timed on the model's shapes" not in out
    assert OmegaConf.load(again / "config.yaml") == recorded
    assert scalars(again, "valid/loss")[0] == scalars(run, "valid/loss")[0]  # step 2, to the float


def test_existing_run_is_not_overwritten(tmp_path: Path, data_dirs: list[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "last.pt").write_bytes(b"precious")
    proc = train(run, *data_dirs, wait=False)
    out = finish(proc, 120)
    assert proc.returncode == 1
    assert "train.resume=true" in out
    assert (run / "last.pt").read_bytes() == b"precious"


@pytest.mark.parametrize(
    ("files", "resume", "says"),
    [
        (["best.pt"], "true", "holds checkpoints (best.pt), it has no last.pt to resume from"),
        (["checkpoints/step-5.pt", "averaged.pt"], "false", "(averaged.pt, checkpoints/step-5"),
        (["model.safetensors", "release.json", "config.yaml"], "false", "is a release folder"),
        (["config.yaml"], "false", "holds config.yaml that no training wrote"),
        (["src.model", "tgt.model"], "true", "holds src.model, tgt.model that no training"),
    ],
)
def test_a_start_that_would_overwrite_a_folder_is_refused_leaving_it_as_it_was(
    tmp_path: Path, files: list[str], resume: str, says: str
) -> None:
    """Not only last.pt: other checkpoints, a release, a config or tokenizers of the user's are
    refused in one line, before Hydra writes anything there."""
    run = tmp_path / "run"
    for name in files:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"precious")
    proc = train(run, f"train.resume={resume}", "train.max_steps=1", wait=False)
    out = finish(proc, 120)
    assert proc.returncode == 1 and says in out and "hydra.run.dir=" in out, out
    assert len(out.strip().splitlines()) == 1, out
    kept = {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert kept == dict.fromkeys(files, b"precious")


def test_misspelled_override_fails_loudly(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            *cli("train"),
            f"hydra.run.dir={tmp_path}",
            "train.lr_rate=1",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )
    assert proc.returncode != 0
    assert "lr_rate" in proc.stderr + proc.stdout


def test_static_updates_train_as_eager_ones_and_are_recorded(
    tmp_path: Path, data_dirs: list[str]
) -> None:
    """train.cuda_graphs=true on the CPU (the fixed-shape update, uncaptured) trains as the
    eager update does, to the validation loss's rounding (no dropout), resumes, and config.yaml
    records what ran: true, and false where auto found no CUDA."""
    same = ["model.dropout=0", "precision=fp32", "train.max_steps=12", "train.validate_every=12"]
    train(tmp_path / "eager", *data_dirs, *same)
    out = train(
        tmp_path / "static", *data_dirs, *same, "train.cuda_graphs=true", "train.log_every=5"
    )
    assert "update 10" in out and "loss" in out
    assert OmegaConf.load(tmp_path / "eager" / "config.yaml").train.cuda_graphs == "false"
    assert OmegaConf.load(tmp_path / "static" / "config.yaml").train.cuda_graphs == "true"
    (_, eager), (_, static) = (scalars(tmp_path / r, "valid/loss")[0] for r in ("eager", "static"))
    assert static == pytest.approx(eager, rel=1e-3)
    train(tmp_path / "static", *data_dirs, *same[:2], "train.resume=true", "train.max_steps=15")
    assert torch.load(tmp_path / "static" / "last.pt", weights_only=True)["step"] == 15
