"""The models one server serves, run_dir's (the default) and each ``compare_with=`` folder's, on
the backend ``backend=`` names: PyTorch on the folders' weights, or onnxruntime on releases'
graphs."""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import OmegaConf

from seq2seq.config_choices import Backend
from seq2seq.decoding.graphed import SearchGraphs
from seq2seq.decoding.inference import Translator, open_model
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import TrainedRun, load_run
from seq2seq.serving.models import (
    ServedModel,
    check_beams,
    model_card,
    refuse_duplicate_names,
    same_source,
)
from seq2seq.serving.onnx_models import open_onnx_models
from seq2seq.serving.settings import ServeConfig


def open_models(
    cfg: ServeConfig, make_engine: Callable[[], Engine]
) -> tuple[str, list[ServedModel]]:
    """Where the models run (one line for the log) and the models, run_dir's first, on the
    engine ``make_engine`` makes where the backend runs PyTorch; refused in one line before any
    is loaded: two folders of one name; and a folder that does not load, or reads another source
    language than run_dir's."""
    if cfg.compare_with and not OmegaConf.is_missing(cfg, "run_dir"):
        refuse_duplicate_names([cfg.run_dir, *cfg.compare_with])
    where, models = BACKENDS[Backend(cfg.backend)](cfg, make_engine)
    check_beams(models, cfg.beam_size, cfg.max_beam)
    return where, models


def _torch_models(
    cfg: ServeConfig, make_engine: Callable[[], Engine]
) -> tuple[str, list[ServedModel]]:
    """The folders' weights in PyTorch, on one engine."""
    engine = make_engine()
    run = open_model(cfg, engine)
    models = [_torch_model(run, engine)]
    for folder in cfg.compare_with:
        try:
            other = load_run(folder, cfg.checkpoint, engine)
        except Seq2SeqError as e:
            raise Seq2SeqError(f"compare_with: {e}") from None
        same_source(other.cfg, run.cfg, folder, cfg.run_dir)
        if cfg.compile:
            engine.compile(other.model)
        models.append(_torch_model(other, engine))
    return engine.describe(), models


def _torch_model(run: TrainedRun, engine: Engine) -> ServedModel:
    card = model_card(run.run_dir, run.cfg, run.step, engine.precision.value, Backend.torch)
    graphs = SearchGraphs.where_they_run(engine)  # one set for every search setting asked for
    return ServedModel(
        card["name"],
        card,
        run.src_tok,
        str(engine.device),
        lambda search: Translator.from_run(run, search, engine, graphs),
        run.tgt_tok.vocab_size,
    )


Opener = Callable[[ServeConfig, Callable[[], Engine]], tuple[str, list[ServedModel]]]
BACKENDS: dict[Backend, Opener] = {
    Backend.torch: _torch_models,
    Backend.onnx: lambda cfg, make_engine: open_onnx_models(cfg),  # onnxruntime's own threads
}
