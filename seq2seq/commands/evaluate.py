"""`seq2seq-evaluate`: translate a test split (or a file) with a trained run and score it.

Writes into ``<run_dir>/eval/``: the detokenized hypotheses, Pharaoh alignments, the soft attention
weights (JSON lines) and the result object, which is also the last line on stdout. BLEU and chrF
come from sacrebleu against the raw references; the test BLEU and, with ``log_attention=K``, the
first K heatmaps also go into the run's TensorBoard. An ensemble (``ensemble=[...]``) writes into
``run_dir``'s folder under its own names (``test_2016_flickr.ensemble3.best.beam5.*``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seq2seq_lite.steering import LineSteering, SteeringWarnings, steering_report

from seq2seq.commands.configs import STEERING_FILES, EvaluateConfig, ScoreConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.config import DecodeConfig, Precision
from seq2seq.data.corpus import read_parallel
from seq2seq.data.steering import read_steering
from seq2seq.decoding.alignment import alignment_record, attention_samples, pharaoh
from seq2seq.decoding.forced import pair_log_probs, perplexity
from seq2seq.decoding.inference import (
    InputTooLong,
    Translation,
    Translator,
    open_model,
    run_bleu_tokenizer,
    score,
)
from seq2seq.decoding.monitor import log_evaluation
from seq2seq.decoding.nbest import moses_lines
from seq2seq.decoding.progress import translate_told
from seq2seq.decoding.splits import run_split
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import Engine, engine_choices, inference_engine
from seq2seq.runtime.run_folder import TrainedRun
from seq2seq.storage.manifest import sha256_file
from seq2seq.storage.rundir import CHECKPOINTS, EVAL_DIR

log = logging.getLogger("seq2seq.evaluate")


def _write(path: Path, lines: Sequence[str]) -> None:
    try:
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    except OSError as e:
        raise Seq2SeqError(f"cannot write {path}: {e}") from e


def _made(folder: Path) -> Path:
    """``folder``, made if it is not there; one line where it cannot be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        hint = "choose out=<a folder>"
        raise Seq2SeqError(f"cannot write into {folder}: {e.strerror or e}; {hint}") from None
    return folder


def _write_hits(path: Path, steer: Sequence[LineSteering]) -> Path:
    """Each line's glossary hits, a JSON list of [source, target] a line; the file's path."""
    _write(path, [json.dumps(s.terms, ensure_ascii=False) for s in steer])
    return path.resolve()


def _write_outputs(
    out_dir: Path, stem: str, translator: Translator, translations: Sequence[Translation]
) -> dict[str, Path]:
    """Hypotheses, alignments, attention weights (and n-best lists) of each line; their paths
    under the result's keys."""
    best = [t.hypotheses[0] if t.hypotheses else None for t in translations]
    files = {"hypotheses": "hyp", "alignments": "align", "attention": "attn.jsonl"}
    if translator.search.nbest > 1:  # Moses format: line number ||| translation ||| score
        files["nbest"] = "nbest"
    paths = {key: (out_dir / f"{stem}.{ext}").resolve() for key, ext in files.items()}
    _write(paths["hypotheses"], [translator.text(h) if h else "" for h in best])
    _write(paths["alignments"], [pharaoh(h.attention.numpy()) if h else "" for h in best])
    records = [
        json.dumps(alignment_record(translator, t), ensure_ascii=False) for t in translations
    ]
    _write(paths["attention"], records)
    if "nbest" in paths:
        nbest = [line for i, t in enumerate(translations) for line in moses_lines(i, translator, t)]
        _write(paths["nbest"], nbest)
    return paths


def _described(run: TrainedRun, ensemble: Sequence[str]) -> str:
    """The model that translates, for the log: an ensemble's other members named too."""
    model = f"{run.checkpoint} (step {run.step})"
    if ensemble:
        model += f" in an ensemble of {len(ensemble) + 1} (with {', '.join(ensemble)})"
    return model


def _translate(
    translator: Translator,
    model: str,
    device: str,
    sources: Sequence[str],
    src_path: Path,
    steer: Sequence[LineSteering] | None = None,
) -> tuple[list[Translation], float]:
    """Translate ``sources`` (logging what, with what and where), each line as ``steer`` has it;
    the translations and the seconds decoding took."""
    log.info(
        "translating %d sentences of %s with %s, beam %d, on %s",
        len(sources),
        src_path,
        model,
        translator.search.beam_size,
        device,
    )
    start = time.perf_counter()
    try:
        translations = translate_told(translator, sources, src_path.name, steer=steer)
    except InputTooLong as e:
        raise Seq2SeqError(e.describe(f"{src_path}, line {e.index + 1}")) from None
    seconds = time.perf_counter() - start
    said = SteeringWarnings(lambda message: log.warning("%s: %s", src_path.name, message))
    said.tell(0, [t.warnings for t in translations])
    said.told()
    return translations, seconds


def _reference_ppl(
    run: TrainedRun, engine: Engine, sources: Sequence[str], references: Sequence[str]
) -> float:
    """The references' perplexity under the model (forced decoding, as validation and
    `seq2seq-score` compute it): OpenNMT-py's "GOLD PPL"."""
    src_ids, tgt_ids = run.src_tok.encode_batch(sources), run.tgt_tok.encode_batch(references)
    log_probs, pieces = pair_log_probs(
        run.model, src_ids, tgt_ids, engine, ScoreConfig.batch_tokens
    )
    return round(perplexity(-float(log_probs.sum()) / int(pieces.sum())), 4)


def _scores(
    texts: Sequence[str],
    references: Sequence[str],
    tokenize: str,
    sources: Sequence[str],
    run: TrainedRun,
    engine: Engine,
) -> tuple[dict[str, float], dict[str, str]]:
    """BLEU, chrF and the references' perplexity; sacrebleu's signatures."""
    found = score(texts, references, tokenize)
    scores = {"bleu": found.bleu, "chrf": found.chrf}
    scores["ppl"] = _reference_ppl(run, engine, sources, references)
    return scores, {"signature": found.bleu_signature, "chrf_signature": found.chrf_signature}


def _settings_part(cfg: EvaluateConfig) -> str:
    """The checkpoint and decoding settings in the output files' names, e.g. ``best.beam5``:
    every decoding setting that differs from its default has its own part, so no setting's files
    overwrite another's (``...beam5.int8``, ``.cp0.2``, ``.alpha1``, ``.len2x+10``, ``.norepeat3``,
    ``.min0.5x+2``, ``.nbest3``, ``.prefix-<file name>``, ``.constraints-...``, ``.terms-...``)."""
    checkpoint = _checkpoint_part(cfg)
    default = DecodeConfig()
    precision = Precision(cfg.precision)
    suffix = "" if precision == Precision.fp32 else f".{precision.value}"
    if cfg.coverage_penalty and cfg.beam_size > 1:  # greedy search has nothing to rerank
        suffix += f".cp{cfg.coverage_penalty:g}"
    if cfg.alpha != default.alpha and cfg.beam_size > 1:  # greedy search does not normalise
        suffix += f".alpha{cfg.alpha:g}"
    if (cfg.max_len_a, cfg.max_len_b) != (default.max_len_a, default.max_len_b):
        suffix += f".len{cfg.max_len_a:g}x+{cfg.max_len_b}"
    if cfg.no_repeat_ngram:
        suffix += f".norepeat{cfg.no_repeat_ngram}"
    if cfg.min_len_a or cfg.min_len_b:
        suffix += f".min{cfg.min_len_a:g}x+{cfg.min_len_b}"
    if cfg.nbest > 1:
        suffix += f".nbest{cfg.nbest}"
    for key in STEERING_FILES:
        if (path := getattr(cfg, key)) is not None:
            suffix += f".{key}-{Path(path).name}"
    if cfg.sampling:  # e.g. test_2016_flickr.best.sample.t0.7.k10.seed1
        return f"{checkpoint}.{sampling_part(cfg)}{suffix}"
    return f"{checkpoint}.beam{cfg.beam_size}{suffix}"


def _checkpoint_part(cfg: EvaluateConfig) -> str:
    """``best``, ``last``, ``averaged``, or a checkpoint file's stem: with a digest of its path
    where it lies outside the run or would take the name of one of the run's own."""
    if cfg.checkpoint in CHECKPOINTS:
        return cfg.checkpoint
    path, run_dir = Path(cfg.checkpoint).resolve(), Path(cfg.run_dir).resolve()
    for name, file in CHECKPOINTS.items():
        if path == run_dir / file:
            return name
    if path.is_relative_to(run_dir) and path.stem not in CHECKPOINTS:
        return path.stem  # checkpoints/step-10
    return f"{path.stem}-{_digest(path)}"


def _digest(path: Path) -> str:
    """Six hex digits of a file's absolute path: what tells files of one name apart."""
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:6]


def _unclaimed(
    out_dir: Path, stem: str, name: str, facts: dict[str, Any], source: Path | None
) -> str:
    """``stem`` (which starts with ``name``), unless the result of that stem is of other files
    of the same names (its JSON's ``source`` where one was given, ``terms``, ... differ from
    these): then ``<name>-<digest of these files' paths>...``, never overwriting it."""
    files = {k: v for k, v in facts.items() if k in STEERING_FILES}
    files = {"source": str(source.resolve()), **files} if source is not None else files
    try:
        result = json.loads((out_dir / f"{stem}.json").read_text(encoding="utf-8"))
        others = {k: result[k] for k, path in files.items() if result.get(k) not in (None, path)}
    except (OSError, ValueError, AttributeError, TypeError):  # none there, or not a result
        return stem
    if not others:
        return stem
    digest = hashlib.sha256("\n".join(files.values()).encode()).hexdigest()[:6]
    apart = f"{name}-{digest}{stem.removeprefix(name)}"
    said = ", ".join(f"{key}={path}" for key, path in others.items())
    log.warning("%s.json is of %s: these results are %s.*", stem, said, apart)
    return apart


def sampling_part(cfg: EvaluateConfig) -> str:
    """The sampling settings in a file name: those that differ from their defaults, and the seed."""
    default = DecodeConfig()
    part = "sample"
    if cfg.temperature != default.temperature:
        part += f".t{cfg.temperature:g}"
    if cfg.top_k:
        part += f".k{cfg.top_k}"
    if cfg.top_p != default.top_p:
        part += f".p{cfg.top_p:g}"
    return f"{part}.seed{cfg.seed}"


def search_facts(cfg: EvaluateConfig) -> dict[str, Any]:
    """The search settings of a result (the bans and the steering files where they are on, the
    sampling ones where it sampled)."""
    keys = ("beam_size", "alpha", "max_len_a", "max_len_b")
    facts = {key: getattr(cfg, key) for key in keys}
    facts["coverage_penalty"] = cfg.coverage_penalty if cfg.beam_size > 1 else 0.0
    if cfg.no_repeat_ngram:
        facts["no_repeat_ngram"] = cfg.no_repeat_ngram
    if cfg.min_len_a or cfg.min_len_b:
        facts |= {"min_len_a": cfg.min_len_a, "min_len_b": cfg.min_len_b}
    facts |= {k: str(Path(getattr(cfg, k)).resolve()) for k in STEERING_FILES if getattr(cfg, k)}
    if cfg.sampling:
        keys = ("temperature", "top_k", "top_p", "seed")
        facts |= {"sampling": True, **{key: getattr(cfg, key) for key in keys}}
    return facts


def evaluate(cfg: EvaluateConfig) -> dict[str, Any]:
    """Translate, score, write the files and TensorBoard events; return the result object."""
    settings, facts = _settings_part(cfg), search_facts(cfg)
    members = [str(Path(d).resolve()) for d in (cfg.run_dir, *cfg.ensemble)]
    out = Path(cfg.out) if cfg.out is not None else None
    engine = inference_engine(cfg)  # this process's threads and device
    run = open_model(cfg, engine)
    run.check_language("input", cfg.input, "source")
    run.check_language("reference", cfg.reference, "target")
    device, engine_facts = engine.describe(), engine_choices(engine)
    translator = Translator.from_run(run, cfg, engine)
    tokenize = run_bleu_tokenizer(run.cfg.data, cfg.bleu_tokenize)
    out_dir = _made(out or run.run_dir / EVAL_DIR)
    split, src_path, ref_path = None, Path(cfg.input or "."), Path(cfg.reference or ".")
    if cfg.input is None:  # a split of the run's corpus, else the two files given
        split, src_path, ref_path = run_split(run, cfg.data_source, cfg.split, out_dir)
    name = Path(split).name if split is not None else src_path.name
    sources, references = read_parallel(src_path, ref_path)
    steer = read_steering(cfg.prefix, cfg.constraints, cfg.terms, sources, name)
    model = _described(run, cfg.ensemble)
    translations, seconds = _translate(translator, model, device, sources, src_path, steer)
    texts = [translator.best_text(t) for t in translations]
    scores, signatures = _scores(texts, references, tokenize, sources, run, engine)
    if cfg.ensemble:  # its own files and tags: a single model's result stays as it was
        name = f"{name}.ensemble{len(members)}"
    stem = f"{name}.{settings}"
    stem = _unclaimed(out_dir, stem, name, facts, src_path if cfg.input is not None else None)
    paths = _write_outputs(out_dir, stem, translator, translations)
    if steer is not None:  # how far the outputs kept it, and the glossary's hits per line
        facts["steering"] = steering_report(texts, steer)
        if cfg.terms:
            paths["term_hits"] = _write_hits(out_dir / f"{stem}.terms.jsonl", steer)
    samples = attention_samples(
        sources, references, translations, run.src_tok, run.tgt_tok, cfg.log_attention
    )
    own_test = split is not None and split in ("test", run.cfg.data.test) and not cfg.ensemble
    log_evaluation(out or run.run_dir, run.step, run.cfg, name, scores, samples, own_test)

    result = {
        **scores,
        **signatures,
        **{key: str(path) for key, path in paths.items()},  # hypotheses, alignments, ...
        "split": split,
        "source": str(src_path.resolve()),
        "reference": str(ref_path.resolve()),
        "checkpoint": str(run.checkpoint.resolve()),
        # which weights were scored, whatever the file is called later (the model card's test)
        "checkpoint_sha256": None if cfg.ensemble else sha256_file(run.checkpoint),
        "runs": members,  # more than one: an ensemble of these run folders
        "step": run.step,
        **facts,
        **engine_facts,  # device, precision, threads, products, int8_engine
        "sentences": len(sources),
        "seconds": round(seconds, 3),  # decoding only
        "sentences_per_second": round(len(sources) / max(seconds, 1e-9), 2),
    }
    _write(out_dir / f"{stem}.json", [json.dumps(result, ensure_ascii=False, indent=2)])
    shown = [result[key] for key in ("bleu", "chrf", "signature", "ppl")]
    log.info("BLEU %.2f, chrF %.2f (%s); the references' perplexity %.2f", *shown)
    return result


main = hydra_command("evaluate")(evaluate)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
