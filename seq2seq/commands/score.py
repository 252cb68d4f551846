"""`seq2seq-score`: how likely a trained run finds given translations (forced decoding: the target
is read, never searched for).

Each pair of two parallel files gets log P(target | source) in nats (higher: more likely), summed
over the target's subword pieces and EOS, or with ``normalize=true`` their mean: one line per
pair, on stdout or into ``output=``. The perplexity of all the pairs (exp of the NLL per target
piece, as validation reports it) ends the log, and with ``output=`` it is the JSON line on stdout.
The files are read a block at a time, so a corpus of any size scores in flat memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from seq2seq.commands.configs import ScoreConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.data.corpus import parallel_batches
from seq2seq.decoding.forced import pair_log_probs, perplexity
from seq2seq.decoding.progress import LOG_EVERY_S
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import Engine, engine_choices, inference_engine
from seq2seq.runtime.run_folder import TrainedRun, load_runs

log = logging.getLogger("seq2seq.score")


def _scored_blocks(
    cfg: ScoreConfig, run: TrainedRun, engine: Engine
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per block of pairs: each pair's log-probability and its target pieces (EOS counted)."""
    for sources, targets in parallel_batches(Path(cfg.src_file), Path(cfg.tgt_file)):
        src_ids, tgt_ids = run.src_tok.encode_batch(sources), run.tgt_tok.encode_batch(targets)
        yield pair_log_probs(run.model, src_ids, tgt_ids, engine, cfg.batch_tokens)


@contextlib.contextmanager
def _scores_out(path: str | None) -> Iterator[TextIO]:
    """Where the scores go: stdout, or ``path``, written whole or not at all."""
    if path is None:
        yield sys.stdout
        return
    target = Path(path)
    temporary = target.with_name(target.name + ".tmp")
    try:
        out = open(temporary, "w", encoding="utf-8")  # noqa: SIM115 (closed below)
    except OSError as e:
        raise Seq2SeqError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with out:
            yield out
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def score(cfg: ScoreConfig) -> dict[str, Any] | None:
    """Score the pairs, write a line each; the summary (returned, the JSON line, with output=)."""
    for _ in parallel_batches(Path(cfg.src_file), Path(cfg.tgt_file)):
        pass  # both files whole first (UTF-8, as many lines): no score is written and then refused
    engine = inference_engine(cfg)  # this process's threads and device
    run = load_runs(cfg.run_dir, cfg.ensemble, cfg.checkpoint, engine)
    engine.choose_products(run.model, training=False)
    run.check_language("src_file", cfg.src_file, "source")
    run.check_language("tgt_file", cfg.tgt_file, "target")
    model = f"{run.checkpoint} (step {run.step})"
    if cfg.ensemble:
        model = f"an ensemble of {1 + len(cfg.ensemble)} runs, {run.checkpoint.name} of each"
    log.info(
        "scoring %s as translations of %s with %s on %s",
        cfg.tgt_file,
        cfg.src_file,
        model,
        engine.describe(),
    )
    start = last = time.perf_counter()
    pairs, pieces, log_prob = 0, 0, 0.0
    with _scores_out(cfg.output) as out:
        for log_probs, counts in _scored_blocks(cfg, run, engine):
            shown = log_probs / counts if cfg.normalize else log_probs
            out.write("".join(f"{value:.4f}\n" for value in shown))
            out.flush()
            pairs, pieces = pairs + len(counts), pieces + int(counts.sum())
            log_prob += float(log_probs.sum())
            if (now := time.perf_counter()) - last >= LOG_EVERY_S:
                log.info("%d pairs scored, %.0f/s", pairs, pairs / (now - start))
                last = now
    seconds = time.perf_counter() - start
    nll = -log_prob / pieces  # the files are not empty: every pair has at least its EOS
    ppl = perplexity(nll)
    log.info(
        "%d pairs, %d target pieces: perplexity %.2f (NLL %.4f a piece) in %.1f s",
        pairs,
        pieces,
        ppl,
        nll,
        seconds,
    )
    result = {
        "ppl": round(ppl, 4),
        "nll": round(nll, 6),  # per target piece, EOS counted
        "pairs": pairs,
        "target_pieces": pieces,
        "normalize": cfg.normalize,
        "output": str(Path(cfg.output).resolve()) if cfg.output else None,
        "run": str(run.run_dir.resolve()),
        "runs": [str(Path(d).resolve()) for d in (cfg.run_dir, *cfg.ensemble)],
        "checkpoint": str(run.checkpoint.resolve()),
        "step": run.step,
        **engine_choices(engine),
        "seconds": round(seconds, 3),
    }
    return result if cfg.output is not None else None


main = hydra_command("score")(score)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
