"""The results table and its two pictures, from whatever run folders exist.

Each run folder should have been evaluated on the test split with beam 5 (``seq2seq-evaluate
run_dir=...``; ``checkpoint=averaged`` after ``seq2seq-average`` is preferred when present). Runs
whose command differs only in ``train.seed`` form one row: mean ± std over seeds. From the checkout
root::

    python scripts/results.py runs/* --pictures docs --data-source /path/to/multi30k

prints a Markdown table; with ``--pictures``, also writes validation BLEU against wall-clock minutes
per run (``val_bleu_minutes.png``) and the attention heatmap of the best run on one test sentence
(``attention_best.png``). The lowercased, tokenized BLEU (the literature's measure) lowercases,
Moses-normalises and tokenizes output and references with sacremoses, which reproduces the
official ``data/task1/tok/*.lc.norm.tok.*`` references of Multi30k line for line.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sacrebleu
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from omegaconf import OmegaConf
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.data.corpus import read_parallel, split_files
from seq2seq.data.readers import open_reader
from seq2seq.decoding.heatmap import attention_figure
from seq2seq.languages import is_cjk
from seq2seq.runtime.checkpoint import load_checkpoint
from seq2seq.storage.rundir import BEST, CONFIG_FILE, EVAL_DIR, LAST, TENSORBOARD_DIR, split_file

IGNORED = (
    "data.source",
    "data.root",
    "data.cache_dir",
    "data.file",
    "data.path",
    "hydra.",
    "train.seed",
    "train.resume",
    "log.",
)


@dataclass
class Run:
    """What one run folder tells."""

    folder: Path
    row: str  # the command without its seed
    seed: int
    direction: str
    attention: str
    test: dict[str, Any]  # seq2seq-evaluate's result object
    val_bleu: float
    parameters: int
    minutes: float
    device: str
    curve: list[tuple[float, float]]  # (minutes, validation BLEU)


def command(folder: Path) -> tuple[str, int]:
    """The training command of a run (from Hydra's record), without data locations and seed."""
    overrides_file = folder / ".hydra" / "overrides.yaml"
    overrides = (
        OmegaConf.to_container(OmegaConf.load(overrides_file)) if overrides_file.is_file() else []
    )
    kept = [o for o in overrides if not o.lstrip("+~").startswith(IGNORED)]
    seed = int(OmegaConf.load(folder / CONFIG_FILE).train.seed)
    return " ".join(["seq2seq-train", *kept]), seed


def test_name(folder: Path) -> str:
    """The name of a run's test split in its eval/ files: "test" where the run keeps its test
    split (tab-separated and dataset corpora), else the configured split (test_2016_flickr)."""
    cfg = OmegaConf.load(folder / CONFIG_FILE)
    if split_file(folder, "test", cfg.data.src_lang).is_file():
        return "test"
    return Path(str(cfg.data.test or "test_2016_flickr")).name


def test_result(folder: Path) -> dict[str, Any] | None:
    """The beam-5 result on the run's test split, the averaged checkpoint's if there is one."""
    for checkpoint in ("averaged", "best"):
        path = folder / EVAL_DIR / f"{test_name(folder)}.{checkpoint}.beam5.json"
        if path.is_file():
            return {**json.loads(path.read_text()), "checkpoint_name": checkpoint}
    return None


def ensemble_results(group: Sequence[Run]) -> list[dict[str, Any]]:
    """Beam-5 test results of ensembles made only of this row's runs (``seq2seq-evaluate
    run_dir=<one> ensemble=[<others>]``), one per set of members, averaged checkpoints preferred."""
    folders = {str(run.folder.resolve()) for run in group}
    found: dict[frozenset[str], dict[str, Any]] = {}
    for checkpoint in ("averaged", "best"):  # as test_result
        pattern = f"{test_name(group[0].folder)}.ensemble*.{checkpoint}.beam5.json"
        for path in sorted(p for run in group for p in (run.folder / EVAL_DIR).glob(pattern)):
            result = json.loads(path.read_text())
            members = frozenset(result.get("runs", []))
            if members and members <= folders:
                found.setdefault(members, {**result, "checkpoint_name": checkpoint})
    return list(found.values())


def curve(folder: Path) -> list[tuple[float, float]]:
    """(minutes of training, validation BLEU) at each validation. A resumed run writes a new
    event file; the pause between files is left out, and events of an earlier file at or after
    the step a later one resumed from are dropped, as TensorBoard does. Files without training
    scalars (seq2seq-evaluate's) are not training time."""
    files = sorted(
        (folder / TENSORBOARD_DIR).glob("events.out.tfevents.*"),
        key=lambda f: float(f.name.split(".")[3]),  # events.out.tfevents.<time>.<host>...
    )
    parts = []  # per file: (first step, [(step, minutes into the file, BLEU)], file minutes)
    for events_file in files:
        acc = EventAccumulator(str(events_file), {"scalars": 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        if "train/loss" not in tags:
            continue
        scalars = [e for tag in tags for e in acc.Scalars(tag)]
        start = acc.FirstEventTimestamp()
        valid = acc.Scalars("valid/bleu") if "valid/bleu" in tags else []
        points = [(e.step, (e.wall_time - start) / 60, e.value) for e in valid]
        minutes = (max(e.wall_time for e in scalars) - start) / 60
        parts.append((min(e.step for e in scalars), points, minutes))
    result, offset = [], 0.0
    for i, (_, points, minutes) in enumerate(parts):
        resumed_at = parts[i + 1][0] if i + 1 < len(parts) else float("inf")
        result += [(offset + m, bleu) for step, m, bleu in points if step < resumed_at]
        offset += minutes
    return result


def read_run(folder: Path) -> Run | None:
    test = test_result(folder)
    if test is None or not (folder / BEST).is_file():
        return None
    cfg = OmegaConf.load(folder / CONFIG_FILE)
    state = load_checkpoint(folder / BEST)
    unique = {t.data_ptr(): t.numel() for t in state["model"].values()}  # tied weights once
    last = load_checkpoint(folder / LAST)
    log = (folder / "train.log").read_text() if (folder / "train.log").is_file() else ""
    device = re.search(r"on (\S+), (\w+)", log)
    row, seed = command(folder)
    attention = cfg.model.attention.name
    if attention == "luong":
        feed = cfg.model.attention.get("input_feed", cfg.model.get("input_feed", True))
        attention += f" ({cfg.model.attention.score}{'' if feed else ', no feed'})"
    return Run(
        folder=folder,
        row=row,
        seed=seed,
        direction=f"{cfg.data.src_lang}→{cfg.data.tgt_lang}{corpus(cfg)}",
        attention=attention,
        test=test,
        val_bleu=float(state["best_bleu"]),
        parameters=sum(unique.values()),
        minutes=float(last.get("seconds", 0.0)) / 60,
        device=f"{device.group(1)} {device.group(2)}" if device else "?",
        curve=curve(folder),
    )


def corpus(cfg: Any) -> str:
    """ ", <corpus>" after the direction, for corpora other than Multi30k."""
    kind = cfg.data.get("kind") or cfg.data.get("name")
    return "" if kind == "multi30k" else f", {open_reader(cfg.data).describe()}"


def tokenized_bleu(hypotheses: Path, references: list[str], lang: str) -> float | None:
    """BLEU of lowercased, Moses-normalised and -tokenized text (as the lc.norm.tok files);
    None for a language Moses does not tokenize (Chinese, Japanese, Korean)."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    if is_cjk(lang):
        return None

    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)

    def prepare(line: str) -> str:
        return tokenizer.tokenize(normalizer.normalize(line.lower()), escape=True, return_str=True)

    hyps = [prepare(line) for line in hypotheses.read_text(encoding="utf-8").splitlines()]
    refs = [prepare(line) for line in references]
    return sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", force=True).score


def mean_std(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def table(runs: list[Run], references: dict[Path, list[str]]) -> str:
    rows: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        rows[run.row].append(run)
    lines = [
        "| direction | attention | test BLEU | chrF | lc tok BLEU | val BLEU | seeds | parameters "
        "| training | command |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, group in sorted(
        rows.items(), key=lambda kv: (kv[1][0].direction, -kv[1][0].test["bleu"])
    ):
        first = group[0]
        tgt = OmegaConf.load(first.folder / CONFIG_FILE).data.tgt_lang
        lc = [
            score
            for r in group
            if r.folder in references
            and (score := tokenized_bleu(Path(r.test["hypotheses"]), references[r.folder], tgt))
            is not None
        ]
        checkpoint = "" if first.test["checkpoint_name"] == "best" else " (averaged)"
        lines.append(
            f"| {first.direction} | {first.attention} | {mean_std([r.test['bleu'] for r in group])}"
            f"{checkpoint} | {mean_std([r.test['chrf'] for r in group])} | "
            f"{mean_std(lc) if lc else '-'} | {mean_std([r.val_bleu for r in group])} | "
            f"{len(group)} | {first.parameters / 1e6:.1f} M | "
            f"{statistics.mean(r.minutes for r in group):.0f} min, {first.device} | `{row}` |"
        )
        for result in ensemble_results(group):
            members = [Path(m) for m in result["runs"]]
            checkpoint = "" if result["checkpoint_name"] == "best" else " (averaged)"
            refs = references.get(first.folder)
            lc_score = tokenized_bleu(Path(result["hypotheses"]), refs, tgt) if refs else None
            tok = "-" if lc_score is None else f"{lc_score:.2f}"
            command = (
                f"seq2seq-evaluate run_dir={members[0].name} "
                f"ensemble=[{','.join(m.name for m in members[1:])}]"
            )
            lines.append(
                f"| {first.direction} | {first.attention}, ensemble of {len(members)} | "
                f"{result['bleu']:.2f}{checkpoint} | {result['chrf']:.2f} | {tok} | - | "
                f"{len(members)} | {len(members)} × {first.parameters / 1e6:.1f} M | "
                f"the runs above | `{command}` |"
            )
    signatures = sorted({f"`{run.test['signature']}`" for run in runs})
    return "\n".join(lines) + f"\n\nsacreBLEU signature: {', '.join(signatures)}"


def picture_curves(runs: list[Run], path: Path) -> None:
    fig = Figure(figsize=(7, 4), dpi=100)
    ax = fig.add_subplot()
    for run in runs:
        if run.curve:
            minutes, bleu = zip(*run.curve, strict=True)
            ax.plot(
                minutes,
                bleu,
                marker=".",
                label=f"{run.direction} {run.attention}, {run.minutes:.0f} min (seed {run.seed})",
            )
    ax.set_xlabel("wall-clock minutes of training")
    ax.set_ylabel("validation BLEU (greedy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(path))


def picture_attention(run: Run, path: Path, sentence: int) -> None:
    records = Path(run.test["attention"]).read_text(encoding="utf-8").splitlines()
    record = json.loads(records[sentence])
    image = attention_figure(
        np.asarray(record["weights"]),
        record["source"],
        record["target"],
        f"{run.direction} {run.attention}, test sentence {sentence}",
    )
    Image.fromarray(image).save(path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (others are skipped)")
    parser.add_argument("--pictures", type=Path, help="write the two PNGs into this folder")
    parser.add_argument("--data-source", help="Multi30k, for the tokenized BLEU's references")
    parser.add_argument("--data-root", default="data/multi30k", help="its download folder")
    parser.add_argument("--sentence", type=int, default=0, help="test sentence of the heatmap")
    args = parser.parse_args(argv)
    runs = [run for folder in args.runs if folder.is_dir() and (run := read_run(folder))]
    if not runs:
        sys.exit("no evaluated run folders among the arguments (run seq2seq-evaluate first)")
    references: dict[Path, list[str]] = {}
    for run in runs:
        cfg = OmegaConf.load(run.folder / CONFIG_FILE)
        kept = split_file(run.folder, "test", cfg.data.tgt_lang)
        if kept.is_file():
            references[run.folder] = kept.read_text(encoding="utf-8").splitlines()
        elif args.data_source:
            cfg.data.source, cfg.data.root = args.data_source, args.data_root
            cfg.data.kind = cfg.data.get("kind") or cfg.data.get("name")
            _, refs = read_parallel(*split_files(cfg.data, "test_2016_flickr"))
            references[run.folder] = refs
    print(table(runs, references))
    if args.pictures:
        args.pictures.mkdir(parents=True, exist_ok=True)
        picture_curves(runs, args.pictures / "val_bleu_minutes.png")
        best = max(runs, key=lambda r: r.test["bleu"])
        picture_attention(best, args.pictures / "attention_best.png", args.sentence)


if __name__ == "__main__":
    main()
