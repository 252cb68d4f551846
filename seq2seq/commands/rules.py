"""What the config's types cannot say: ranges and cross-key rules, refused in one line before
any work starts. Old spellings of keys are refused by commands/keys.py with today's name
(runtime/migrate.py's REMOVED); a saved run's old config is read by runtime/migrate.py."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import OmegaConf
from seq2seq_lite.steering import CONSTRAINTS_NEED_BEAM

from seq2seq.commands.configs import STEERING_FILES
from seq2seq.config import Precision, ScheduleName
from seq2seq.config_choices import Pick
from seq2seq.errors import Seq2SeqError
from seq2seq.languages import bleu_tokenizer, check_bleu_tokenizer

log = logging.getLogger("seq2seq.config")

_POSITIVE = (
    "model.emb_size",
    "model.hidden_size",
    "model.encoder_size",
    "model.encoder_layers",
    "model.attention.size",
    "model.attention.heads",
    "model.attention.window",
    "data.max_len",
    "data.train_limit",
    "data.valid_limit",
    "data.tokenizer.vocab_size",
    "data.tokenizer.character_coverage",
    "train.max_epochs",
    "train.max_steps",
    "train.max_minutes",
    "train.batch_tokens",
    "train.accumulate",
    "train.lr",
    "train.clip_grad_norm",
    "train.patience",
    "train.val_beam_size",
    "train.val_batch_size",
    "train.log_every",
    "train.validate_every",
    "beam_size",
    "nbest",
    "batch_size",
    "max_source_len",
    "temperature",
    "chunk_sentences",
    "port",
    "max_body_bytes",
    "max_sentences",
    "max_chars",
    "max_beam",
    "batch_sentences",
    "max_queue_sentences",
    "request_timeout_s",
    "n",
)
_FRACTIONS = ("model.dropout", "train.label_smoothing", "train.weight_decay", "data.sampling_alpha")
_NOT_NEGATIVE = (
    "train.threads",
    "train.scheduler.warmup",
    "alpha",
    "max_len_a",
    "max_len_b",
    "data.workers",
    "data.valid_size",
    "data.test_size",
    "train.guided_weight",
    "train.coverage_weight",
    "coverage_penalty",
    "top_k",
    "no_repeat_ngram",
    "min_len_a",
    "min_len_b",
    "log_attention",
    "batch_wait_ms",
)


def check_config(cfg: Any) -> None:
    """Refuse, in one line, values that their types allow but that cannot work (a negative size,
    a dropout of 1, the same source and target language), before any work starts."""
    problems = []
    for key in _POSITIVE:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and value <= 0:
            problems.append(f"{key}={value} must be positive")
    for key in _FRACTIONS:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and not 0 <= value < 1:
            problems.append(f"{key}={value} must be at least 0 and below 1")
    for key in _NOT_NEGATIVE:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and value < 0:
            problems.append(f"{key}={value} must not be negative")
    coverage = OmegaConf.select(cfg, "data.tokenizer.character_coverage", default=None)
    if coverage is not None and coverage > 1:
        problems.append(f"data.tokenizer.character_coverage={coverage} must be at most 1")
    graphs = OmegaConf.select(cfg, "train.cuda_graphs", default=None)
    if graphs is not None and str(graphs).lower() not in ("auto", "true", "false"):
        problems.append(f"train.cuda_graphs={graphs} must be auto, true or false")
    schedule = OmegaConf.select(cfg, "train.scheduler", default=None)
    if schedule is not None and schedule.name == ScheduleName.inverse_sqrt and schedule.warmup < 1:
        problems.append("train.scheduler.name=inverse_sqrt needs train.scheduler.warmup=N (N > 0)")
    src, tgt = OmegaConf.select(cfg, "data.src_lang"), OmegaConf.select(cfg, "data.tgt_lang")
    if src is not None and src == tgt:
        problems.append(f"data.src_lang and data.tgt_lang are both {src!r}")
    if tgt is not None:
        try:
            check_bleu_tokenizer(bleu_tokenizer(tgt, OmegaConf.select(cfg, "data.bleu_tokenize")))
        except Seq2SeqError as e:
            problems.append(str(e))
    problems += _cross_key_problems(cfg)
    if problems:
        raise Seq2SeqError("; ".join(problems))
    _warn_dot_as_general(cfg)


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


def _cross_key_problems(cfg: Any) -> list[str]:
    """Values each fine alone that cannot work together."""
    problems = []
    precision = OmegaConf.select(cfg, "precision", default=None)
    training = OmegaConf.select(cfg, "train", default=None) is not None
    if training and precision is not None and Precision(precision) is Precision.int8:
        problems.append(
            "precision=int8 is for inference (seq2seq-evaluate, -translate, "
            "-serve): train in fp32 or bf16"
        )
    if not training and precision is not None and Precision(precision) is Precision.auto:
        problems.append("precision=auto is chosen when training: give fp32, bf16, fp16 or int8")
    queue = OmegaConf.select(cfg, "max_queue_sentences", default=None)
    largest = OmegaConf.select(cfg, "max_sentences", default=None)
    if queue is not None and largest is not None and queue < largest:
        problems.append(
            f"max_queue_sentences={queue} is below max_sentences={largest}: a "
            "request of the largest size could never be admitted"
        )
    if OmegaConf.select(cfg, "sampling", default=False) and queue is not None:
        problems.append("seq2seq-serve searches: sampling=true is for evaluate and translate")
    top_beam = OmegaConf.select(cfg, "max_beam", default=None)
    beam = OmegaConf.select(cfg, "beam_size", default=None)
    if top_beam is not None and beam is not None and beam > top_beam:
        problems.append(
            f"beam_size={beam} is above max_beam={top_beam}: every request that "
            "leaves out beam_size would be refused"
        )
    problems += _steering_problems(cfg, queue)
    top_p = OmegaConf.select(cfg, "top_p", default=None)
    if top_p is not None and not 0 < top_p <= 1:
        problems.append(f"top_p={top_p} must be above 0 and at most 1")
    if OmegaConf.select(cfg, "sampling", default=False) and OmegaConf.select(
        cfg, "coverage_penalty", default=0.0
    ):
        problems.append("coverage_penalty reranks beam search's hypotheses: not with sampling=true")
    problems += _distill_problems(cfg) + _input_problems(cfg)
    alpha = OmegaConf.select(cfg, "data.sampling_alpha", default=0.0)
    if OmegaConf.select(cfg, "train.guided_alignment", default=None) is not None and alpha:
        problems.append(
            "train.guided_alignment needs data.sampling_alpha=0: its links fit "
            "the cached segmentation, not sampled subwords"
        )
    gold = [OmegaConf.select(cfg, f"log.alignment_{k}", default=None) for k in ("pairs", "links")]
    if (gold[0] is None) != (gold[1] is None):
        problems.append(
            "log.alignment_pairs=<pairs> and log.alignment_links=<gold links> go together"
        )
    return problems


def _steering_problems(cfg: Any, queue: int | None) -> list[str]:
    """What the server cannot steer (``queue``: the server's setting, None: not the server),
    and constraints without beam search."""
    problems = []
    files = [k for k in STEERING_FILES if OmegaConf.select(cfg, k, default=None)]
    per_line = [k for k in files if k != "terms"]  # the server's requests carry their own
    if per_line and queue is not None:
        problems.append(
            f"seq2seq-serve has no {per_line[0]}=: each request sends its own "
            '"prefixes" and "constraints"'
        )
    phrases = [k for k in ("constraints", "terms") if k in files]
    beams = OmegaConf.select(cfg, "beam_size", default=5)
    if (
        phrases
        and queue is None
        and (beams < 2 or OmegaConf.select(cfg, "sampling", default=False))
    ):
        problems.append(f"{phrases[0]}=: {CONSTRAINTS_NEED_BEAM}")
    return problems


def _input_problems(cfg: Any) -> list[str]:
    """Keys of one command each that only work in pairs, and its ranges beyond a sign."""
    problems = []
    if "reference" in cfg and (cfg.input is None) != (cfg.reference is None):  # evaluate
        problems.append("input=<source file> and reference=<reference file> go together")
    if "src_file" in cfg:  # align
        files = [cfg[k] is not None for k in ("src_file", "tgt_file")]
        if (cfg.input is not None) == any(files) or any(files) != all(files):
            problems.append(
                "give the pairs as input=<file of 'source ||| target' lines>, or as "
                "src_file=<file> tgt_file=<file>"
            )
    threshold = OmegaConf.select(cfg, "threshold", default=None)
    if threshold is not None and not 0 < threshold <= 1:
        problems.append(f"threshold={threshold} must be above 0 and at most 1")
    ratios = OmegaConf.select(cfg, "ratios", default=None)
    if ratios is not None and (not ratios or min(ratios) <= 0):
        problems.append(f"ratios={list(ratios)} must be positive (synthetic per real pair)")
    if OmegaConf.select(cfg, "browser", default=False) and not cfg.onnx:
        problems.append("browser=true runs the ONNX graphs in the page: add onnx=true")
    return problems


def _distill_problems(cfg: Any) -> list[str]:
    """seq2seq-distill (the only config with ``pick``) writes beam output, and picks among an
    nbest of at least two."""
    pick = OmegaConf.select(cfg, "pick", default=None)
    if pick is None:
        return []
    if OmegaConf.select(cfg, "sampling", default=False):
        return ["seq2seq-distill writes the teacher's beam output: leave out sampling"]
    if Pick(pick) is Pick.closest and OmegaConf.select(cfg, "nbest", default=1) < 2:
        return [
            "pick=closest chooses among the teacher's nbest: add nbest=N (N >= 2, and "
            "beam_size at least N)"
        ]
    return []
