"""`seq2seq-export`: a release folder that runs anywhere and cannot run code when loaded.

It holds the weights as safetensors (tensors only, never pickle), the resolved config, the two
sentencepiece models, a model card (README.md) with the facts behind the model, the same facts as
release.json, and a manifest of sizes and SHA-256 that every loader checks first, so a tampered
file is refused. Every command that takes ``run_dir=`` takes a release folder too.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import safetensors.torch
from omegaconf import OmegaConf

from seq2seq.commands.configs import ExportConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.config import DecodeConfig
from seq2seq.data.readers import MULTI30K_LICENCE, open_reader
from seq2seq.errors import Seq2SeqError
from seq2seq.model.registry import describe_attention
from seq2seq.runtime.browser import BROWSER_DIR, require_npm, write_browser
from seq2seq.runtime.checkpoint import load_checkpoint
from seq2seq.runtime.onnx_export import export_graphs, require_exporter
from seq2seq.runtime.run_folder import TrainedRun, load_run
from seq2seq.storage.manifest import sha256_file, write_manifest
from seq2seq.storage.permissions import as_umask_allows
from seq2seq.storage.rundir import (
    CHECKPOINTS,
    CONFIG_FILE,
    EVAL_DIR,
    GRAPHS_DIR,
    LAST,
    MANIFEST,
    MODEL_CARD,
    RELEASE_FACTS,
    RELEASE_WEIGHTS,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    overrides_file,
    release_facts,
)
from seq2seq.storage.staging import staged_folder

log = logging.getLogger("seq2seq.export")


def _default_search(result: dict[str, Any]) -> bool:
    """Whether an evaluation used the default length penalty and length rule."""
    default = DecodeConfig()
    settings = ("alpha", "max_len_a", "max_len_b")
    return all(result.get(key, getattr(default, key)) == getattr(default, key) for key in settings)


# what a release states that its folder cannot show again (no log, no checkpoint, no evaluations):
# exported from a release, the new one carries them over
CARRIED = (
    "data",
    "best_valid_bleu",
    "training_minutes",
    "device",
    "recipe",
    "started_from",
    "started_from_checkpoint",
    "averaged",
    "test",
    "licence",
)


def facts(run: TrainedRun, checkpoint: str) -> dict[str, Any]:
    """What the model card states: language pair, data, recipe, size, scores, training; from a
    release, what it stated of its training (CARRIED)."""
    found = _run_facts(run, checkpoint)
    stated = release_facts(run.run_dir)
    return {**found, **{key: stated[key] for key in CARRIED if key in stated}}


def _run_facts(run: TrainedRun, checkpoint: str) -> dict[str, Any]:
    """The facts a training run's folder shows."""
    cfg, folder = run.cfg, run.run_dir
    overrides = overrides_file(folder)
    places = ("data.source", "data.root", "data.cache_dir", "data.file", "data.path", "hydra.")
    places += ("--config-",)  # a rerun from a config file of this machine
    recipe = (
        [
            o
            for o in OmegaConf.to_container(OmegaConf.load(overrides))
            if not o.startswith((*places, "train.resume"))
        ]
        if overrides is not None
        else []
    )
    last = load_checkpoint(folder / LAST) if (folder / LAST).is_file() else {}
    name = checkpoint if checkpoint in CHECKPOINTS else Path(checkpoint).stem
    started = OmegaConf.select(cfg, "train.init_from")
    weights = sha256_file(run.checkpoint)
    tests = {}
    for result in sorted((folder / EVAL_DIR).glob(f"*.{name}.beam*.json")):
        scores = json.loads(result.read_text())
        if scores.get("checkpoint_sha256") != weights:  # of other weights, or not known whose
            continue
        if scores.get("split") is None:  # files given to evaluate, not a split of a corpus
            continue
        if scores.get("precision", "fp32") != "fp32":  # the card gives the model's own score
            continue
        if scores.get("coverage_penalty") or not _default_search(scores):  # ... of the plain search
            continue
        keys = ("bleu", "signature", "chrf", "chrf_signature", "beam_size", "sentences")
        found = {key: scores[key] for key in keys}
        if "ppl" in scores:  # evaluations from before it was measured have none
            found["ppl"] = scores["ppl"]
        tests[result.stem.split(".")[0]] = found
    reader = open_reader(cfg.data)
    data, licence = reader.describe(), reader.licence()
    return {
        "src_lang": cfg.data.src_lang,
        "tgt_lang": cfg.data.tgt_lang,
        "data": data,
        "attention": describe_attention(cfg.model.attention),
        "parameters": sum(p.numel() for p in run.model.parameters()),
        "step": run.step,
        "best_valid_bleu": last.get("best_bleu"),
        "training_minutes": round(last["seconds"] / 60, 1) if "seconds" in last else None,
        "device": last.get("device"),  # checkpoints from before it was kept: unknown
        "recipe": " ".join(["seq2seq-train", *recipe]),
        "started_from": started,  # train.init_from, if any, and which of its weights
        "started_from_checkpoint": started and OmegaConf.select(cfg, "train.init_checkpoint"),
        "averaged": sorted(map(int, load_checkpoint(run.checkpoint).get("averaged", {}))) or None,
        "test": tests,
        "licence": licence,
    }


def _test_rows(tests: dict[str, dict[str, Any]]) -> list[str]:
    """The model card's rows of test scores, one a split."""

    def signature(text: str) -> str:  # a table cell: its pipes escaped
        return text.replace("|", "\\|")

    rows = [
        f"| {split} (beam {t['beam_size']}) | BLEU {t['bleu']:.2f} "
        f"(`{signature(t['signature'])}`), chrF {t['chrf']:.2f} "
        f"(`{signature(t['chrf_signature'])}`)"
        + (f", the references' perplexity {t['ppl']:.2f} |" if "ppl" in t else " |")
        for split, t in tests.items()
    ]
    return rows or ["| test scores | not measured before export (run seq2seq-evaluate) |"]


def model_card(f: dict[str, Any]) -> str:
    """README.md of a release folder."""
    pair = f"{f['src_lang']}→{f['tgt_lang']}"
    valid = f"{f['best_valid_bleu']:.2f}" if f["best_valid_bleu"] is not None else "?"
    lines = [
        f"# seq2seq {pair}: a bidirectional-GRU encoder with {f['attention']} attention",
        "",
        "| | |",
        "|---|---|",
        f"| language pair | {pair} |",
        f"| data | {f['data']} |",
        f"| recipe | `{f['recipe']}` |",
        f"| parameters | {f['parameters'] / 1e6:.2f} M |",
        f"| training | {f['step']} updates, {f['training_minutes'] or '?'} minutes on "
        f"{f['device'] or '?'}; best validation BLEU {valid} |",
    ]
    if f.get("started_from"):
        weights = f.get("started_from_checkpoint") or "best"  # runs from before it was a key
        lines.append(f"| started from | `{f['started_from']}` (its {weights} weights) |")
    if f.get("averaged"):  # seq2seq-average's weights
        steps = ", ".join(map(str, f["averaged"]))
        lines.append(f"| weights | the average of the checkpoints of updates {steps} |")
    lines += _test_rows(f["test"])
    lines += [
        "",
        "## Licence of the data",
        "",
        f.get("licence", MULTI30K_LICENCE),  # releases before the facts held it
        "",
        "## Use",
        "",
        "```bash",
        "# from a checkout of seq2seq: its lite/ (seq2seq-lite) is not on PyPI",
        "pip install torch /path/to/seq2seq /path/to/seq2seq/lite",
        "seq2seq-translate run_dir=<this folder>          # a prompt, or a filter on a pipe",
        "seq2seq-evaluate run_dir=<this folder> input=src.txt reference=ref.txt",
        "seq2seq-serve run_dir=<this folder> port=8000   # HTTP API and a web page",
        "```",
        "",
        f"`{RELEASE_WEIGHTS}` holds tensors only (safetensors): loading it runs no code. "
        f"`{MANIFEST}` lists every file's size and SHA-256, checked before loading.",
    ]
    if f.get("onnx"):
        lines += onnx_section(f["onnx"])
    if f.get("browser"):
        lines += [
            "",
            "## In the browser",
            "",
            f"`{f['browser']}/` translates in a web browser with no server behind it; serve the "
            f"folder as static files, e.g. `python -m http.server -d {f['browser']}`, and open it.",
        ]
    return "\n".join(lines) + "\n"


def onnx_section(files: list[str]) -> list[str]:
    """The model card's lines on the ONNX graphs of a release (``onnx=true``)."""
    return [
        "",
        "## ONNX",
        "",
        f"The encoder and one decoder step as ONNX graphs, fp32 and int8, in `{GRAPHS_DIR}/` "
        f"(`{GRAPHS_DIR}/graphs.json` names their inputs and outputs): "
        + ", ".join(f"`{name}`" for name in files)
        + ". Without torch:",
        "",
        "```bash",
        "pip install /path/to/a/checkout/of/seq2seq/lite   # numpy, onnxruntime, sentencepiece",
        "seq2seq-lite <this folder> --beam 5 < source.txt > translations.txt",
        "```",
    ]


def page_card(run: TrainedRun, name: str, stated: dict[str, Any]) -> dict[str, Any]:
    """The card the browser page shows, as seq2seq-serve's GET /models gives it."""
    keys = ("src_lang", "tgt_lang", "step")
    return {
        "name": name,
        **{key: stated[key] for key in keys},
        "attention": run.cfg.model.attention.name,
        "attention_label": stated["attention"],
        "precision": "fp32",
        "backend": "browser",
    }


def export(cfg: ExportConfig) -> Path:
    """Write the release folder of ``cfg.run_dir``; return its path."""
    out = Path(cfg.out)
    if out.exists() and any(out.iterdir()):
        raise Seq2SeqError(f"{out} exists and is not empty: choose a new folder for the release")
    if cfg.onnx:
        require_exporter()  # before anything is written
    if cfg.browser:
        require_npm()
    run = load_run(cfg.run_dir, cfg.checkpoint)
    with staged_folder(out) as staging:  # a release is whole or absent: Ctrl-C leaves none
        _write_release(run, cfg, staging, out.name)
    log.info("wrote the release of %s (%s) into %s", run.run_dir, run.checkpoint.name, out)
    return out


def _write_release(run: TrainedRun, cfg: ExportConfig, out: Path, title: str) -> None:
    """The release's files into ``out``; ``title``: the name of the folder it becomes."""
    safetensors.torch.save_model(run.model, str(out / RELEASE_WEIGHTS))
    as_umask_allows(out / RELEASE_WEIGHTS)  # safetensors writes it 0600
    config = OmegaConf.masked_copy(run.cfg, ["model", "data", "train"])
    config.data = open_reader(config.data).portable()
    OmegaConf.save(config, out / CONFIG_FILE)
    for name in (SRC_TOKENIZER, TGT_TOKENIZER):
        shutil.copyfile(run.run_dir / name, out / name)
    stated = facts(run, cfg.checkpoint)
    files = [out / name for name in (RELEASE_WEIGHTS, CONFIG_FILE, SRC_TOKENIZER, TGT_TOKENIZER)]
    if cfg.onnx:
        graph_facts = {k: stated[k] for k in ("src_lang", "tgt_lang", "attention", "step")}
        graph_facts |= {"src_tokenizer": SRC_TOKENIZER, "tgt_tokenizer": TGT_TOKENIZER}
        graphs = export_graphs(run.model, out / GRAPHS_DIR, DecodeConfig(), graph_facts)
        stated["onnx"] = sorted(p.relative_to(out).as_posix() for p in graphs)
        files += graphs
    if cfg.browser:
        files += write_browser(out, page_card(run, title, stated))
        stated["browser"] = BROWSER_DIR
    (out / RELEASE_FACTS).write_text(json.dumps(stated, indent=1, ensure_ascii=False))
    (out / MODEL_CARD).write_text(model_card(stated), encoding="utf-8")
    files += [out / RELEASE_FACTS, out / MODEL_CARD]
    write_manifest(out / MANIFEST, files)


main = hydra_command("export")(export)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
