"""`seq2seq-distill`: sequence-level knowledge distillation (Kim & Rush 2016). A teacher (a run
or release; an ensemble with ``ensemble=[...]``) translates every source of a split of its
corpus with beam search (``pick=closest nbest=5``: of its 5 best, the nearest to the reference,
Kim & Rush's Seq-Inter); ``out=`` receives the sources and the teacher's translations as a
corpus that ``data=custom`` reads (``<split>.<src>.gz``, ``<split>.<tgt>.gz``), and the original
pairs followed by the distilled ones (``<split>_mixed.*``), to train a student on either::

    seq2seq-distill run_dir=runs/teacher ensemble=[runs/t2,runs/t3] out=data/distilled
    seq2seq-train data=custom data.train=data/distilled/train data.valid=... data.test=...

It decodes ``chunk_sentences`` at a time and keeps each chunk until the corpus is written, so
an interrupted command run again takes up where it stopped (docs/training.md).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from seq2seq.commands.configs import DistillConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.config_choices import Pick
from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.chunked import PARTS, Nearest, translate_in_chunks, write_gz
from seq2seq.decoding.inference import Translator, open_model, run_bleu_tokenizer
from seq2seq.decoding.settings import BAN_DEFAULTS
from seq2seq.decoding.splits import run_split
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import inference_engine

log = logging.getLogger("seq2seq.distill")


def distill(cfg: DistillConfig) -> dict:
    """Write the distilled corpus of ``cfg``; return what was written (also printed as JSON)."""
    engine = inference_engine(cfg)  # this process's threads and device
    run = open_model(cfg, engine)
    out = Path(cfg.out)
    split, src_file, tgt_file = run_split(run, cfg.data_source, cfg.split, out / PARTS)
    src_lang, tgt_lang = run.cfg.data.src_lang, run.cfg.data.tgt_lang
    name = cfg.split if cfg.split in ("train", "valid", "test") else Path(split).name
    names = [f"{n}.{lang}" for n in (name, f"{name}_mixed") for lang in (src_lang, tgt_lang)]
    refuse_shadowed(out, names, (src_file, tgt_file))
    sources, originals = read_parallel(src_file, tgt_file)
    teachers = [str(Path(p).resolve()) for p in [cfg.run_dir, *cfg.ensemble]]
    facts = {
        "teachers": teachers,
        "checkpoint": cfg.checkpoint,
        "split": split,
        **{k: getattr(cfg, k) for k in ("beam_size", "alpha", "max_len_a", "max_len_b")},
        **{k: getattr(cfg, k) for k in BAN_DEFAULTS},  # they change what is written
        "pick": cfg.pick.value,
        **({"nbest": cfg.nbest} if cfg.pick is Pick.closest else {}),
        "precision": engine.precision.value,
        "chunk_sentences": cfg.chunk_sentences,
    }
    log.info(
        "distilling %d sentences of %s with %s on %s",
        len(sources),
        split,
        teachers,
        engine.describe(),
    )
    translator = Translator.from_run(run, cfg, engine)  # decodes under the engine's autocast
    nearest = None
    if cfg.pick is Pick.closest:
        nearest = Nearest(originals, run_bleu_tokenizer(run.cfg.data))
    distilled = translate_in_chunks(translator, sources, out, cfg.chunk_sentences, facts, nearest)
    contents = (sources, distilled, [*sources, *sources], [*originals, *distilled])
    files = {f"{n}.gz": lines for n, lines in zip(names, contents, strict=True)}
    for file, lines in files.items():
        write_gz(out / file, lines)
    changed = sum(a != b for a, b in zip(originals, distilled, strict=True))
    result = {**facts, "out": str(out.resolve()), "files": sorted(files), "sentences": len(sources)}
    result["differ_from_reference"] = changed
    (out / "distill.json").write_text(json.dumps(result, indent=1))
    shutil.rmtree(out / PARTS)  # the chunks were for resuming; every setting is in distill.json
    return result


def refuse_shadowed(out: Path, names: list[str], inputs: tuple[Path, Path]) -> None:
    """Refuse an ``out=`` where a file to write (``<name>.gz``) is one of the split's own, or
    sits beside a plain ``<name>`` that a corpus reader would take in its place."""
    for name in names:
        written, plain = out / f"{name}.gz", out / name
        if any(written.resolve() == Path(i).resolve() for i in inputs):
            raise Seq2SeqError(
                f"out={out} would overwrite the split's own {written}: choose another"
            )
        if plain.exists():
            raise Seq2SeqError(
                f"out={out} holds {plain}, which data=custom would read in place of the distilled "
                f"{written.name}: choose another out= folder"
            )


main = hydra_command("distill")(distill)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
