"""The models one server serves: run_dir's (the default) and each ``compare_with=`` folder's, named
by their folders, on one engine; and their cards, what ``GET /model`` and ``GET /models`` say."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from seq2seq.config import ServeConfig
from seq2seq.decoding.inference import TrainedRun, load_run, open_model, release_facts
from seq2seq.errors import Seq2SeqError
from seq2seq.model.registry import describe_attention
from seq2seq.runtime.engine import Engine


@dataclass
class ServedModel:
    """A model as requests name it (``"model": name``), with its run and its card."""

    name: str
    run: TrainedRun
    card: dict[str, Any]


def folder_name(folder: str | Path) -> str:
    """The name a folder's model is served under: the folder's own name (``releases/luong/``,
    ``./luong`` and ``runs/../luong`` are all ``luong``)."""
    return Path(os.path.abspath(folder)).name


def open_models(cfg: ServeConfig) -> tuple[Engine, list[ServedModel]]:
    """The engine and the models to serve, run_dir's first; refused in one line before any is
    loaded: two folders of one name, or compare_with= with ensemble=; and a folder that does not
    load, or reads another source language than run_dir's."""
    if cfg.compare_with and cfg.ensemble:
        raise Seq2SeqError(
            "compare_with= serves each folder as its own model and ensemble= decodes several "
            "as one: give one or the other"
        )
    if cfg.compare_with and not OmegaConf.is_missing(cfg, "run_dir"):
        _refuse_duplicate_names([cfg.run_dir, *cfg.compare_with])
    engine, run = open_model(cfg, "serve")
    models = [ServedModel(folder_name(cfg.run_dir), run, model_card(run, engine))]
    for folder in cfg.compare_with:
        try:
            other = load_run(folder, cfg.checkpoint, engine)
        except Seq2SeqError as e:
            raise Seq2SeqError(f"compare_with: {e}") from None
        if other.cfg.data.src_lang != run.cfg.data.src_lang:
            raise Seq2SeqError(
                f"compare_with: {folder} reads {other.cfg.data.src_lang}, {cfg.run_dir} reads "
                f"{run.cfg.data.src_lang}: models compared side by side translate one sentence"
            )
        if cfg.compile:
            engine.compile(other.model)
        models.append(ServedModel(folder_name(folder), other, model_card(other, engine)))
    return engine, models


def _refuse_duplicate_names(folders: list[str]) -> None:
    """Every model is named by its folder, so two folders of one name cannot both be served."""
    seen: dict[str, str] = {}
    for folder in folders:
        name = folder_name(folder)
        if name in seen:
            raise Seq2SeqError(
                f"run_dir and compare_with= name two models {name!r} ({seen[name]} and "
                f"{folder}): each model is served under its folder's name, so give the folders "
                "different names"
            )
        seen[name] = folder


def model_card(run: TrainedRun, engine: Engine) -> dict[str, Any]:
    """What ``GET /model`` answers: the release's facts, the name it is served under, the
    languages, the attention (its registry name, and in a few words, e.g. ``luong (general,
    scaled)``), the step and the precision it is served in."""
    attention = run.cfg.model.attention
    return {
        **release_facts(run.run_dir),
        "name": folder_name(run.run_dir),
        "src_lang": run.cfg.data.src_lang,
        "tgt_lang": run.cfg.data.tgt_lang,
        "attention": attention.name,
        "attention_label": describe_attention(attention),
        "step": run.step,
        "precision": engine.precision.value,
    }
