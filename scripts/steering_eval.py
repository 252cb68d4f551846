"""Issue 53's measurements on one trained run (docs/decoding.md): constraints drawn from the
references, a glossary from the training data's alignments, and prefixes cut from the references,
each against unconstrained beam search on the same sentences. From the checkout root::

    python scripts/steering_eval.py runs/quickstart --data-source ../shared/data/multi30k \\
        --split test_2016_flickr --out runs/steering [--links train.align --pairs 10000]

Writes the constraints, prefix and glossary files into --out (they are the inputs of the
documented seq2seq-evaluate commands) and prints one JSON line with every figure. Speed: the
unconstrained and constrained searches alternate ``--repeats`` times in this one process (beam 5,
batches of 64); the ratio is of their medians.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections import Counter
from pathlib import Path

import sacrebleu
import torch
from seq2seq_lite.glossary import read_glossary
from seq2seq_lite.steering import LineSteering, steering_report, with_glossary

from seq2seq.config import DecodeConfig
from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.inference import Translator
from seq2seq.runtime.run_folder import load_run

WORD = re.compile(r"^[^\W\d_]{3,}$")  # a word of three letters or more, no digits


def words(text: str) -> list[str]:
    """The words of ``text``, punctuation at their ends cut."""
    return [w.strip(".,;:!?\"'()") for w in text.split()]


def reference_constraints(outputs: list[str], refs: list[str], most: int) -> list[list[str]]:
    """Per sentence, up to ``most`` reference words absent from its unconstrained output."""
    found = []
    for out, ref in zip(outputs, refs, strict=True):
        have = set(words(out))
        wanted = [w for w in dict.fromkeys(words(ref)) if WORD.match(w) and w not in have]
        found.append(wanted[:most])
    return found


def glossary_from_links(src: list[str], tgt: list[str], links: list[str], least: int) -> str:
    """source word<TAB>target word for the word pairs linked at least ``least`` times whose link
    is the source word's most frequent one in four of five of its links (a TSV text)."""
    pairs: Counter = Counter()
    for s, t, line in zip(src, tgt, links, strict=True):
        sw, tw = s.split(), t.split()
        for link in line.split():
            i, j = (int(x) for x in link.split("-"))
            a, b = sw[i].strip(".,;:!?\"'()"), tw[j].strip(".,;:!?\"'()")
            if WORD.match(a) and WORD.match(b) and len(a) > 3:
                pairs[a, b] += 1
    per_source: Counter = Counter()
    for (a, _), n in pairs.items():
        per_source[a] += n
    best = {}
    for (a, b), n in pairs.most_common():
        if a not in best and n >= least and n >= 0.8 * per_source[a]:
            best[a] = b
    return "".join(f"{a}\t{b}\n" for a, b in sorted(best.items()))


def timed(translator: Translator, lines: list[str], steer) -> tuple[list, float]:
    start = time.perf_counter()
    found = translator.translate(lines, steer=steer)
    return found, time.perf_counter() - start


def bleu(texts: list[str], refs: list[str]) -> float:
    return round(sacrebleu.corpus_bleu(texts, [refs]).score, 2)


def constraints_figures(
    translator: Translator, src: list[str], refs: list[str], out: Path, repeats: int
) -> tuple[dict, list[str]]:
    """Two reference words missing from each unconstrained output, asked for as constraints:
    how many are placed, BLEU, and the time against unconstrained search (alternating, back to
    back); and the unconstrained outputs."""
    plain, _ = timed(translator, src, None)
    plain_texts = [translator.best_text(t) for t in plain]
    wanted = reference_constraints(plain_texts, refs, 2)
    (out / "constraints.tsv").write_text("".join("\t".join(w) + "\n" for w in wanted))
    steer = [LineSteering("", w) for w in wanted]
    seconds: dict[str, list[float]] = {"plain": [], "constrained": []}
    for _ in range(repeats):
        plain, s = timed(translator, src, None)
        seconds["plain"].append(s)
        steered, s = timed(translator, src, steer)
        seconds["constrained"].append(s)
    texts = [translator.best_text(t) for t in steered]
    figures = {
        **steering_report(texts, steer),
        "sentences_with_any": sum(bool(w) for w in wanted),
        "bleu_plain": bleu(plain_texts, refs),
        "bleu_constrained": bleu(texts, refs),
        "seconds_plain": [round(x, 2) for x in seconds["plain"]],
        "seconds_constrained": [round(x, 2) for x in seconds["constrained"]],
        "slowdown": round(
            statistics.median(seconds["constrained"]) / statistics.median(seconds["plain"]), 3
        ),
    }
    return figures, plain_texts


def prefix_figures(
    translator: Translator, src: list[str], refs: list[str], plain_texts: list[str], out: Path
) -> dict:
    """The reference's first half as each sentence's prefix: outputs that keep it, and BLEU of
    the rest against the unconstrained output's rest."""
    cut = [max(1, len(r.split()) // 2) for r in refs]  # the reference's first half, as words
    prefixes = [" ".join(r.split()[:n]) for r, n in zip(refs, cut, strict=True)]
    (out / "prefixes.txt").write_text("".join(p + "\n" for p in prefixes))
    found, _ = timed(translator, src, [LineSteering(p) for p in prefixes])
    completed = [translator.best_text(t) for t in found]
    rest = [" ".join(r.split()[n:]) for r, n in zip(refs, cut, strict=True)]
    return {
        "outputs_starting_with_prefix": sum(
            c.startswith(p) for c, p in zip(completed, prefixes, strict=True)
        ),
        "sentences": len(src),
        "bleu_rest_continued": bleu(
            [c[len(p) :].strip() for c, p in zip(completed, prefixes, strict=True)], rest
        ),
        "bleu_rest_unconstrained": bleu(
            [" ".join(t.split()[n:]) for t, n in zip(plain_texts, cut, strict=True)], rest
        ),
    }


def glossary_figures(
    translator: Translator, src: list[str], refs: list[str], plain_texts: list[str], args
) -> dict:
    """A glossary from the training pairs' links, applied to every sentence."""
    data = Path(args.data_source)
    train = read_parallel(data / "train.de.gz", data / "train.en.gz", args.pairs)
    links = Path(args.links).read_text().splitlines()
    glossary = glossary_from_links(*train, links, 10)
    (Path(args.out) / "glossary.tsv").write_text(glossary)
    entries = read_glossary(glossary, "glossary.tsv")
    steer = [with_glossary(None, line, entries) for line in src]
    found, _ = timed(translator, src, steer)
    texts = [translator.best_text(t) for t in found]
    return {
        "entries": len(entries),
        **steering_report(texts, steer),
        "bleu_plain": bleu(plain_texts, refs),
        "bleu_glossary": bleu(texts, refs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--data-source", required=True, help="folder of the Multi30k files")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--out", required=True, help="folder for the files made")
    parser.add_argument("--links", help="Pharaoh links of the first --pairs training pairs")
    parser.add_argument("--pairs", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data_source)
    src, refs = read_parallel(data / f"{args.split}.de.gz", data / f"{args.split}.en.gz")
    translator = Translator.from_run(load_run(args.run_dir), DecodeConfig(beam_size=5))
    figures: dict = {"run": args.run_dir, "threads": torch.get_num_threads()}
    figures["constraints"], plain = constraints_figures(translator, src, refs, out, args.repeats)
    figures["prefix"] = prefix_figures(translator, src, refs, plain, out)
    if args.links:
        figures["glossary"] = glossary_figures(translator, src, refs, plain, args)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
