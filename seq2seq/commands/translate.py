"""`seq2seq-translate`: translate with a trained run, at a prompt or as a filter over piped lines.

On a terminal it is a prompt loop (readline editing, history in ~/.seq2seq_history); otherwise it
translates what has arrived on standard input and writes exactly one line per input line, flushed
as each read's lines are done.
Translations come from `seq2seq.decoding.inference.Translator`, as in evaluation and validation.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import sys
import time
from pathlib import Path

from seq2seq_lite.rules import InputError
from seq2seq_lite.text import output_line, translated_batches

from seq2seq.commands.configs import STEERING_FILES, TranslateConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.data.steering import SteeringFiles
from seq2seq.decoding.alignment import best_alignment_view
from seq2seq.decoding.inference import (
    InputTooLong,
    Translator,
    open_model,
)
from seq2seq.decoding.nbest import candidates, scored_lines
from seq2seq.decoding.progress import LOG_EVERY_S
from seq2seq.errors import DataError, Seq2SeqError
from seq2seq.runtime.engine import inference_engine

log = logging.getLogger("seq2seq.translate")

HISTORY_FILE = Path("~/.seq2seq_history")
QUIT_COMMANDS = (":q", ":quit")
STDIN = "standard input"  # where piped lines come from, in messages


def interactive(translator: Translator, cfg: TranslateConfig, langs: tuple[str, str]) -> None:
    """Prompt loop: a translation (n-best with scores, an alignment view) per line typed;
    `langs`: (source, target) language, for the prompt."""
    try:
        import readline  # importing it gives input() line editing and history
    except ImportError:  # Windows: a plain prompt
        readline = None
    history = HISTORY_FILE.expanduser()
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.read_history_file(history)
        readline.set_history_length(1000)
    src_lang, tgt_lang = langs
    print(
        f"Translating {src_lang} to {tgt_lang}: type a sentence and press Enter; "
        f"{QUIT_COMMANDS[0]}, Ctrl-D or Ctrl-C leaves.",
        file=sys.stderr,
    )
    try:
        while True:
            try:
                line = input(f"{src_lang}> ").strip()
            except EOFError:
                print()
                return
            except UnicodeDecodeError:
                log.warning("that line is not valid text in the terminal's encoding")
                continue
            if not line:
                continue
            if line in QUIT_COMMANDS:
                return
            if re.fullmatch(r":[A-Za-z]+", line):  # :help, :exit: a command, not a sentence
                print(f"{' or '.join(QUIT_COMMANDS)} leaves; any other line is translated")
                continue
            try:
                (translation,) = translator.translate([line])
            except InputTooLong as e:
                log.error("%s", e.describe("this sentence"))
                continue
            if cfg.nbest > 1:
                print("\n".join(scored_lines(translator, translation)))
            else:
                print(translator.text(translation.hypotheses[0]))
            if cfg.show_alignment:
                width = shutil.get_terminal_size().columns
                print(best_alignment_view(translator, translation, width))
    except KeyboardInterrupt:
        print()
    finally:
        if readline is not None:
            with contextlib.suppress(OSError):
                readline.write_history_file(history)


def piped(translator: Translator, cfg: TranslateConfig) -> None:
    """Filter mode: one output line per input line, in order, flushed as each read's are done.

    n-best output keeps that: the candidates of a line are joined by " ||| ", each one
    ``score<TAB>translation``. Alignment views, when asked for, go to stderr. The pipe is read
    and answered by seq2seq-lite's rules (seq2seq_lite.text); invalid UTF-8 is DataError.
    """
    start = told = time.perf_counter()
    files = SteeringFiles.read(cfg.prefix, cfg.constraints, cfg.terms)
    batches = translated_batches(
        sys.stdin.buffer, cfg.batch_size, STDIN, translator.translate, files
    )
    try:
        for done, translations in batches:
            out = []
            for number, translation in enumerate(translations, done + 1):
                out.append(output_line(candidates(translator, translation), cfg.nbest))
                if cfg.show_alignment and translation.hypotheses:
                    view = best_alignment_view(translator, translation, 80)
                    print(f"line {number}:\n{view}", file=sys.stderr, flush=True)
            sys.stdout.write("".join(line + "\n" for line in out))
            sys.stdout.flush()
            if time.perf_counter() - told >= LOG_EVERY_S:  # a long file: how far, how fast
                told = time.perf_counter()
                count = done + len(translations)
                log.info("%s: %d lines translated, %.1f/s", STDIN, count, count / (told - start))
    except InputTooLong as e:
        raise Seq2SeqError(e.describe(f"{STDIN}, line {e.index + 1}")) from None
    except InputError as e:
        raise DataError(str(e)) from None


def run_app(cfg: TranslateConfig) -> None:
    """Load the run named by `run_dir` and translate the terminal's or the pipe's lines."""
    given = [k for k in STEERING_FILES if getattr(cfg, k) is not None]
    if given and sys.stdin.isatty():
        raise Seq2SeqError(f"{given[0]}=<file> is for piped input: it steers the lines piped in")
    engine = inference_engine(cfg)  # this process's threads and device
    run = open_model(cfg, engine)
    translator = Translator.from_run(run, cfg, engine)
    log.info("loaded %s (step %d) on %s", run.checkpoint, run.step, engine.describe())
    if sys.stdin.isatty():
        interactive(translator, cfg, (run.cfg.data.src_lang, run.cfg.data.tgt_lang))
    else:
        piped(translator, cfg)


main = hydra_command("translate")(run_app)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
