"""The side-by-side table of `scripts/gpu_check.sh`, against issue 50's targets: it reads what
the steps left in OUT_DIR (OpenNMT-py's summaries, our training logs, the benchmark's JSON lines
in parts.log, the recipe's evaluations) and prints a markdown table, a line per target with the
ratio and whether it is met; a figure a step did not leave is "–". The last step of
gpu_check.sh; by hand::

    python scripts/gpu_table.py OUT_DIR

Standard library only: it runs beside the installed package, on any machine.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

RECIPE_BLEU = 38.16  # the recipe trained to its end on an H200 (docs/gpu.md), within 0.5
Row = tuple[str, str, str, str, str, str]  # what, OpenNMT-py, seq2seq, ratio, target, met


def text(path: Path) -> str:
    """The file's text; empty where the step that writes it did not run."""
    return path.read_text(errors="replace") if path.exists() else ""


def load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def reports(parts: Path) -> list[dict[str, Any]]:
    """The benchmark's JSON lines in parts.log."""
    return [json.loads(line) for line in text(parts).splitlines() if line.startswith('{"torch"')]


def benchmark_rows(
    found: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every training and decoding row of the benchmark's reports, but the profiled ones (timed
    over fewer windows, for their kernels)."""
    training, decoding = [], []
    for report in found:
        training += [r for r in report.get("training", []) if "profile" not in r]
        decoding += [r for r in report.get("decoding", []) if "profile" not in r]
    return training, decoding


def profiled_rows(found: list[dict[str, Any]]) -> list[Row]:
    """Each profiled row's device time (`seq2seq.runtime.profiling.device_time`): how busy the
    GPU kept over the profiled work, and its top three kernels by time."""
    rows = []
    for report in found:
        for kind, keys in (("training", ("batch",)), ("decoding", ("search", "batch_size"))):
            for r in report.get(kind, []):
                if device := r.get("profile", {}).get("device"):
                    what = " ".join(str(r.get(k)) for k in (*keys, "precision"))
                    busy = f"{device['busy_share']:.0%} ({device['busy_ms']:,.1f} ms of "
                    busy += f"{device['wall_ms']:,.1f})"
                    top = "; ".join(f"{k['name'][:50]} {k['share']:.0%}" for k in device["top"][:3])
                    rows.append((f"{kind} {what}, graphed", busy, top))
    return rows


def logged_rates(log: Path) -> list[float]:
    """seq2seq-train's tok/s per logged window (every 50 updates), in order."""
    found = re.findall(r"update \d+/.*?([\d,]+) tok/s", text(log))
    return [float(m.replace(",", "")) for m in found]


def capturing(log: Path) -> str:
    """The graphed run's closing summary of its captures (`StaticUpdater.summary`), or "–"."""
    found = re.search(r"CUDA graphs: (\d+ buckets? captured.*)", text(log))
    return found.group(1) if found else "–"


def after_first(rates: list[float]) -> tuple[float | None, float | None]:
    """Over the windows after the first (updates 50 on): their median, and their span's rate
    (the harmonic mean: the windows hold about as many tokens each)."""
    later = rates[1:]
    if not later:
        return None, None
    return statistics.median(later), len(later) / sum(1 / r for r in later)


def best(rows: list[dict[str, Any]], key: str, **match: Any) -> dict[str, Any]:
    """The row with the largest ``key`` among those matching every ``match`` field."""
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return max(found, key=lambda r: r[key], default={})


def number(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def compared(what: str, peer: float | None, ours: float | None, at_least: float | None) -> Row:
    """A ratio target: ours / OpenNMT-py's at least ``at_least`` (None: no target)."""
    target = "" if at_least is None else f"≥ {at_least:g}×"
    if not peer or ours is None:
        return what, number(peer), number(ours), "–", target, "" if at_least is None else "–"
    ratio = ours / peer
    met = "" if at_least is None else "yes" if ratio >= at_least else "no"
    return what, number(peer), number(ours), f"{ratio:.2f}×", target, met


def training_rows(out: Path, peer: dict[str, Any], training: list[dict[str, Any]]) -> list[Row]:
    big = load(out / "peer_8192.json")
    steady = peer.get("steady_tgt_tok_per_s_after_50")
    median, span = after_first(logged_rates(out / "ours_train.log"))
    eager_span = after_first(logged_rates(out / "ours_eager_train.log"))[1]
    large = best(training, "tokens_per_s", attention="peer", batch="8192", cuda_graphs="true")
    reference = best(training, "tokens_per_s", attention="bahdanau", cuda_graphs="true")
    largest = best(training, "max_memory_allocated_mib", attention="bahdanau", batch="16000")
    ref_rate = reference.get("tokens_per_s")
    return [
        compared("training, peer shape and batch: logged tok/s, updates 50–300", steady, span, 5),
        compared("the same, median of the windows after update 50", steady, median, 5),
        compared(
            "the same, eager (`train.cuda_graphs=false`), updates 50–300", steady, eager_span, None
        ),
        ("the same graphed: what capturing cost", "", capturing(out / "ours_train.log"), *[""] * 3),
        compared(
            f"peer shape, 8,192-token batches ({large.get('precision', '–')}, step alone)",
            big.get("steady_tgt_tok_per_s_after_50"),
            large.get("tokens_per_s"),
            4,
        ),
        (
            f"reference model, best batch ({reference.get('batch', '–')} tokens, "
            f"{reference.get('precision', '–')})",
            "",
            number(ref_rate),
            "",
            "≥ 400,000 tok/s",
            "–" if ref_rate is None else ("yes" if ref_rate >= 400_000 else "no"),
        ),
        (
            f"reference model, 16,000 tokens, peak memory ({largest.get('precision', '–')})",
            "",
            f"{number(largest.get('max_memory_allocated_mib'))} MiB",
            "",
            "stated",
            "",
        ),
    ]


def precision_rows(training: list[dict[str, Any]]) -> list[Row]:
    """bf16 against fp32 at each batch of the reference model's graphed rows: where bf16 pays
    (``precision=auto`` takes bf16 for a graphed update on CUDA)."""
    reference = [r for r in training if r.get("attention") == "bahdanau"]
    graphed = [r for r in reference if r["cuda_graphs"] == "true"]
    rows = []
    for batch in ("recipe", "8192", "16000"):
        rates = [
            best(graphed, "tokens_per_s", batch=batch, precision=p).get("tokens_per_s")
            for p in ("bf16", "fp32")
        ]
        ratio = f"{rates[0] / rates[1]:.2f}×" if None not in rates else "–"
        size = "2,000 (the recipes')" if batch == "recipe" else f"{int(batch):,}"
        what = f"reference model, {size} tokens: bf16 / fp32 tok/s, graphed"
        ours = " / ".join(number(r) for r in rates)
        rows.append((what, "", ours, ratio, "bf16 ≥ 1× or fp32 kept", ""))
    return rows


def decoding_rows(peer: dict[str, Any], decoding: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for search, beam, target, name in (("beam 5", 5, 3, "beam5"), ("greedy", 1, 8, "greedy")):
        key = f"decode_{name}_sent_per_s"  # OpenNMT-py's summary
        for graphs, kind in (("true", "graphed"), ("false", "eager")):
            found = [
                r for r in decoding if r.get("cuda_graphs") == graphs and r["beam_size"] == beam
            ]
            ours = best(found, "sentences_per_s", batch_size=64)
            what = f"{search}, batches of 64, sentences/s ({kind}, {ours.get('precision', '–')})"
            aim = target if graphs == "true" else None  # the targets are the default's
            rows.append(compared(what, peer.get(key), ours.get("sentences_per_s"), aim))
            latency = best(found, "sentences_per_s", batch_size=1).get("ms_per_batch")
            what = f"{search}, one sentence at a time ({kind}), ms"
            rows.append((what, "", number(latency, 1), "", "stated", ""))
    return rows


def trained_precision(log: Path) -> str:
    """The precision a training log says it ran in (its "on cuda:0 (...), bf16," line, which
    `precision=auto` may have chosen) as " (bf16)"; "" where the log has none."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    found = re.search(r"\] - on \S+.*?, (fp32|bf16|fp16), ", text)
    return f" ({found.group(1)})" if found else ""


def recipe_rows(out: Path) -> list[Row]:
    rows = []
    for path in sorted(out.glob("recipe*_eval.json")):
        seed = path.name[len("recipe") : -len("_eval.json")]
        bleu = load(path).get("bleu")
        met = "–" if bleu is None else ("yes" if bleu >= RECIPE_BLEU - 0.5 else "no")
        trained = trained_precision(out / f"recipe{seed}_train.log")
        what = f"GPU recipe in 1.5 minutes of training, seed {seed}{trained}: test BLEU"
        rows.append((what, "", number(bleu, 2), "", f"≥ {RECIPE_BLEU - 0.5:.2f}", met))
    return rows or [
        ("GPU recipe in 1.5 minutes of training: test BLEU", "", "–", "", "two seeds", "–")
    ]


def machine_line(log: Path) -> str:
    """The machine step's line of torch's version, CUDA's, the GPU's name and bf16 support
    ("2.13.0+cu130 13.0 NVIDIA H200 True"; a wheel's version may lack "+cu"), or "–"."""
    found = re.search(r"^\d+\.\d+\S* \d+\.\d+ .*$", text(log), re.MULTILINE)
    return found.group(0) if found else "–"


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[0] + "\nusage: python scripts/gpu_table.py OUT_DIR")
    out = Path(sys.argv[1])
    commit = text(out / "commit.txt").strip() or "–"
    torch_line = machine_line(out / "machine.log")
    found = reports(out / "parts.log")
    training, decoding = benchmark_rows(found)
    peer = load(out / "peer.json")
    print(f"GPU, torch: {torch_line}; code: {commit}")
    print("| | OpenNMT-py | seq2seq | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    rows = training_rows(out, peer, training) + precision_rows(training)
    rows += decoding_rows(peer, decoding) + recipe_rows(out)
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if profiled := profiled_rows(found):
        print("\n| profiled | GPU busy | top kernels by time |\n|---|---|---|")
        for row in profiled:
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
