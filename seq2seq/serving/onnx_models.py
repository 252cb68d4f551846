"""``backend=onnx``: release folders served from their ONNX graphs (``seq2seq-export onnx=true``)
on onnxruntime, searched by the torch-free translator of ``lite/`` (the same greedy and beam
search, in numpy), behind the same API, page, probes and metrics as the PyTorch backend."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from seq2seq_lite.release import GRAPHS
from seq2seq_lite.steering import LineSteering

from seq2seq.config import DecodeConfig, Precision
from seq2seq.config_choices import Backend
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.hypothesis import Hypothesis
from seq2seq.decoding.inference import Translation, TranslatorBase
from seq2seq.decoding.settings import SEARCH_KEYS
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.run_folder import read_config
from seq2seq.serving.models import ServedModel, model_card, same_source
from seq2seq.serving.settings import ONNX_VARIANTS, ServeConfig
from seq2seq.storage.rundir import (
    CONFIG_FILE,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    release_facts,
)

if TYPE_CHECKING:
    from seq2seq_lite import Translator as LiteTranslator


class OnnxTranslator(TranslatorBase):
    """A release's exported graphs searched by the lite translator (its search setting given),
    its translations as the PyTorch `Translator` gives them."""

    def __init__(
        self, lite: LiteTranslator, src_tok: Tokenizer, tgt_tok: Tokenizer, search: DecodeConfig
    ) -> None:
        super().__init__(src_tok, tgt_tok, search)
        self.lite = lite

    def translate(
        self,
        lines: Sequence[str],
        seed: int | None = None,
        steer: Sequence[LineSteering | None] | None = None,
    ) -> list[Translation]:
        """The lite search's n-best lists (``seed``: lite samples nothing, so none is read)."""
        return [
            Translation(
                list(found.source_ids),
                [
                    Hypothesis(list(h.tokens), float(h.score), torch.from_numpy(h.attention))
                    for h in found.hypotheses
                ],
                found.warnings,
            )
            for found in self.lite.translate(list(lines), steer)
        ]


def open_onnx_models(cfg: ServeConfig) -> tuple[str, list[ServedModel]]:
    """run_dir's and compare_with's releases on onnxruntime; refused in one line before any is
    loaded: a folder without graphs, no lite translator (the settings only PyTorch has are the
    schema's rules: commands/rules.py)."""
    folders = [Path(cfg.run_dir), *map(Path, cfg.compare_with)]
    for folder in folders:
        if not (folder / GRAPHS).is_file():
            raise Seq2SeqError(
                f"{folder} has no ONNX graphs ({GRAPHS}): backend=onnx serves releases, "
                f"exported with seq2seq-export run_dir={folder} out=<a new folder> onnx=true"
            )
    lite = _lite()
    variant = ONNX_VARIANTS[Precision(cfg.precision)]
    models = [_onnx_model(folder, lite, variant, cfg.precision) for folder in folders]
    first = read_config(folders[0] / CONFIG_FILE)
    for folder in folders[1:]:
        same_source(read_config(folder / CONFIG_FILE), first, str(folder), str(folders[0]))
    return f"onnxruntime on the cpu, the {variant} graphs", models


def _lite() -> ModuleType:
    """The torch-free translator's package, or one line saying how to install it."""
    try:
        importlib.import_module("onnxruntime")  # lite's package imports it at a graph's load
        return importlib.import_module("seq2seq_lite")
    except ImportError as e:
        raise Seq2SeqError(
            f"backend=onnx needs the translator of lite/ and onnxruntime ({e}): "
            "pip install -e '.[onnx]' -e ./lite in the seq2seq checkout"
        ) from None


def _onnx_model(
    folder: Path, lite: ModuleType, variant: str, precision: Precision | str
) -> ServedModel:
    """One release's graphs, loaded once; each search setting gets its own translator on them."""
    try:
        base = lite.Translator.load(folder, int8=variant == "int8")
    except lite.ReleaseError as e:
        raise Seq2SeqError(str(e)) from None
    cfg = read_config(folder / CONFIG_FILE)
    step = release_facts(folder).get("step", 0)
    card = model_card(folder, cfg, step, Precision(precision).value, Backend.onnx)
    src_tok, tgt_tok = (
        Tokenizer.load(folder / SRC_TOKENIZER),
        Tokenizer.load(folder / TGT_TOKENIZER),
    )

    def translator(search: DecodeConfig) -> TranslatorBase:
        # every search setting: lite's search reads its own and leaves the rest
        settings = {**base.search, **{k: getattr(search, k) for k in SEARCH_KEYS}}
        lite_translator = lite.Translator(folder, base.graphs, settings)
        return OnnxTranslator(lite_translator, src_tok, tgt_tok, search)

    return ServedModel(card["name"], card, src_tok, "cpu", translator, tgt_tok.vocab_size)
