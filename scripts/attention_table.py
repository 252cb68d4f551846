"""The attention comparison's table and pictures, from its run folders (docs/attention.md).

From the checkout root, after ``seq2seq-train -m experiment=attention_comparison
hydra.sweep.dir=runs/compare/de_en`` (and ``experiment=attention_comparison_en_fr`` for AER)::

    python scripts/attention_table.py runs/compare/de_en runs/compare/en_fr \
        --record docs/attention_comparison.jsonl --pictures docs \
        --docs docs/attention.md docs/attention.zh.md

``--docs docs/attention.md docs/attention.zh.md`` writes the tables into those pages, between
their ``<!-- attention_table:NAME -->`` marks, each in its page's language: Chinese for a
``*.zh.md`` page (headers and words from ``WORDS``; numbers and row names unchanged), English
otherwise; ``--lang`` picks the language of what is printed. ``--record`` keeps one summary per
run (direction, row, seed) in a file that is committed, so a comparison trained over several
sessions or machines makes one table; the table and pictures are made from every record in it.

Every run folder under the arguments is evaluated on its test split where it has no result yet
(``seq2seq-evaluate``, beam 5; with ``--coverage-penalty B`` also with that penalty), and runs
trained with gold links (``log.alignment_pairs``) are aligned against them (``seq2seq-align``).
Runs of one comparison row (``+compare=<row>``, with any other override that changes what trains
appended, e.g. ``luong model.attention.scale=false``; seeds, paths and threads aside) and direction
form one line: the mean and spread over their seeds of test BLEU and chrF, validation BLEU over
updates, AER, attention entropy, repeated bigrams, unattended source words and parameters; with
``--speed``, the printed table adds training speed (of the runs with the most threads) and
decoding speed, which the pages leave out: the records do not say which runs shared the machine
with other jobs. A row whose BLEU is within the seeds' spread of the best row's is marked so.
``--pictures`` writes the validation curves and the heatmaps of every row on the same test
sentence.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from attention_pictures import picture_curves, picture_heatmaps
from attention_runs import ALIGN_METHODS, Run, find_runs, merged, read_run, speed_runs

LANGUAGES = ("en", "zh")
# every word the tables print, in Chinese (docs/attention.zh.md); a number, a row name (a config
# name such as luong_concat) and a unit stay as they are. "{}" stands for a number.
WORDS = {
    "direction": "方向",
    "row": "对比行",
    "seeds": "种子",
    "test BLEU": "测试集 BLEU",
    "chrF": "chrF",
    "gap to best": "与最好一行之差",
    "val BLEU @{}": "验证集 BLEU @{}",
    "AER (argmax)": "AER（argmax）",
    "AER (best method)": "AER（最佳读出方法）",
    "entropy (nats, heads averaged)": "熵（nats，各头平均后）",
    "repeated bigrams /100 words": "重复二元组 /100 词",
    "unattended src words %": "未被关注的源词 %",
    "train tok/s": "训练 词元/s",
    "decode sent/s": "解码 句/s",
    "parameters": "参数量",
    "β": "β",
    "@{}": "@{}",
    "best": "最好",
    "−{} (within the seeds' spread)": "−{}（在种子波动之内）",
    "argmax": "argmax",
    "argmax shift -1": "argmax，错后一步",
    "argmax shift +1": "argmax，提前一步",
    "threshold 0.3": "阈值 0.3",
    "Summarised on: {}": "汇总所用的机器：{}",
}
LANGUAGE_NAMES = {"de": "德", "en": "英", "fr": "法", "zh": "中"}  # of a direction, in Chinese


# the printed tables' captions: the entropy table's, the coverage penalty's
CAPTIONS = {
    "en": (
        "Attention entropy on the validation set (nats, every head's row) by update:",
        "Coverage penalty in beam search:",
    ),
    "zh": ("验证集上注意力的熵（nats，每个头各算一行），按更新次数：", "束搜索中的覆盖惩罚："),
}


def say(text: str, lang: str, *numbers: object) -> str:
    """``text`` (a key of WORDS) in ``lang``, each "{}" filled with the next of ``numbers``."""
    if lang not in LANGUAGES:
        raise ValueError(f"no tables in {lang!r}: {', '.join(LANGUAGES)}")
    return (text if lang == "en" else WORDS[text]).format(*numbers)


def say_direction(direction: str, lang: str) -> str:
    """A direction: "de→en" in English, "德→英" in Chinese (a language without a name stays)."""
    if lang == "en":
        return direction
    return "→".join(LANGUAGE_NAMES.get(code, code) for code in direction.split("→"))


def mean_spread(values: Sequence[float], digits: int = 2) -> str:
    """ "mean ± half the range" over seeds (the value alone for one seed)."""
    values = [v for v in values if v is not None and np.isfinite(v)]
    if not values:
        return "–"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {(max(values) - min(values)) / 2:.{digits}f}"


def groups(runs: Sequence[Run]) -> dict[tuple[str, str], list[Run]]:
    grouped: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in runs:
        grouped[(run.direction, run.row)].append(run)
    return dict(grouped)


def within_spread(group: list[Run], best: list[Run]) -> bool:
    """Whether this row's mean BLEU is within the seeds' spread of the best row's: the gap is
    no larger than the wider range over seeds of the two."""
    ours = [r.measures["bleu"] for r in group]
    theirs = [r.measures["bleu"] for r in best]
    spread = max(max(ours) - min(ours), max(theirs) - min(theirs))
    return statistics.fmean(theirs) - statistics.fmean(ours) <= spread


def aer_cells(group: list[Run], lang: str = "en") -> list[str]:
    """AER by argmax at the word's own step, and by the method that does best for this row."""
    if any(r.aer is None for r in group):
        return ["–", "–"]
    best = min(ALIGN_METHODS, key=lambda m: statistics.fmean(r.aer[m] for r in group))
    argmax = mean_spread([r.aer["argmax"] for r in group], 3)
    method = say(best, lang)
    best_cell = mean_spread([r.aer[best] for r in group], 3)
    return [argmax, f"{best_cell} ({method})" if lang == "en" else f"{best_cell}（{method}）"]


def header(cells: Sequence[str]) -> list[str]:
    """A table's first two Markdown lines: its header cells and the rule below them."""
    return ["| " + " | ".join(cells) + " |", "|" + "---|" * len(cells)]


def table(runs: Sequence[Run], lang: str = "en", speed: bool = True) -> str:
    """One Markdown line per direction and row, best mean test BLEU first. ``speed`` adds the
    training and decoding speeds, whose conditions (threads, other jobs) differ from run to run."""
    steps = sorted({step for run in runs for step in run.curve})
    head = ["direction", "row", "seeds", "test BLEU", "chrF", "gap to best"]
    head = [say(w, lang) for w in head] + [say("val BLEU @{}", lang, s) for s in steps]
    words = ["AER (argmax)", "AER (best method)", "entropy (nats, heads averaged)"]
    words += ["repeated bigrams /100 words", "unattended src words %"]
    words += ["train tok/s", "decode sent/s"] if speed else []
    head += [say(w, lang) for w in [*words, "parameters"]]
    lines = header(head)
    by_direction: dict[str, list[list[Run]]] = defaultdict(list)
    for (direction, _), group in groups(runs).items():
        by_direction[direction].append(group)
    for direction, rows in sorted(by_direction.items()):
        rows.sort(key=lambda g: -statistics.fmean(r.measures["bleu"] for r in g))
        best = rows[0]
        for group in rows:
            m = [r.measures for r in group]
            gap = statistics.fmean(r.measures["bleu"] for r in best) - statistics.fmean(
                x["bleu"] for x in m
            )
            if group is best:
                gap_cell = say("best", lang)
            elif within_spread(group, best):
                gap_cell = say("−{} (within the seeds' spread)", lang, f"{gap:.2f}")
            else:
                gap_cell = f"−{gap:.2f}"
            cells = [
                say_direction(direction, lang),
                group[0].row,
                ",".join(str(r.seed) for r in sorted(group, key=lambda r: r.seed)),
            ]
            cells += [mean_spread([x["bleu"] for x in m]), mean_spread([x["chrf"] for x in m])]
            cells += [gap_cell]
            cells += [mean_spread([r.curve.get(s) for r in group]) for s in steps]
            cells += [*aer_cells(group, lang), mean_spread([x["entropy"] for x in m])]
            cells += [
                mean_spread([x["repeats"] for x in m]),
                mean_spread([x["unattended"] for x in m], 1),
            ]
            if speed:
                cells += [mean_spread([r.tokens_per_second for r in speed_runs(group)], 0)]
                cells += [mean_spread([x["sentences_per_second"] for x in m], 1)]
            cells += [f"{group[0].parameters / 1e6:.2f} M"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def coverage_table(runs: Sequence[Run], lang: str = "en") -> str:
    """Each row without and with the coverage penalty in beam search (each β its records hold)."""
    head = ["direction", "row", "β", "test BLEU"]
    head += ["repeated bigrams /100 words", "unattended src words %"]
    lines = header([say(w, lang) for w in head])
    for (direction, row), group in sorted(groups(runs).items()):
        penalised = [r.penalised for r in group if r.penalised is not None]
        if len(penalised) < len(group):
            continue
        betas = sorted({p["beta"] for p in penalised})
        by_beta = [(b, [p for p in penalised if p["beta"] == b]) for b in betas]
        for beta, results in [(0.0, [r.measures for r in group]), *by_beta]:
            cells = [say_direction(direction, lang), row, f"{beta:g}"]
            cells += [mean_spread([x["bleu"] for x in results])]
            cells += [
                mean_spread([x["repeats"] for x in results]),
                mean_spread([x["unattended"] for x in results], 1),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def entropy_table(runs: Sequence[Run], lang: str = "en") -> str:
    """Each row's attention entropy on the validation set (nats, mean over seeds) by update: how
    soon and how far its weights harden. Every head's row counts as one (validation's
    attention_statistics), where the main table's entropy is of the rows averaged over heads."""
    steps = sorted({step for run in runs for step in run.entropy_curve})
    head = [say("direction", lang), say("row", lang), *(say("@{}", lang, s) for s in steps)]
    lines = header(head)
    for (direction, row), group in sorted(groups(runs).items()):
        cells = [
            say_direction(direction, lang),
            row,
            *(mean_spread([r.entropy_curve.get(s) for r in group]) for s in steps),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables(runs: Sequence[Run], lang: str = "en", speed: bool = False) -> dict[str, str]:
    """Every table of the pages, by the name of its marks, in ``lang``."""
    machines = "; ".join(sorted({r.cpu for r in runs}))
    return {
        "main": table(runs, lang, speed),
        "entropy": entropy_table(runs, lang),
        "coverage": coverage_table(runs, lang),
        "machines": say("Summarised on: {}", lang, machines),
    }


def page_language(path: Path) -> str:
    """The language of a page by its name: "zh" for ``*.zh.md``, else "en"."""
    return "zh" if path.name.endswith(".zh.md") else "en"


def write_into(path: Path, tables: dict[str, str]) -> None:
    """Replace each table between ``<!-- attention_table:NAME -->`` and ``<!-- /attention_table
    -->`` in a Markdown file (docs/attention.md and its translation) with the new one."""
    text = path.read_text(encoding="utf-8")
    for name, body in tables.items():
        pattern = re.compile(
            rf"(<!-- attention_table:{name} -->\n).*?(\n<!-- /attention_table -->)", re.S
        )
        if not pattern.search(text):
            sys.exit(f"{path}: no <!-- attention_table:{name} --> ... <!-- /attention_table -->")
        text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(2), text)
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", type=Path, help="sweep folders or run folders")
    parser.add_argument("--record", type=Path, help="JSON lines of every run summarised so far")
    parser.add_argument("--pictures", type=Path, help="write the curves and heatmaps here")
    parser.add_argument("--docs", type=Path, nargs="*", default=[], help="Markdown to update")
    parser.add_argument("--coverage-penalty", type=float, default=0.2, help="β, 0: not decoded")
    parser.add_argument("--sentence", type=int, default=7, help="test sentence of the heatmaps")
    parser.add_argument("--lang", choices=LANGUAGES, default="en", help="of the printed tables")
    parser.add_argument(
        "--speed", action="store_true", help="print training and decoding speed (not the pages)"
    )
    args = parser.parse_args(argv)
    if missing := [str(path) for path in args.docs if not path.is_file()]:
        sys.exit(f"--docs: no such file: {', '.join(missing)}")
    summarised = []
    for folder in find_runs(args.roots):
        print(f"reading {folder}", file=sys.stderr)
        summarised.append(read_run(folder, args.coverage_penalty, args.sentence))
    runs = merged(args.record, summarised)
    if not runs:
        sys.exit("no finished run folders (config.yaml and best.pt) and no records")
    shown = tables(runs, args.lang, args.speed)
    print(shown["main"])
    print(f"\n{CAPTIONS[args.lang][0]}\n")
    print(shown["entropy"])
    print(f"\n{CAPTIONS[args.lang][1]}\n")
    print(shown["coverage"])
    print(f"\n{shown['machines']}")
    for path in args.docs:
        write_into(path, tables(runs, page_language(path)))
    if args.pictures:
        args.pictures.mkdir(parents=True, exist_ok=True)
        grouped = groups(runs)
        picture_curves(grouped, args.pictures / "attention_curves.png")
        picture_heatmaps(grouped, args.pictures / "attention_heatmaps.png")


if __name__ == "__main__":
    main()
