"""``seq2seq-lite RELEASE [--beam K] [--nbest N]``: sentences on stdin, translations on stdout,
one line per line, as ``seq2seq-translate`` reads and writes a pipe: in batches of what has
arrived, each flushed; n-best: the candidates of a line joined by " ||| ", each
``score<TAB>translation``. ``--prefix``, ``--constraints`` and ``--terms`` steer them as
seq2seq's ``prefix=``, ``constraints=`` and ``terms=`` do."""

from __future__ import annotations

import argparse
import os
import re
import sys

from seq2seq_lite import InputTooLong, ReleaseError, Translator
from seq2seq_lite.glossary import read_glossary
from seq2seq_lite.rules import InputError
from seq2seq_lite.steering import (
    SteeringLines,
    constraint_lines,
    constraints_problem,
    glossary_terms,
)
from seq2seq_lite.text import decode_lines, output_line, translated_batches

STDIN = "standard input"  # where the lines come from, in messages

# the search settings this command takes, by the Translator's names (None: the release's own)
SEARCH = (
    "beam_size",
    "nbest",
    "alpha",
    "max_len_a",
    "max_len_b",
    "no_repeat_ngram",
    "min_len_a",
    "min_len_b",
    "max_source_len",
    "batch_size",
)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="seq2seq-lite",
        description="Translate stdin to stdout, one line per line, with a release's ONNX graphs "
        "(no torch), as seq2seq-translate does on a pipe.",
        epilog="Example: seq2seq-lite releases/de-en --beam 5 < source.de > translations.en",
    )
    parser.add_argument("release", help="a release folder exported with onnx=true")
    parser.add_argument(
        "--beam", dest="beam_size", type=int, help="beam size (1: greedy); default: the release's"
    )
    parser.add_argument("--nbest", type=int, help="translations per line (at most --beam)")
    parser.add_argument("--alpha", type=float, help="GNMT length penalty exponent")
    parser.add_argument("--max-len-a", type=float, help="length rule: a * source length + b")
    parser.add_argument("--max-len-b", type=int, help="length rule: a * source length + b")
    parser.add_argument("--no-repeat-ngram", type=int, help="no n-gram twice in an output (0: off)")
    parser.add_argument("--min-len-a", type=float, help="shortest output: a * source length + b")
    parser.add_argument("--min-len-b", type=int, help="shortest output: a * source length + b")
    parser.add_argument("--max-source-len", type=int, help="longest source line, in subwords")
    parser.add_argument("--batch-size", type=int, help="sentences decoded together (16)")
    parser.add_argument("--int8", action="store_true", help="the int8 graphs")
    parser.add_argument("--threads", type=int, help="onnxruntime threads (default: its own)")
    parser.add_argument("--prefix", help="a file: the target prefix of each input line")
    parser.add_argument("--constraints", help="a file: each input line's phrases, tab-separated")
    parser.add_argument("--terms", help="a glossary: source phrase<TAB>target phrase a line")
    return parser.parse_args(argv)


def _as_flags(message: str) -> str:
    """The shared rules name settings as seq2seq's keys (``beam_size=300``): here, as the flags
    typed (``--beam 300``; a key alone, ``no_repeat_ngram must not be negative``, as its flag)."""
    flag = {key: "--" + key.replace("_", "-") for key in SEARCH} | {"beam_size": "--beam"}
    keys = "|".join(SEARCH)
    message = re.sub(rf"\b({keys})=", lambda m: f"{flag[m.group(1)]} ", message)
    return re.sub(rf"(?<![\w-])({keys})\b(?! of)", lambda m: flag[m.group(1)], message)


def _warn(message: str) -> None:
    print(f"seq2seq-lite: {message}", file=sys.stderr)


def _read(key: str, path: str) -> list[str]:
    """The lines of the file given as ``--key path``; one that cannot be read is one line."""
    try:
        with open(path, "rb") as f:
            return decode_lines(f.read(), path)
    except FileNotFoundError:
        raise ReleaseError(f"--{key} {path} does not exist") from None
    except IsADirectoryError:
        raise ReleaseError(f"--{key} {path} is a folder, not a file") from None
    except OSError as e:
        raise ReleaseError(f"cannot read --{key} {path}: {e.strerror or e}") from None


def _steering(args: argparse.Namespace) -> SteeringLines | None:
    """The steering files given (--prefix, --constraints: a line per input line; --terms), read
    before any input; None where none is."""
    given = {k: getattr(args, k) for k in ("prefix", "constraints", "terms") if getattr(args, k)}
    if not given:
        return None
    read = {key: _read(key, path) for key, path in given.items()}  # every file before any input
    phrases = constraint_lines(read["constraints"]) if "constraints" in read else None
    terms = given.get("terms")
    glossary = read_glossary("\n".join(read["terms"]), terms, _warn) if terms else []
    names = {key: f"--{key} {path}" for key, path in given.items()}
    return SteeringLines(read.get("prefix"), phrases, glossary, names, _warn)


def _check_beam(steering: SteeringLines | None, beam_size: int) -> None:
    """Constraints and a glossary (given, entries or not, as seq2seq's commands take it) need
    beam search: refused before any input."""
    if steering is None or not (steering.constraints is not None or "terms" in steering.names):
        return
    given = steering.names
    what = "constraints" if "constraints" in given else glossary_terms(given["terms"])
    if problem := constraints_problem(True, beam_size, what=what):
        raise ReleaseError(problem)


def main(argv: list[str] | None = None) -> None:
    """Translate stdin to stdout in batches of what has arrived, each written as it is done; a
    bad release or line is one message on stderr, exit 1 (the lines before it written)."""
    args = _arguments(argv)
    cores = os.cpu_count() or 1
    if args.threads is not None and args.threads > cores:  # more only wait for each other
        print(
            f"seq2seq-lite: --threads {args.threads} is more than this machine's {cores} cores: "
            f"using {cores}",
            file=sys.stderr,
        )
        args.threads = cores
    try:
        search = {key: getattr(args, key) for key in SEARCH}
        translator = Translator.load(args.release, int8=args.int8, threads=args.threads, **search)
        nbest, steering = translator.search["nbest"], _steering(args)
        _check_beam(steering, translator.search["beam_size"])
        batches = translated_batches(
            sys.stdin.buffer, translator.search["batch_size"], STDIN, translator.translate, steering
        )
        for _, translations in batches:
            for translation in translations:
                sys.stdout.write(output_line(translation.candidates(), nbest) + "\n")
            sys.stdout.flush()
    except InputTooLong as e:  # named as seq2seq-translate names a line on a pipe
        print(f"seq2seq-lite: {e.describe(f'{STDIN}, line {e.index + 1}')}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:  # e.g. `... | head`: the reader left, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C: the lines written so far stay written
        print("seq2seq-lite: interrupted", file=sys.stderr)
        sys.exit(130)
    except (ReleaseError, InputError, OSError, ValueError) as e:
        print(f"seq2seq-lite: {_as_flags(str(e))}", file=sys.stderr)
        sys.exit(1)
    except ImportError as e:  # onnxruntime, imported when the graphs load
        print(f"seq2seq-lite: needs onnxruntime ({e}): pip install onnxruntime", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
