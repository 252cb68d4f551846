"""What the config's types cannot say, refused in one line before any work starts: the ranges
of keys by name (commands/ranges.py), then the rules of each command's schema (keyed by its
class, which a Hydra-composed config keeps). Old spellings of keys are refused by
commands/keys.py with today's name (its REMOVED); a saved run's old config is read by
runtime/migrate.py."""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError
from seq2seq_lite.rules import search_problem
from seq2seq_lite.steering import constraints_problem, glossary_terms

from seq2seq.commands.configs import (
    STEERING_FILES,
    AlignConfig,
    AverageConfig,
    BacktranslateConfig,
    DistillConfig,
    EvaluateConfig,
    ExportConfig,
    SteeringKeys,
)
from seq2seq.commands.ranges import range_problems
from seq2seq.config import (
    Config,
    DecodeConfig,
    InferenceConfig,
    LoadConfig,
    Precision,
    ScheduleName,
)
from seq2seq.config_choices import AlignMethod, Backend, Pick, Symmetrize
from seq2seq.data.readers import open_reader
from seq2seq.errors import DataError, Seq2SeqError, relative_note, require_file
from seq2seq.languages import bleu_tokenizer, check_bleu_tokenizer
from seq2seq.serving.settings import ONNX_VARIANTS, ServeConfig
from seq2seq.storage.rundir import CHECKPOINTS, own_file

log = logging.getLogger("seq2seq.config")


def check_config(cfg: Any, schema: type | None = None) -> None:
    """Refuse, in one line, values that their types allow but that cannot work (a negative size,
    a dropout of 1, the same source and target language), before any work starts. ``schema``:
    the command's, for a config that carries none (a rerun from a run's saved config.yaml)."""
    typed = OmegaConf.get_type(cfg)
    try:
        problems = _problems(cfg, typed if is_dataclass(typed) else schema)
    except InterpolationResolutionError as e:  # ${...} naming what is not there
        raise Seq2SeqError(f"{e.full_key}: {str(e).splitlines()[0]}") from None
    if problems:
        raise Seq2SeqError("; ".join(problems))


# the keys of the commands (evaluate, translate, align, back-translate, serve) that name a file
# they read: each must be a file before the model is loaded
FILES_READ = ("input", "reference", "src_file", "tgt_file", "gold", "mono", *STEERING_FILES)
# training's: before the tokenizers train and the corpus is encoded
TRAINING_FILES_READ = ("train.guided_alignment", "log.alignment_pairs", "log.alignment_links")
FILES_WRITTEN = ("output", "weights")  # the files (not folders) they write


def check_files(cfg: Any) -> None:
    """Refuse, in one line, each file the command reads (FILES_READ) that is not there or is a
    folder, before any work starts (a model loaded for a missing reference, before); training's
    relative paths with the folder they were looked for from. A recipe's made data (data.prepare)
    first: its refusal names the command that makes it, and the folder."""
    if OmegaConf.select(cfg, "data.prepare", default=None):
        open_reader(cfg.data).check()  # custom files' splits, or tsv's data.file
    problems, set_by_recipes = [], []  # training's: often a recipe's relative path, not typed
    for key in (*FILES_READ, *TRAINING_FILES_READ):
        if (path := OmegaConf.select(cfg, key, default=None)) is not None:
            try:
                require_file(path, key)
            except DataError as e:
                problems.append(str(e))
                set_by_recipes += [path] if key in TRAINING_FILES_READ else []
    if problems:
        raise DataError("; ".join(problems) + relative_note(*set_by_recipes))


def _problems(cfg: Any, schema: type | None) -> list[str]:
    """The keys to give; else the ranges broken; else what the schema's rules refuse."""
    if needed := _needed(cfg):  # keys without a default, not given
        return ["give " + " ".join(f"{key}={hint}" for key, hint in needed)]
    if problems := range_problems(cfg):  # the rules may take each value in its range
        return problems
    problems = [
        p for owner, rule in _RULES if schema and issubclass(schema, owner) for p in rule(cfg)
    ]
    if not problems and schema is Config:
        _warn_dot_as_general(cfg)
    return problems


def _needed(cfg: Any) -> list[tuple[str, str]]:
    """The keys without a value (a list's, not its item's), by section, each in its schema's
    order, with what to give for it (its field's hint, `seq2seq.config.needed`)."""
    found = set()
    for key in OmegaConf.missing_keys(cfg):
        section, _, name = re.sub(r"\[\d+\]$", "", key).rpartition(".")
        schema = OmegaConf.get_type(OmegaConf.select(cfg, section) if section else cfg)
        known = (
            {f.name: (i, f) for i, f in enumerate(fields(schema))} if is_dataclass(schema) else {}
        )
        place, field = known.get(name, (len(known), None))
        hint = field.metadata.get("give", "...") if field else "..."
        found.add(((section, place), ".".join(filter(None, (section, name))), hint))
    return [(key, hint) for _, key, hint in sorted(found)]


def _warn_dot_as_general(cfg: Any) -> None:
    """Luong's dot score compares query and memory directly only where both are as wide; else
    the memory is projected first, which is the general score: one warning line says so."""
    model = OmegaConf.select(cfg, "model", default=None)
    score = OmegaConf.select(cfg, "model.attention.score", default=None)
    score = getattr(score, "value", score)  # an enum member in a typed config
    if model is None or score != "dot":
        return
    memory = 2 * (model.get("encoder_size") or model.hidden_size)
    if memory != model.hidden_size:
        log.warning(
            "model.attention.score=%s with a memory of %d (2 x encoder_size) and a decoder of %d: "
            "the memory is projected to %d first, which makes it the general score; "
            "model.encoder_size=%d gives a plain %s score",
            score,
            memory,
            model.hidden_size,
            model.hidden_size,
            model.hidden_size // 2,
            score,
        )


def _training(cfg: Config) -> list[str]:
    """seq2seq-train: values each fine alone that cannot work together (a key an old run's
    saved config lacks is taken as its default)."""
    at = functools.partial(OmegaConf.select, cfg, default=None)
    problems = []
    if Precision(at("precision") or "auto") is Precision.int8:
        problems.append(
            "precision=int8 is for inference (seq2seq-evaluate, -translate, "
            "-serve): train in fp32 or bf16"
        )
    if str(at("train.cuda_graphs") or "auto").lower() not in ("auto", "true", "false"):
        problems.append(f"train.cuda_graphs={at('train.cuda_graphs')} must be auto, true or false")
    if at("train.scheduler.name") == ScheduleName.inverse_sqrt and at("train.scheduler.warmup") < 1:
        problems.append("train.scheduler.name=inverse_sqrt needs train.scheduler.warmup=N (N > 0)")
    if at("data.valid") is None and at("data.valid_size") == 0:  # carved: at least one pair
        problems.append("data.valid_size must be positive where data.valid is null")
    src, tgt = at("data.src_lang"), at("data.tgt_lang")
    if src is not None and src == tgt:
        problems.append(f"data.src_lang and data.tgt_lang are both {src!r}")
    if tgt is not None:
        try:
            check_bleu_tokenizer(bleu_tokenizer(tgt, at("data.bleu_tokenize")))
        except Seq2SeqError as e:
            problems.append(str(e))
    if at("train.guided_alignment") is not None and at("data.sampling_alpha"):
        problems.append(
            "train.guided_alignment needs data.sampling_alpha=0: its links fit "
            "the cached segmentation, not sampled subwords"
        )
    if (at("log.alignment_pairs") is None) != (at("log.alignment_links") is None):
        problems.append(
            "log.alignment_pairs=<pairs> and log.alignment_links=<gold links> go together"
        )
    heads, size = at("model.attention.heads"), at("model.attention.size")
    if heads and size and size % heads:  # multi-head: each head takes size / heads components
        problems.append(
            f"model.attention.size={size} is not divisible by model.attention.heads={heads}"
        )
    return problems


def _chosen_precision(cfg: LoadConfig) -> list[str]:
    """The commands after training take the precision given: auto is a training's timing."""
    if Precision(cfg.precision) is Precision.auto:
        return ["precision=auto is chosen when training: give fp32, bf16, fp16 or int8"]
    return []


def _search(cfg: InferenceConfig) -> list[str]:
    """A search's settings together: lite's rule (nbest within the beams), and coverage's
    penalty only where beams are reranked."""
    problem = search_problem(
        cfg.beam_size, cfg.nbest, cfg.batch_size, cfg.max_source_len, cfg.sampling
    )
    if cfg.sampling and cfg.coverage_penalty:
        problem = "coverage_penalty reranks beam search's hypotheses: not with sampling=true"
    return [problem] if problem else []


def _inert(cfg: InferenceConfig) -> list[str]:
    """A warning line for each search setting given that the search asked for ignores."""
    default = DecodeConfig()
    if cfg.sampling:
        inert = {"beam_size": "sampling=true draws nbest translations, it keeps no beams"}
    else:
        why = "shapes sampling only: add sampling=true, or leave it out"
        inert = {key: why for key in ("temperature", "top_k", "top_p", "seed")}
        if cfg.beam_size == 1:
            inert["coverage_penalty"] = "it reranks beam search's hypotheses; beam_size=1 has none"
    for key, why in inert.items():
        if cfg[key] != getattr(default, key):
            log.warning("%s=%s has no effect: %s", key, cfg[key], why)
    return []


def _steered(cfg: SteeringKeys) -> list[str]:
    """Constraints and terms are met by beam search, not by greedy search or sampling."""
    phrases = [k for k in ("constraints", "terms") if cfg[k]]
    what = "constraints" if cfg.constraints else glossary_terms(f"terms={cfg.terms}")
    problem = constraints_problem(bool(phrases), cfg.beam_size, cfg.sampling, what)
    return [problem] if problem else []


def _served(cfg: ServeConfig) -> list[str]:
    """seq2seq-serve searches, and each request fits its queue and its beam limit."""
    problems = []
    if cfg.max_queue_sentences < cfg.max_sentences:
        problems.append(
            f"max_queue_sentences={cfg.max_queue_sentences} is below "
            f"max_sentences={cfg.max_sentences}: a request of the largest size could never be "
            "admitted"
        )
    if cfg.port > 65535:
        problems.append(f"port={cfg.port} must be at most 65535")
    if cfg.sampling:
        problems.append("seq2seq-serve searches: sampling=true is for evaluate and translate")
    what = glossary_terms(f"terms={cfg.terms}")
    if problem := constraints_problem(bool(cfg.terms), cfg.beam_size, what=what):
        problems.append(f"{problem} (a request of the default beam_size that hits it fails)")
    if cfg.beam_size > cfg.max_beam:
        problems.append(
            f"beam_size={cfg.beam_size} is above max_beam={cfg.max_beam}: every request that "
            "leaves out beam_size would be refused"
        )
    if cfg.compare_with and cfg.ensemble:
        problems.append(
            "compare_with= serves each folder as its own model and ensemble= decodes several "
            "as one: give one or the other"
        )
    return problems


def _served_onnx(cfg: ServeConfig) -> list[str]:
    """What the graphs cannot do, refused rather than ignored."""
    if Backend(cfg.backend) is not Backend.onnx:
        return []
    problems = []
    if (precision := Precision(cfg.precision)) not in ONNX_VARIANTS:
        problems.append(
            "backend=onnx serves the fp32 graphs, or the int8 ones with precision=int8: not "
            f"precision={precision.value}"
        )
    if cfg.device not in ("auto", "cpu"):
        problems.append(
            f"backend=onnx runs on the CPU (onnxruntime): leave out device={cfg.device}"
        )
    for key, default in (("ensemble", []), ("compile", False), ("coverage_penalty", 0.0)):
        if cfg[key] != default:
            problems.append(f"backend=onnx has no {key}=: that is the PyTorch backend's")
    if cfg.checkpoint != "best":
        problems.append("backend=onnx serves a release's one model: leave out checkpoint=")
    return problems


def _evaluated(cfg: EvaluateConfig) -> list[str]:
    if (cfg.input is None) != (cfg.reference is None):
        return ["input=<source file> and reference=<reference file> go together"]
    if cfg.input is not None and cfg.split != EvaluateConfig.split:
        log.warning("split=%s has no effect: input= is translated and scored instead", cfg.split)
    return []


def _aligned(cfg: AlignConfig) -> list[str]:
    problems = []
    files = [cfg[k] is not None for k in ("src_file", "tgt_file")]
    if (cfg.input is not None) == any(files) or any(files) != all(files):
        problems.append(
            "give the pairs as input=<file of 'source ||| target' lines>, or as "
            "src_file=<file> tgt_file=<file>"
        )
    if not 0 < cfg.threshold <= 1:
        problems.append(f"threshold={cfg.threshold} must be above 0 and at most 1")
    if cfg.symmetrize is not None and cfg.reverse_run_dir is None:
        problems.append(
            f"symmetrize={Symmetrize(cfg.symmetrize).value} combines two runs' links: add "
            "reverse_run_dir=<a run of the other direction>"
        )
    default, inert = AlignConfig(run_dir=""), {}
    if AlignMethod(cfg.method) is not AlignMethod.threshold:
        inert["threshold"] = "it is method=threshold's least weight"
    if cfg.reverse_run_dir is None:
        inert |= dict.fromkeys(("reverse_checkpoint", "reverse_shift"), "add reverse_run_dir=")
    if cfg.gold is None:
        inert["gold_one_based"] = "it reads gold=<human links>"
    for key, why in inert.items():
        if cfg[key] != getattr(default, key):
            log.warning("%s=%s has no effect: %s", key, cfg[key], why)
    return problems


def _written_apart(cfg: LoadConfig) -> list[str]:
    """No file a command writes is a folder, a file it reads, or another it writes."""
    written = [k for k in FILES_WRITTEN if cfg.get(k) is not None]
    folders = [k for k in written if os.path.isdir(cfg[k])]
    problems = [f"{k}={cfg[k]} is a folder: give a file's name" for k in folders]
    for i, key in enumerate(written):
        for other in (*written[:i], *FILES_READ):
            if cfg.get(other) is not None and _same_file(cfg[key], cfg[other]):
                problems.append(f"{key}={cfg[key]} is also {other}=: write it elsewhere")
        if cfg.get("run_dir") and (own := own_file(Path(cfg.run_dir), Path(cfg[key]))):
            problems.append(f"{key}={cfg[key]} would overwrite the run's {own}: write it elsewhere")
    return problems


def _ensembled(cfg: LoadConfig) -> list[str]:
    """Each member of an ensemble loads its own checkpoint of a name: a file is one model's."""
    if cfg.get("ensemble") and cfg.checkpoint not in CHECKPOINTS:
        return [
            f"checkpoint={cfg.checkpoint} is one model's file: with ensemble=, checkpoint= "
            "is best, last or averaged (each member's own)"
        ]
    return []


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (a link or another spelling of it too)."""
    first, second = Path(a), Path(b)
    if first.exists() and second.exists():
        return os.path.samefile(first, second)
    return first.resolve() == second.resolve()


def _distilled(cfg: DistillConfig) -> list[str]:
    """seq2seq-distill writes beam output, and picks among an nbest of at least two."""
    if cfg.sampling:
        return ["seq2seq-distill writes the teacher's beam output: leave out sampling"]
    if Pick(cfg.pick) is Pick.closest and cfg.nbest < 2:
        return [
            "pick=closest chooses among the teacher's nbest: add nbest=N (N >= 2, and "
            "beam_size at least N)"
        ]
    return []


def _backtranslated(cfg: BacktranslateConfig) -> list[str]:
    if cfg.nbest > 1:
        log.warning("nbest=%d has no effect: one synthetic source is written a line", cfg.nbest)
    if not cfg.ratios or min(cfg.ratios) <= 0:
        return [f"ratios={list(cfg.ratios)} must be positive (synthetic per real pair)"]
    if cfg.parallel is None and cfg.ratios != BacktranslateConfig(out="", mono="").ratios:
        log.warning("ratios=%s has no effect: it mixes in parallel=<real pairs>", list(cfg.ratios))
    return []


def _averaged(cfg: AverageConfig) -> list[str]:
    """A positive n; out= a new file (never a run's checkpoint or the averaged ones)."""
    problems = [] if cfg.n > 0 else [f"n={cfg.n} must be positive"]
    if cfg.out is not None and os.path.lexists(cfg.out):
        problems.append(f"out={cfg.out} exists: give a new file's name")
    return problems


def _exported(cfg: ExportConfig) -> list[str]:
    if cfg.browser and not cfg.onnx:
        return ["browser=true runs the ONNX graphs in the page: add onnx=true"]
    return []


# each schema's rules (a subclass's config meets its bases' too), checked in this order
_RULES: tuple[tuple[type, Callable[[Any], list[str]]], ...] = (
    (Config, _training),
    (LoadConfig, _chosen_precision),
    (LoadConfig, _written_apart),
    (LoadConfig, _ensembled),
    (InferenceConfig, _search),
    (InferenceConfig, _inert),
    (SteeringKeys, _steered),
    (ServeConfig, _served),
    (ServeConfig, _served_onnx),
    (EvaluateConfig, _evaluated),
    (AlignConfig, _aligned),
    (DistillConfig, _distilled),
    (BacktranslateConfig, _backtranslated),
    (AverageConfig, _averaged),
    (ExportConfig, _exported),
)
