"""The lite translator against torch on one release: the same sentences through
``seq2seq.decoding.inference.Translator`` (torch, fp32) and ``seq2seq_lite.Translator``
(onnxruntime), then how many translations are identical, both BLEU scores, and the largest score
and attention differences where the tokens agree. From the checkout root::

    PYTHONPATH=lite python scripts/lite_parity.py releases/de-en \\
        --source test.de --reference test.en --beam 5 --threads 1 [--no-repeat-ngram 3] \\
        [--prefix prefixes.txt] [--constraints constraints.tsv] [--terms glossary.tsv]

prints one line per release, then one JSON line with every figure; --show lists the sentences
whose translations differ.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import sacrebleu
import torch
from seq2seq_lite import Translator as LiteTranslator

from seq2seq.config import DecodeConfig
from seq2seq.data.steering import SteeringFiles
from seq2seq.decoding.inference import Translator
from seq2seq.runtime.run_folder import load_run


def compare(release: str, lines: list[str], refs: list[str], args) -> dict:
    """The figures of one release (see the module's docstring)."""
    torch.set_num_threads(args.threads)
    steering = dict(
        no_repeat_ngram=args.no_repeat_ngram, min_len_a=args.min_len_a, min_len_b=args.min_len_b
    )
    search = DecodeConfig(beam_size=args.beam, **steering)
    ours = Translator.from_run(load_run(release), search)
    files = SteeringFiles.read(args.prefix, args.constraints, args.terms)
    steer = None if files is None else files.for_lines(lines)
    start = time.perf_counter()
    expected = ours.translate(lines, steer=steer)
    torch_s = time.perf_counter() - start
    lite = LiteTranslator.load(
        release, int8=args.int8, threads=args.threads, beam_size=args.beam, **steering
    )
    start = time.perf_counter()
    found = lite.translate(lines, steer)
    lite_s = time.perf_counter() - start
    texts = [ours.best_text(t) for t in expected], [t.texts[0] if t.texts else "" for t in found]
    pairs = [
        (a.hypotheses[0], b.hypotheses[0])
        for a, b in zip(expected, found, strict=True)
        if a.hypotheses and a.hypotheses[0].tokens == b.hypotheses[0].tokens
    ]
    return {
        "release": release,
        "sentences": len(lines),
        "identical": sum(a == b for a, b in zip(*texts, strict=True)),
        "bleu_torch": round(sacrebleu.corpus_bleu(texts[0], [refs]).score, 2),
        "bleu_lite": round(sacrebleu.corpus_bleu(texts[1], [refs]).score, 2),
        "max_score_difference": max((abs(a.score - b.score) for a, b in pairs), default=None),
        "max_attention_difference": max(
            (float(np.abs(a.attention.numpy() - b.attention).max()) for a, b in pairs),
            default=None,
        ),
        "torch_s": round(torch_s, 1),
        "lite_s": round(lite_s, 1),
        "different": [i for i, (a, b) in enumerate(zip(*texts, strict=True)) if a != b],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="+", help="release folders exported with onnx=true")
    parser.add_argument("--source", required=True, help="source sentences, one per line")
    parser.add_argument("--reference", required=True, help="their reference translations")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--no-repeat-ngram", type=int, default=0, help="no n-gram twice (0: off)")
    parser.add_argument("--min-len-a", type=float, default=0.0, help="minimum length: a * src + b")
    parser.add_argument("--min-len-b", type=int, default=0, help="minimum length: a * src + b")
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime threads")
    parser.add_argument("--int8", action="store_true", help="the lite side runs the int8 graphs")
    parser.add_argument("--show", action="store_true", help="print the differing sentences")
    parser.add_argument("--prefix", help="a target prefix per source line")
    parser.add_argument("--constraints", help="tab-separated target phrases per source line")
    parser.add_argument("--terms", help="a glossary: source phrase<TAB>target phrase")
    args = parser.parse_args()
    lines = Path(args.source).read_text(encoding="utf-8").splitlines()
    refs = Path(args.reference).read_text(encoding="utf-8").splitlines()
    rows = []
    for release in args.releases:
        row = compare(release, lines, refs, args)
        rows.append(row)
        print(
            f"{release}: {row['identical']}/{row['sentences']} identical; BLEU torch "
            f"{row['bleu_torch']}, lite {row['bleu_lite']}; largest score difference "
            f"{row['max_score_difference']:.1e}, attention {row['max_attention_difference']:.1e}"
        )
        if args.show:
            for i in row["different"]:
                print(f"  line {i + 1}: {lines[i]}")
    keys = ("no_repeat_ngram", "min_len_a", "min_len_b", "prefix", "constraints", "terms")
    steering = {k: getattr(args, k) for k in keys}
    print(json.dumps({"beam": args.beam, "int8": args.int8, **steering, "rows": rows}))


if __name__ == "__main__":
    main()
