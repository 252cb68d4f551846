"""`seq2seq-align`: word alignments of given sentence pairs from a trained run's attention.

The run reads each pair with the target given (forced decoding: teacher forcing, no search); each
target word's attention, merged from subwords into words, becomes links (`AlignMethod`). With
``reverse_run_dir`` a run of the other direction reads the pairs the other way and the two link
sets are symmetrised. Links go out in Pharaoh form (``i-j``, 0-based, source-target), a line per
pair; the summary (with ``gold=`` precision, recall and AER) is the last stdout line (JSON)
where the links go to ``output=`` or ``gold=`` asks for scores: links alone on a pipe.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.commands.configs import AlignConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.config_choices import Symmetrize
from seq2seq.decoding.aer import alignment_scores, read_gold, sure_links_missing
from seq2seq.decoding.forced import ForcedAligner
from seq2seq.decoding.pairlangs import pair_language_problem
from seq2seq.decoding.wordalign import (
    Links,
    WordPair,
    extract,
    flipped,
    pharaoh_line,
    read_pairs,
    read_parallel_pairs,
    symmetrize,
)
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import Engine, inference_engine
from seq2seq.runtime.run_folder import TrainedRun, load_run

log = logging.getLogger("seq2seq.align")


def _pairs(cfg: AlignConfig) -> list[WordPair]:
    """The input's pairs in the input's own orientation (the files are there: check_files)."""
    if cfg.input is not None:
        return read_pairs(cfg.input)
    return read_parallel_pairs(cfg.src_file, cfg.tgt_file)


def _direction(
    run: TrainedRun, engine: Engine, cfg: AlignConfig, pairs: Sequence[WordPair], reverse: bool
) -> tuple[list[Links], list[np.ndarray]]:
    """Links (in the input's orientation) and word attention of one run reading the pairs."""
    flip = reverse != cfg.swap  # this run reads the input's target side
    read = [(tgt, src) for src, tgt in pairs] if flip else list(pairs)
    aligner = ForcedAligner(run.model, run.src_tok, run.tgt_tok, engine, cfg.batch_size)
    weights = aligner.word_attention(read, cfg.reverse_shift if reverse else cfg.shift)
    links = [extract(w, cfg.method, cfg.threshold) for w in weights]
    return ([flipped(x) for x in links] if flip else links), weights


def _write(path: str | None, lines: Sequence[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    if path is None:
        sys.stdout.write(text)
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise Seq2SeqError(f"cannot write {path}: {e}") from e


def _weights_lines(
    pairs: Sequence[WordPair], weights: Sequence[np.ndarray], swap: bool
) -> list[str]:
    """JSON lines: the words the run read and its word attention [target][source + EOS]."""
    return [
        json.dumps(
            {
                "source": tgt if swap else src,
                "target": src if swap else tgt,
                "weights": np.round(w, 4).tolist(),
            },
            ensure_ascii=False,
        )
        for (src, tgt), w in zip(pairs, weights, strict=True)
    ]


def _symmetrized(cfg: AlignConfig) -> Symmetrize:
    """How two directions' links are combined: as given, else grow-diag-final."""
    return Symmetrize(cfg.symmetrize or Symmetrize.grow_diag_final)


def _check_reverse(run: TrainedRun, reverse: TrainedRun) -> None:
    """The reverse run translates the other way: its source is the run's target."""
    pair = (run.cfg.data.src_lang, run.cfg.data.tgt_lang)
    other = (reverse.cfg.data.src_lang, reverse.cfg.data.tgt_lang)
    if other != pair[::-1]:
        raise Seq2SeqError(
            f"reverse_run_dir translates {'->'.join(other)}; a run of the other direction "
            f"({'->'.join(pair[::-1])}) is needed to symmetrise with run_dir's {'->'.join(pair)}"
        )


def _check_pairs(run: TrainedRun, cfg: AlignConfig, pairs: Sequence[WordPair]) -> None:
    """One warning where the pairs, as the run reads them, do not read like its languages."""
    read = [(tgt, src) for src, tgt in pairs] if cfg.swap else pairs
    langs = (run.cfg.data.src_lang, run.cfg.data.tgt_lang)
    problem = pair_language_problem(read, run.src_tok, run.tgt_tok, langs, cfg.swap)
    if problem is not None:
        given = f"input={cfg.input}" if cfg.input else f"src_file={cfg.src_file}"
        swap = " with swap=true" if cfg.swap else ""
        log.warning("%s%s, read by a %s->%s run: %s", given, swap, *langs, problem)


def align(cfg: AlignConfig) -> dict[str, Any] | None:
    """Align, write the links (and weights); return the result object, None where the links
    alone are the answer on stdout (no ``output=``, no ``gold=``)."""
    pairs = _pairs(cfg)
    gold = read_gold(cfg.gold, pairs, cfg.gold_one_based) if cfg.gold is not None else None
    if gold is not None and (note := sure_links_missing(gold, f"gold={cfg.gold}")):
        log.warning(note)
    engine = inference_engine(cfg)  # this process's threads and device
    runs = [load_run(cfg.run_dir, cfg.checkpoint, engine)]
    if cfg.reverse_run_dir is not None:
        runs.append(load_run(cfg.reverse_run_dir, cfg.reverse_checkpoint, engine))
        _check_reverse(*runs)
    engine.choose_products(runs[0].model, training=False)
    sides = ("target", "source") if cfg.swap else ("source", "target")
    runs[0].check_language("src_file", cfg.src_file, sides[0])
    runs[0].check_language("tgt_file", cfg.tgt_file, sides[1])
    _check_pairs(runs[0], cfg, pairs)
    log.info(
        "aligning %d pairs with %s (step %d) on %s",
        len(pairs),
        runs[0].checkpoint,
        runs[0].step,
        engine.describe(),
    )
    start = time.perf_counter()
    found = [_direction(run, engine, cfg, pairs, reverse=k == 1) for k, run in enumerate(runs)]
    links = found[0][0]
    if len(found) == 2:
        both = zip(found[0][0], found[1][0], strict=True)
        how = _symmetrized(cfg)
        links = [symmetrize(forward, backward, how) for forward, backward in both]
    seconds = time.perf_counter() - start
    _write(cfg.output, [pharaoh_line(x) for x in links])
    if cfg.weights is not None:
        _write(cfg.weights, _weights_lines(pairs, found[0][1], cfg.swap))
    result: dict[str, Any] = {}
    if gold is not None:
        result = alignment_scores(links, gold)
        if len(found) == 2:
            for name, (direction, _) in zip(("forward", "reverse"), found, strict=True):
                result[name] = alignment_scores(direction, gold)
    if cfg.output is None and gold is None:
        return None
    return {
        **result,
        "pairs": len(pairs),
        "method": cfg.method.value,
        **({"threshold": cfg.threshold} if cfg.method.value == "threshold" else {}),
        "shift": cfg.shift,
        "symmetrize": _symmetrized(cfg).value if len(runs) == 2 else None,
        "runs": [str(run.run_dir.resolve()) for run in runs],
        "checkpoints": [str(run.checkpoint.resolve()) for run in runs],
        "steps": [run.step for run in runs],
        "output": str(Path(cfg.output).resolve()) if cfg.output else None,
        "device": str(engine.device),
        "dtype": engine.precision.value,  # "precision" is the links'
        "seconds": round(seconds, 3),
    }


main = hydra_command("align")(align)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
