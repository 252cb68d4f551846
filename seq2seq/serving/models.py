"""A served model, whatever runs it: its name (its folder's), its card (what ``GET /model`` and
``GET /models`` say) and how to make its translator; and the checks of the folders served."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from seq2seq_lite.rules import beam_problem, largest_beam

from seq2seq.config import DecodeConfig
from seq2seq.config_choices import Backend
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.inference import TranslatorBase
from seq2seq.errors import Seq2SeqError
from seq2seq.model.registry import describe_attention
from seq2seq.storage.rundir import release_facts

log = logging.getLogger("seq2seq.serve")


@dataclass
class ServedModel:
    """A model as requests name it (``"model": name``), with its card, its source tokenizer
    (sentences over max_source_len are refused before they queue), where it runs, and how to make
    its translator for one search setting."""

    name: str
    card: dict[str, Any]
    src_tok: Tokenizer
    device: str
    make_translator: Callable[[DecodeConfig], TranslatorBase]
    tgt_vocab: int  # target subwords: the largest beam is half of them (lite's rules)


def folder_name(folder: str | Path) -> str:
    """The name a folder's model is served under: the folder's own name (``releases/luong/``,
    ``./luong`` and ``runs/../luong`` are all ``luong``)."""
    return Path(os.path.abspath(folder)).name


def same_source(other: DictConfig, first: DictConfig, folder: str, first_folder: str) -> None:
    """Models compared side by side translate one sentence: one source language."""
    if other.data.src_lang != first.data.src_lang:
        raise Seq2SeqError(
            f"compare_with: {folder} reads {other.data.src_lang}, {first_folder} reads "
            f"{first.data.src_lang}: models compared side by side translate one sentence"
        )


def check_beams(models: Sequence[ServedModel], beam_size: int, max_beam: int) -> None:
    """The default beam_size each model's vocabulary allows (else refused in one line); a
    max_beam above a model's largest beam is capped there, with a log line: a request asking
    more is refused naming the largest beam."""
    for model in models:
        if problem := beam_problem(beam_size, model.tgt_vocab):
            raise Seq2SeqError(f"model {model.name!r}: {problem}")
        top = largest_beam(model.tgt_vocab)
        if max_beam > top:
            log.warning(
                "max_beam=%d is more than the %d target subwords of model %r allow: its requests "
                "get beam_size up to %d",
                max_beam,
                model.tgt_vocab,
                model.name,
                top,
            )


def refuse_duplicate_names(folders: list[str]) -> None:
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


def model_card(
    folder: Path, cfg: DictConfig, step: int, precision: str, backend: Backend
) -> dict[str, Any]:
    """What ``GET /model`` answers: the release's facts, the name it is served under, the
    languages, the attention (its registry name, and in a few words, e.g. ``luong (general,
    scaled)``), the step, the precision it is served in and what runs it."""
    attention = cfg.model.attention
    return {
        **release_facts(folder),
        "name": folder_name(folder),
        "src_lang": cfg.data.src_lang,
        "tgt_lang": cfg.data.tgt_lang,
        "attention": attention.name,
        "attention_label": describe_attention(attention),
        "step": step,
        "precision": precision,
        "backend": backend.value,
    }
