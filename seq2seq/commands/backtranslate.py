"""`seq2seq-backtranslate`: back-translation (Sennrich et al. 2016). A run of the reverse direction
translates monolingual text of its source language (the target language of the model to train)
into synthetic sources; ``out=`` receives the synthetic pairs (``synthetic.<lang>.gz``) and, with
``parallel=<prefix of the real pairs>``, the real pairs followed by synthetic ones at each of
``ratios=`` (``mixed_<ratio>.*``: 2 means two synthetic pairs per real pair), for data=custom::

    seq2seq-backtranslate run_dir=runs/en_de mono=mono.en.gz parallel=data/train ratios=[1,2] \\
        out=data/bt
    seq2seq-train data=custom data.train=data/bt/mixed_1 data.valid=... data.test=...

Beam search by default; ``sampling=true`` draws instead (Edunov et al. 2018); ``tag=@bt@`` puts a
tag before every synthetic source (Caswell et al. 2019). Decoded in chunks and resumable, as
seq2seq-distill; other ratios or another tag from the same decoding cost no decoding.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from seq2seq.commands.configs import BacktranslateConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.data.corpus import prefix_files, read_parallel
from seq2seq.data.stream import iter_lines
from seq2seq.decoding.chunked import translate_in_chunks, write_gz
from seq2seq.decoding.inference import Translator, open_model
from seq2seq.decoding.settings import RECORDED_KEYS, SAMPLING_KEYS
from seq2seq.errors import DataError, Seq2SeqError
from seq2seq.runtime.engine import inference_engine

log = logging.getLogger("seq2seq.backtranslate")


def _mixtures(cfg: BacktranslateConfig, real: tuple[list[str], list[str]], texts: int) -> dict:
    """{ratio: synthetic pairs it takes}, refused in one line where the text is too short."""
    wanted = {ratio: round(ratio * len(real[0])) for ratio in cfg.ratios}
    if max(wanted.values()) > texts:
        ratio = max(wanted, key=wanted.get)
        raise Seq2SeqError(
            f"ratios: {ratio:g} takes {wanted[ratio]} synthetic pairs for {len(real[0])} real "
            f"ones, and mono= has {texts} sentences"
        )
    return wanted


def backtranslate(cfg: BacktranslateConfig) -> dict:
    """Write the synthetic and mixed corpora of ``cfg``; return what was written."""
    texts = [line for line in iter_lines(Path(cfg.mono)) if line]
    if not texts:
        raise DataError(f"mono={cfg.mono} holds no sentences")
    engine = inference_engine(cfg)  # this process's threads and device
    run = open_model(cfg, engine)
    run.check_language("mono", cfg.mono, "source")
    mono_lang, synthetic_lang = run.cfg.data.src_lang, run.cfg.data.tgt_lang
    real: tuple[list[str], list[str]] = ([], [])
    wanted: dict[float, int] = {}  # ratio -> synthetic pairs it takes
    if cfg.parallel is not None:
        files = prefix_files(cfg.parallel, synthetic_lang, mono_lang)
        real = read_parallel(*files)
        wanted = _mixtures(cfg, real, len(texts))
    decoded = max(wanted.values()) if wanted else len(texts)  # only what the mixtures take
    texts = texts[:decoded]
    search = RECORDED_KEYS + (SAMPLING_KEYS if cfg.sampling else ())  # what its record holds
    model = [str(Path(p).resolve()) for p in [cfg.run_dir, *cfg.ensemble]]
    facts = {"reverse_model": model, "checkpoint": cfg.checkpoint}
    facts.update({k: getattr(cfg, k) for k in search})
    facts.update(precision=engine.precision.value, chunk_sentences=cfg.chunk_sentences)
    log.info("back-translating %d sentences with %s on %s", len(texts), model, engine.describe())
    translator = Translator.from_run(run, cfg, engine)
    synthetic = translate_in_chunks(translator, texts, Path(cfg.out), cfg.chunk_sentences, facts)
    if cfg.tag:
        synthetic = [f"{cfg.tag} {line}" for line in synthetic]
    files = {f"synthetic.{synthetic_lang}.gz": synthetic, f"synthetic.{mono_lang}.gz": texts}
    for ratio, n in wanted.items():
        files[f"mixed_{ratio:g}.{synthetic_lang}.gz"] = real[0] + synthetic[:n]
        files[f"mixed_{ratio:g}.{mono_lang}.gz"] = real[1] + texts[:n]
    for file, lines in files.items():
        write_gz(Path(cfg.out) / file, lines)
    mixtures = {f"mixed_{r:g}": {"real": len(real[0]), "synthetic": n} for r, n in wanted.items()}
    result = {**facts, "tag": cfg.tag, "sentences": len(texts), "mixtures": mixtures}
    result.update(out=str(Path(cfg.out).resolve()), files=sorted(files))
    (Path(cfg.out) / "backtranslate.json").write_text(json.dumps(result, indent=1))
    return result


main = hydra_command("backtranslate")(backtranslate)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
