"""`seq2seq-train`: train a BiGRU + attention translator in a Hydra run folder."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import sacrebleu
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from seq2seq.checkpoint import (
    CONFIG_FILE,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    load_checkpoint,
    save_checkpoint,
)
from seq2seq.config import Config, DecodeConfig, Precision, TrainConfig
from seq2seq.data.batching import TokenBatchSampler, collate
from seq2seq.data.corpus import read_parallel, split_files
from seq2seq.data.dataset import TokenizedCorpus, encode_corpus
from seq2seq.data.tokenizer import Tokenizer, train_tokenizers
from seq2seq.errors import Seq2SeqError
from seq2seq.model.seq2seq import Seq2Seq, build_model
from seq2seq.monitor import (
    AttentionSample,
    Monitor,
    attention_sample,
    attention_statistics,
    hypothesis_weights,
    run_hparams,
)
from seq2seq.search import decode_corpus

log = logging.getLogger("seq2seq.train")


def setup_runtime(threads: int, seed: int) -> None:
    """Use every core this process may run on (or `threads`) and seed torch."""
    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))
    torch.manual_seed(seed)


def autocast(precision: Precision) -> contextlib.AbstractContextManager:
    """bf16 autocast with fp32 master weights, or nothing for fp32."""
    if precision == Precision.bf16:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def build_optimizer(model: torch.nn.Module, tcfg: TrainConfig) -> torch.optim.Adam:
    """Adam over all parameters; the fused kernel updates them in one pass per tensor."""
    return torch.optim.Adam(
        model.parameters(),
        lr=tcfg.lr,
        betas=tuple(tcfg.betas),
        weight_decay=tcfg.weight_decay,
        fused=True,
    )


@dataclass
class Validation:
    """What one validation measured, ready to log."""

    metrics: dict[str, float]  # loss, ppl, bleu, chrf, attention_entropy, attention_max_weight
    samples: list[AttentionSample]  # the first `log.attention_samples` sentences, for heatmaps


class Trainer:
    """Owns the data, model, optimizer and counters of one run, and checkpoints them."""

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        self.cfg, self.run_dir = cfg, run_dir
        tcfg = cfg.train
        setup_runtime(tcfg.threads, tcfg.seed)
        last = run_dir / "last.pt"
        state = self._checkpoint_to_resume(last)
        if tcfg.precision == Precision.bf16 and not torch.cpu._is_avx512_bf16_supported():
            log.warning("this CPU has no native bf16 (no AVX512-BF16/AMX): bf16 will be slow")

        train_src, train_tgt = self._read("train", cfg.data.train_limit)
        self.src_tok, self.tgt_tok = self._tokenizers(train_src, train_tgt, reuse=state is not None)
        self.train_data = self._encode(train_src, train_tgt, drop_invalid=True)
        self.valid_src, self.valid_refs = self._read("valid", cfg.data.valid_limit)
        self.valid_data = self._encode(self.valid_src, self.valid_refs, drop_invalid=False)
        self.sampler = TokenBatchSampler(
            self.train_data.src_lengths,
            self.train_data.tgt_lengths,
            tcfg.batch_tokens,
            shuffle=True,
            seed=tcfg.seed,
        )
        self.model: Seq2Seq = build_model(
            cfg.model, self.src_tok.vocab_size, self.tgt_tok.vocab_size
        )
        self.optimizer = build_optimizer(self.model, tcfg)
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self.optimizer,
            mode="max",
            factor=tcfg.scheduler.factor,
            patience=tcfg.scheduler.patience,
            min_lr=tcfg.scheduler.min_lr,
        )
        self.step = self.epoch = self.batch_in_epoch = self.bad_validations = 0
        self.best_bleu = -1.0
        self.stopped_early = False
        if state is not None:
            self._restore(state)
        # Resuming hides whatever the interrupted run logged after the step of its last.pt.
        self.monitor = Monitor(run_dir, purge_step=self.step + 1 if state is not None else None)
        self._stop_signal: int | None = None
        n_params = sum(p.numel() for p in self.model.parameters())
        log.info(
            "model: %s attention, %.2fM parameters; %d training pairs in %d batches per epoch",
            OmegaConf.get_type(cfg.model.attention).__name__.removesuffix("Config").lower(),
            n_params / 1e6,
            len(self.train_data),
            len(self.sampler.batches(0)),
        )

    # -- setup -------------------------------------------------------------------------------

    def _checkpoint_to_resume(self, last: Path) -> dict[str, Any] | None:
        if not self.cfg.train.resume:
            if last.exists():
                raise Seq2SeqError(
                    f"{self.run_dir} already holds a checkpoint (last.pt): add train.resume=true "
                    "to continue it, or choose another folder with hydra.run.dir=..."
                )
            OmegaConf.save(self.cfg, self.run_dir / CONFIG_FILE, resolve=True)
            return None
        if not last.exists():
            log.warning("train.resume=true but %s has no last.pt: starting afresh", self.run_dir)
            OmegaConf.save(self.cfg, self.run_dir / CONFIG_FILE, resolve=True)
            return None
        state = load_checkpoint(last)
        saved = OmegaConf.create(state["config"])
        if OmegaConf.to_container(saved.model) != OmegaConf.to_container(
            OmegaConf.create(OmegaConf.to_container(self.cfg.model, resolve=True, enum_to_str=True))
        ):
            raise Seq2SeqError("train.resume=true, but the model settings differ from last.pt's")
        return state

    def _read(self, split: str, limit: int | None) -> tuple[list[str], list[str]]:
        return read_parallel(*split_files(self.cfg.data, split), limit)

    def _tokenizers(
        self, src: list[str], tgt: list[str], reuse: bool
    ) -> tuple[Tokenizer, Tokenizer]:
        """The run's own tokenizers when resuming, else trained (or taken from the cache)."""
        src_model, tgt_model = self.run_dir / SRC_TOKENIZER, self.run_dir / TGT_TOKENIZER
        if reuse and src_model.exists() and tgt_model.exists():
            return Tokenizer.load(src_model), Tokenizer.load(tgt_model)
        return train_tokenizers(self.cfg.data, src, tgt, self.run_dir)

    def _encode(self, src: list[str], tgt: list[str], drop_invalid: bool) -> TokenizedCorpus:
        return encode_corpus(
            src,
            tgt,
            self.src_tok,
            self.tgt_tok,
            Path(self.cfg.data.cache_dir),
            self.cfg.data.max_len if drop_invalid else None,
            drop_invalid=drop_invalid,
        )

    # -- checkpoints -------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": torch.get_rng_state(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "best_bleu": self.best_bleu,
            "bad_validations": self.bad_validations,
            "stopped_early": self.stopped_early,
            "config": OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True),
        }

    def _restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        for key in (
            "step",
            "epoch",
            "batch_in_epoch",
            "best_bleu",
            "bad_validations",
            "stopped_early",
        ):
            setattr(self, key, state[key])
        log.info(
            "resumed from last.pt: step %d, epoch %d, batch %d, best BLEU %.2f",
            self.step,
            self.epoch + 1,
            self.batch_in_epoch,
            self.best_bleu,
        )

    def _save(self, name: str) -> None:
        save_checkpoint(self.run_dir / name, self._state())

    # -- training ----------------------------------------------------------------------------

    def fit(self) -> None:
        """Train until early stopping, `max_epochs`, `max_steps` or a stop signal."""
        with self.monitor:
            self._fit()

    def _fit(self) -> None:
        if self.stopped_early:
            log.info("this run has already stopped early (best BLEU %.2f)", self.best_bleu)
            return
        with self._stop_on_signals():
            while not self._done():
                self._train_epoch()
                if self._stop_signal is not None:
                    self._save("last.pt")
                    log.warning(
                        "stopped by signal %d at step %d; last.pt saved: rerun with "
                        "train.resume=true to continue",
                        self._stop_signal,
                        self.step,
                    )
                    raise SystemExit(128 + self._stop_signal)
        self._save("last.pt")
        log.info("finished after %d updates; best validation BLEU %.2f", self.step, self.best_bleu)

    def _done(self) -> bool:
        tcfg = self.cfg.train
        out_of_steps = tcfg.max_steps is not None and self.step >= tcfg.max_steps
        return self.stopped_early or out_of_steps or self.epoch >= tcfg.max_epochs

    def _train_epoch(self) -> None:
        tcfg = self.cfg.train
        batches = self.sampler.batches(self.epoch)
        self.model.train()
        bar = tqdm(
            batches[self.batch_in_epoch :],
            desc=f"epoch {self.epoch + 1}",
            disable=not self.cfg.log.progress,
            dynamic_ncols=True,
            leave=False,
        )
        window_tokens, window_loss, window_start = 0, 0.0, time.perf_counter()
        for ids in bar:
            batch = collate(self.train_data, ids)
            loss = self._update(batch)
            self.step += 1
            self.batch_in_epoch += 1
            window_tokens += batch.ntokens
            window_loss += loss * batch.ntokens
            if self.step % tcfg.log_every == 0:
                elapsed = time.perf_counter() - window_start
                self._log_training(window_loss / window_tokens, window_tokens / elapsed)
                bar.set_postfix(
                    loss=f"{window_loss / window_tokens:.3f}",
                    tok_s=f"{window_tokens / elapsed:,.0f}",
                )
                window_tokens, window_loss, window_start = 0, 0.0, time.perf_counter()
            out_of_steps = tcfg.max_steps is not None and self.step >= tcfg.max_steps
            if out_of_steps or (tcfg.validate_every and self.step % tcfg.validate_every == 0):
                self._validate_and_checkpoint()
                self.model.train()
            if out_of_steps or self.stopped_early or self._stop_signal is not None:
                bar.close()
                return
        bar.close()
        self.epoch += 1
        self.batch_in_epoch = 0
        if not tcfg.validate_every:
            self._validate_and_checkpoint()

    def _update(self, batch) -> float:
        """One optimizer step on a batch; returns its mean loss per target token."""
        tcfg = self.cfg.train
        with autocast(tcfg.precision):
            loss_sum, _, ntokens = self.model.loss(batch, tcfg.label_smoothing)
        loss = loss_sum / ntokens
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), tcfg.clip_grad_norm
        )
        self.optimizer.step()
        return loss.item()

    def _log_training(self, loss: float, tokens_per_s: float) -> None:
        self.monitor.scalars(
            self.step,
            {
                "train/loss": loss,
                "train/lr": self.optimizer.param_groups[0]["lr"],
                "train/tokens_per_s": tokens_per_s,
                "train/grad_norm": float(self.grad_norm),
            },
        )

    # -- validation --------------------------------------------------------------------------

    @torch.inference_mode()
    def validate(self) -> Validation:
        """Teacher-forced loss and perplexity; BLEU, chrF and attention statistics of the
        validation set decoded once, whose first `log.attention_samples` sentences become samples.
        """
        self.model.eval()
        loss_sum = nll_sum = 0.0
        ntokens = 0
        order = TokenBatchSampler(
            self.valid_data.src_lengths,
            self.valid_data.tgt_lengths,
            self.cfg.train.batch_tokens,
            shuffle=False,
        )
        for ids in order.batches(0):
            loss, nll, n = self.model.loss(collate(self.valid_data, ids), 0.0)
            loss_sum, nll_sum, ntokens = loss_sum + float(loss), nll_sum + float(nll), ntokens + n
        decode_cfg = DecodeConfig(beam_size=self.cfg.train.val_beam_size, nbest=1)
        hyps = [nbest[0] for nbest in decode_corpus(self.model, self.valid_data, decode_cfg)]
        text = [self.tgt_tok.decode(h.tokens) for h in hyps]
        metrics = {
            "loss": loss_sum / ntokens,
            "ppl": math.exp(min(nll_sum / ntokens, 50.0)),
            "bleu": sacrebleu.corpus_bleu(text, [self.valid_refs]).score,
            "chrf": sacrebleu.corpus_chrf(text, [self.valid_refs]).score,
            **attention_statistics([hypothesis_weights(h) for h in hyps]),
        }
        samples = [
            attention_sample(
                self.valid_src[i],
                self.valid_refs[i],
                hyps[i],
                self.valid_data.src(i),
                self.src_tok,
                self.tgt_tok,
            )
            for i in range(min(self.cfg.log.attention_samples, len(hyps)))
        ]
        return Validation(metrics, samples)

    def _validate_and_checkpoint(self) -> None:
        start = time.perf_counter()
        result = self.validate()
        bleu = result.metrics["bleu"]
        improved = bleu > self.best_bleu
        if improved:
            self.best_bleu, self.bad_validations = bleu, 0
        else:
            self.bad_validations += 1
        self.scheduler.step(bleu)
        if self.bad_validations >= self.cfg.train.patience:
            log.info("early stopping: no better BLEU in %d validations", self.bad_validations)
            self.stopped_early = True
        logging_start = time.perf_counter()
        self._log_validation(result)
        logging_seconds = time.perf_counter() - logging_start
        if improved:
            self._save("best.pt")
        self._save("last.pt")
        log.info(
            "step %d (epoch %d): valid loss %.3f, ppl %.2f, BLEU %.2f%s, chrF %.2f "
            "(%.1f s, TensorBoard %.2f s)",
            self.step,
            self.epoch + (self.batch_in_epoch > 0),
            result.metrics["loss"],
            result.metrics["ppl"],
            bleu,
            " (best)" if improved else "",
            result.metrics["chrf"],
            time.perf_counter() - start,
            logging_seconds,
        )

    def _log_validation(self, result: Validation) -> None:
        """Scalars, heatmaps, the samples table and HParams of one validation, flushed to disk."""
        step = self.step
        self.monitor.scalars(step, {f"valid/{name}": v for name, v in result.metrics.items()})
        if result.samples:
            self.monitor.attention(step, result.samples)
            self.monitor.samples_table(step, result.samples)
        best = {"hparams/best_valid_bleu": self.best_bleu}
        self.monitor.hparams(step, run_hparams(self.cfg), best)
        self.monitor.flush()  # a running TensorBoard shows this validation now

    @contextlib.contextmanager
    def _stop_on_signals(self):
        """SIGINT/SIGTERM finish the current update, save last.pt and exit; a second one kills."""

        def request_stop(signum, _frame):
            if self._stop_signal is not None:
                raise KeyboardInterrupt
            self._stop_signal = signum
            log.warning("signal %d: stopping after this update (send again to abort)", signum)

        previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


@hydra.main(version_base=None, config_path="pkg://seq2seq.configs", config_name="config")
def main(cfg: Config) -> None:
    """Train with the composed config; user errors exit 1 with one clear message."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        Trainer(cfg, run_dir).fit()
    except Seq2SeqError as e:
        log.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
