"""The statistical aligner beside attention: eflomal (Östling & Tiedemann 2016) aligns gold pairs
after training on a parallel corpus plus those pairs, as aligners are run, and the same AER code
as ``seq2seq-align`` scores it. Needs ``pip install -e '.[align]'``. From the checkout root::

    python scripts/statistical_align.py --pairs ../shared/data/alignment/en-fr.hansards.txt \\
        --gold ../shared/data/alignment/en-fr.hansards.talp \\
        --train ../shared/data/multi30k/train.en.gz ../shared/data/multi30k/train.fr.gz \\
        --out runs/eflomal_en_fr

writes forward, reverse and symmetrised links of the gold pairs (Pharaoh, 0-based) into ``--out``
and prints one JSON line of AER, precision and recall per direction and symmetrisation. The
training corpus is lowercased and split into words by a regular expression (the gold pairs are
lowercased and tokenized already); ``--train`` may be left out to align the pairs alone. Each
distinct pair is aligned once: lines repeated in the corpus, or gold pairs also in it, get the
links of their one copy.

Pairs without gold links (``--raw-pairs SOURCE TARGET``: two plain or .gz files, split into
words by the same expression, case kept) are written as ``<out>/pairs.txt`` for seq2seq-align,
and each direction's and symmetrisation's links as ``<out>/<name>.talp`` (1-based, all sure):
gold for measuring how far attention agrees with the aligner where no human links exist.

``--train-links FILE`` also writes the links of the training lines, symmetrised
(``--train-symmetrize``), in the training text's own words (split at whitespace), one line per
training line: guided alignment's input (``seq2seq-train train.guided_alignment=FILE``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from seq2seq.config_choices import Symmetrize
from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.aer import alignment_scores, read_gold
from seq2seq.decoding.wordalign import Links, pharaoh_line, read_pairs, read_pharaoh, symmetrize

# words, a word with its elided apostrophe (French "l'", "qu'"), or one other character
WORD = re.compile(r"\w+'|\w+|[^\w\s]")


def tokenize(line: str, lower: bool = True) -> tuple[str, list[int]]:
    """The line (lowercased) split into tokens, and the whitespace word of each token."""
    tokens, word_of = [], []
    for index, word in enumerate(line.split()):
        for token in WORD.findall(word.lower() if lower else word):
            tokens.append(token)
            word_of.append(index)
    return " ".join(tokens), word_of


def _tokenized(
    source: Path, target: Path, lower: bool = True
) -> list[tuple[list[str], list[list[int]]]]:
    """Both sides of two parallel files, tokenized: (lines, word of each token) per side."""
    sides = []
    for lines in read_parallel(source, target):
        tokenized = [tokenize(line, lower) for line in lines]
        sides.append(([text for text, _ in tokenized], [word_of for _, word_of in tokenized]))
    return sides


def _write_train_links(
    path: Path, found: dict[str, list[Links]], words: tuple[list, list], how: Symmetrize
) -> None:
    """Training lines' links in their whitespace words (tokens mapped back to their word)."""
    count = len(words[0])  # the training lines come first, the gold pairs after them
    both = zip(found["forward"][:count], found["reverse"][:count], *words, strict=True)
    lines = []
    for forward, reverse, src_words, tgt_words in both:
        tokens = symmetrize(forward, reverse, how)
        lines.append(pharaoh_line({(src_words[i], tgt_words[j]) for i, j in tokens}))
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _distinct(src: list[str], tgt: list[str]) -> tuple[list[tuple[str, str]], list[int]]:
    """Each distinct pair once (a corpus with repeated lines, like the gold pairs mixed into the
    training data ten times, would skew the aligner's counts), and each line's index in them."""
    first: dict[tuple[str, str], int] = {}
    index = [first.setdefault(pair, len(first)) for pair in zip(src, tgt, strict=True)]
    return list(first), index


def _raw_pairs(source: Path, target: Path, out: Path) -> list:
    """Pairs of two plain files, split into words (case kept), written to ``out/pairs.txt``."""
    (sources, _), (targets, _) = _tokenized(source, target, lower=False)
    lines = [f"{s} ||| {t}" for s, t in zip(sources, targets, strict=True)]
    (out / "pairs.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return read_pairs(out / "pairs.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pairs_arg = parser.add_mutually_exclusive_group(required=True)
    pairs_arg.add_argument("--pairs", type=Path, help="'source ||| target' lines, tokenized")
    pairs_arg.add_argument("--raw-pairs", type=Path, nargs=2, metavar=("SOURCE", "TARGET"))
    parser.add_argument("--gold", type=Path, help="i-j sure, ipj possible, 1-based")
    parser.add_argument("--train", type=Path, nargs=2, metavar=("SOURCE", "TARGET"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train-links", type=Path, help="write the training lines' links here")
    parser.add_argument("--train-symmetrize", type=Symmetrize, default="grow_diag_final_and")
    args = parser.parse_args()
    try:
        from eflomal import Aligner
    except ImportError:
        sys.exit("eflomal is not installed: pip install -e '.[align]' in the seq2seq checkout")
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = read_pairs(args.pairs) if args.pairs else _raw_pairs(*args.raw_pairs, args.out)
    gold = read_gold(args.gold, pairs) if args.gold else None
    (src, src_words), (tgt, tgt_words) = (
        _tokenized(*args.train) if args.train else (([], []), ([], []))
    )
    src += [" ".join(s).lower() for s, _ in pairs]
    tgt += [" ".join(t).lower() for _, t in pairs]
    distinct, index = _distinct(src, tgt)
    forward, reverse = args.out / "forward.align", args.out / "reverse.align"
    start = time.perf_counter()
    Aligner().align(
        [s for s, _ in distinct],
        [t for _, t in distinct],
        links_filename_fwd=str(forward),
        links_filename_rev=str(reverse),
    )
    seconds = time.perf_counter() - start
    every = {
        name: [links[i] for i in index]
        for name, links in (("forward", read_pharaoh(forward)), ("reverse", read_pharaoh(reverse)))
    }
    if args.train_links is not None:
        _write_train_links(args.train_links, every, (src_words, tgt_words), args.train_symmetrize)
    found = {name: links[-len(pairs) :] for name, links in every.items()}  # the pairs come last
    for how in Symmetrize:
        both = zip(found["forward"], found["reverse"], strict=True)
        found[how.value] = [symmetrize(f, b, how) for f, b in both]
    result = {}
    for name, links in found.items():
        path = args.out / f"{name}.gold.align"
        path.write_text("".join(pharaoh_line(x) + "\n" for x in links), encoding="utf-8")
        if gold is None:
            talp = [" ".join(f"{i + 1}-{j + 1}" for i, j in sorted(x)) for x in links]
            (args.out / f"{name}.talp").write_text("".join(x + "\n" for x in talp))
            continue
        scores = alignment_scores(links, gold)
        result[name] = {key: round(scores[key], 4) for key in ("aer", "precision", "recall")}
        print(
            f"{name:20} AER {scores['aer']:.3f}  P {scores['precision']:.3f}  "
            f"R {scores['recall']:.3f}",
            file=sys.stderr,
        )
    result.update(aligner="eflomal", sentences=len(distinct), seconds=round(seconds, 1))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
