"""The range of each key that has one, by its name in whichever command's config it sits: what
the types cannot say (a size is positive, a dropout below 1), refused before any work starts."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from seq2seq_lite.rules import NOT_NEGATIVE as SEARCH_NOT_NEGATIVE
from seq2seq_lite.rules import finite_problem

POSITIVE = (
    "model.emb_size",
    "model.hidden_size",
    "model.encoder_size",
    "model.encoder_layers",
    "model.decoder_layers",
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
    "batch_tokens",
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
)
FRACTIONS = ("model.dropout", "train.label_smoothing", "train.weight_decay", "data.sampling_alpha")
NOT_NEGATIVE = (
    *SEARCH_NOT_NEGATIVE,  # the search's, lite's rule
    "train.threads",
    "train.scheduler.warmup",
    "data.workers",
    "data.valid_size",
    "data.test_size",
    "train.guided_weight",
    "train.coverage_weight",
    "coverage_penalty",
    "top_k",
    "log_attention",
    "batch_wait_ms",
    "max_constraints",
    "train.keep_checkpoints",
    "train.scheduler.patience",
    "train.scheduler.min_lr",
    "log.attention_samples",
    "data.tokenizer.input_sentence_size",
    "train.seed",  # numpy's generators take no negative seed
    "data.split_seed",
    "seed",
)


def range_problems(cfg: Any) -> list[str]:
    """The keys of these names out of their range, in whichever command's config they are; a
    NaN or an infinity is out of every range (NaN compares False with every bound)."""
    problems, values = [], {}
    bounded = ("top_p", "data.tokenizer.character_coverage", "train.scheduler.factor")
    for key in (*POSITIVE, *FRACTIONS, *NOT_NEGATIVE, *bounded):
        value = OmegaConf.select(cfg, key, default=None)
        if problem := finite_problem(key, value):
            problems.append(problem)
        elif value is not None:
            values[key] = value
    problems += [f"{k}={v} must be positive" for k, v in _given(values, POSITIVE) if v <= 0]
    problems += [
        f"{k}={v} must be at least 0 and below 1"
        for k, v in _given(values, FRACTIONS)
        if not 0 <= v < 1
    ]
    problems += [f"{k}={v} must not be negative" for k, v in _given(values, NOT_NEGATIVE) if v < 0]
    coverage = values.get("data.tokenizer.character_coverage")
    if coverage is not None and coverage > 1:
        problems.append(f"data.tokenizer.character_coverage={coverage} must be at most 1")
    top_p = values.get("top_p")
    if top_p is not None and not 0 < top_p <= 1:
        problems.append(f"top_p={top_p} must be above 0 and at most 1")
    factor = values.get("train.scheduler.factor")  # plateau: the rate is cut, never raised
    if factor is not None and not 0 < factor < 1:
        problems.append(f"train.scheduler.factor={factor} must be above 0 and below 1")
    for key in ("train.seed", "data.split_seed", "seed"):  # torch's generators: 64 bits
        if values.get(key, 0) >= 2**63:
            problems.append(f"{key}={values[key]} must be below 2**63 ({2**63:,})")
    betas = OmegaConf.select(cfg, "train.betas", default=None)
    if betas is not None and not all(0 <= b < 1 for b in betas):  # Adam's decay rates
        problems.append(f"train.betas={list(betas)} must each be at least 0 and below 1")
    return problems


def _given(values: dict[str, Any], keys: tuple[str, ...]) -> list[tuple[str, Any]]:
    """The keys of ``keys`` that have a finite value, in ``keys``' order, with it."""
    return [(key, values[key]) for key in keys if key in values]
