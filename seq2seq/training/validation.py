"""Validation during training: teacher-forced loss and perplexity, and the validation split
translated and scored the way seq2seq-evaluate does it (one `Translator`, one `score`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from omegaconf import DictConfig
from torch import Tensor

from seq2seq.config import DecodeConfig, TrainConfig
from seq2seq.data.batching import TokenBatchSampler, collate
from seq2seq.data.prepare import TrainingData
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.alignment import (
    AttentionSample,
    attention_samples,
    attention_statistics,
    hypothesis_weights,
)
from seq2seq.decoding.forced import perplexity
from seq2seq.decoding.graphed import SearchGraphs
from seq2seq.decoding.inference import Translator, score
from seq2seq.errors import DataError
from seq2seq.languages import bleu_tokenizer
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.runtime.engine import Engine
from seq2seq.training.alignment import AlignmentProbe


@dataclass
class Validation:
    """What one validation measured, ready to log."""

    metrics: dict[str, float]  # loss, ppl, bleu, chrf, attention statistics (, aer, ...)
    samples: list[AttentionSample]  # the first sentences, for heatmaps and the samples table


log = logging.getLogger("seq2seq.train")


def validation_search(tcfg: TrainConfig) -> DecodeConfig:
    """The search of validation's translations (greedy unless train.val_beam_size says)."""
    return DecodeConfig(beam_size=tcfg.val_beam_size, batch_size=tcfg.val_batch_size)


def within_limit(tok: Tokenizer, lines: list[str], limit: int) -> tuple[list[str], int]:
    """The lines, those over ``limit`` subwords blanked (left untranslated: validation goes on,
    where a command would refuse them), and how many were."""
    lengths = [len(ids) for ids in tok.encode_batch(lines)]
    kept = [line if n <= limit else "" for line, n in zip(lines, lengths, strict=True)]
    return kept, sum(n > limit for n in lengths)


def check_validation_lines(data: TrainingData, search: DecodeConfig) -> None:
    """Refuse, before any update, a validation split without a line to translate (all blank,
    or over max_source_len): its BLEU would be of nothing; warn of pairs with a blank side."""
    sources, blanked = within_limit(data.src_tok, data.valid_src, search.max_source_len)
    if not any(line.strip() for line in sources):
        over = f" or over max_source_len={search.max_source_len} subwords" if blanked else ""
        raise DataError(
            f"the validation split has no line to translate: its {len(sources)} lines are "
            f"blank{over}; give data.valid (or data.valid_size) some sentences"
        )
    pairs = zip(data.valid_src, data.valid_refs, strict=True)
    blank = sum(not s.strip() or not r.strip() for s, r in pairs)
    if blank:  # training drops such pairs; validation scores every line
        log.warning(
            "%d of %d validation pairs have a blank source or reference: each is scored as a "
            "pair, so BLEU is lower than the sentences deserve (check the split's files)",
            blank,
            len(data.valid_src),
        )


def translated_lines(data: TrainingData, search: DecodeConfig) -> list[str]:
    """The validation sources as each validation translates them, those over max_source_len
    blank (said once, here)."""
    sources, blanked = within_limit(data.src_tok, data.valid_src, search.max_source_len)
    if blanked:
        log.warning(
            "%d validation lines have more than max_source_len=%d subwords: not translated",
            blanked,
            search.max_source_len,
        )
    return sources


class Validator:
    """Validation as a run repeats it: its settings, read from the run's config once, and on a
    GPU the search's CUDA graphs, kept from one validation to the next (each batch shape is
    recorded once; the updates change the weights in place, where the graphs read them)."""

    def __init__(self, cfg: DictConfig, engine: Engine, data: TrainingData | None = None) -> None:
        """With ``data``, the alignment probe's pairs are checked against its tokenizers now,
        when training starts, not at the first validation (once)."""
        self.engine, self.batch_tokens = engine, cfg.train.batch_tokens
        self.search, self.samples = validation_search(cfg.train), cfg.log.attention_samples
        self.bleu_tokenize = bleu_tokenizer(cfg.data.tgt_lang, cfg.data.bleu_tokenize)
        tokenizers = (data.src_tok, data.tgt_tok) if data is not None else None
        self.probe = AlignmentProbe.from_config(cfg, tokenizers)
        self.graphs = SearchGraphs(engine) if engine.device.type == "cuda" else None
        self.sources: list[str] | None = None  # the lines translated, read at the first call

    def __call__(self, model: Seq2Seq, data: TrainingData) -> Validation:
        """One validation of ``model`` (`validate`)."""
        if self.sources is None:
            self.sources = translated_lines(data, self.search)
        return validate(
            model,
            data,
            self.sources,
            self.engine,
            self.batch_tokens,
            self.search,
            self.samples,
            self.bleu_tokenize,
            self.probe,
            self.graphs,
        )


@torch.inference_mode()
def validate(
    model: Seq2Seq,
    data: TrainingData,
    sources: list[str],
    engine: Engine,
    batch_tokens: int,
    search: DecodeConfig,
    samples: int,
    bleu_tokenize: str = "13a",
    probe: AlignmentProbe | None = None,
    graphs: SearchGraphs | None = None,
) -> Validation:
    """Loss and perplexity over ``data.valid``; BLEU (sacreBLEU's ``bleu_tokenize``), chrF and
    attention statistics of ``sources`` (``data.valid_src``, `translated_lines`) translated with
    ``search`` (as seq2seq-evaluate does), whose first ``samples`` become samples;
    with a ``probe``, the AER of the model's attention on its gold-aligned pairs; ``graphs``:
    the search's CUDA graphs to replay (`Validator`)."""
    model.eval()
    sums: list[Tensor] = []  # each batch's loss and NLL sums, read once after the last batch
    ntokens = 0
    order = TokenBatchSampler(
        data.valid.src_lengths, data.valid.tgt_lengths, batch_tokens, shuffle=False
    )
    for ids in order.batches(0):
        batch = engine.to_device(collate(data.valid, ids))
        with engine.compute():
            loss, nll = model(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out)
        sums.append(torch.stack([loss.float(), nll.float()]))
        ntokens += batch.ntokens
    pairs = torch.stack(sums).tolist() if sums else []
    loss_sum, nll_sum = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    translator = Translator(model, data.src_tok, data.tgt_tok, search, engine, graphs)
    translations = translator.translate(sources)
    hypotheses = [translator.best_text(t) for t in translations]
    scores = score(hypotheses, data.valid_refs, bleu_tokenize)
    decoded = [i for i, t in enumerate(translations) if t.hypotheses]
    weights = [hypothesis_weights(translations[i].hypotheses[0]) for i in decoded]
    metrics = {
        "loss": loss_sum / ntokens,
        "ppl": perplexity(nll_sum / ntokens),
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        **attention_statistics(weights),
    }
    if probe is not None:
        metrics.update(probe.measure(model, data.src_tok, data.tgt_tok, engine))
    heatmaps = attention_samples(
        data.valid_src, data.valid_refs, translations, data.src_tok, data.tgt_tok, samples
    )
    return Validation(metrics, heatmaps)
