"""Benchmark of data preparation as the corpus grows: speed of each phase, time to the first
training update (cold and cached), and peak memory.

For each size it builds a synthetic corpus (Multi30k's training split repeated and cut to N
pairs, plain files ``train.de``/``train.en``; Multi30k's validation split), then, each in a
fresh process, alone:

- the phases through the project's own functions: reading the pairs, training the two
  tokenizers, encoding (``data.workers`` processes); and sentencepiece's own ``encode`` of the
  same lines with the same threads, from memory (the limit);
- ``seq2seq-train data=custom experiment=smoke`` with the data limits lifted and an 8k
  vocabulary, 20 updates, from an empty cache (cold), then again (cached): seconds from the
  process's start to its first update (the median of ``--repeats``), and peak memory: of the
  training process itself, of its largest process (tokenizer trainers and encoding workers
  included), and of the whole process tree (the largest sum of proportional set sizes, sampled
  every 50 ms, in a run of its own).

From the checkout root::

    python scripts/benchmark_data.py --multi30k ../shared/data/multi30k --sizes 30000,300000

prints a table, then one JSON line with every figure. ``--no-phases`` with
``PYTHONPATH=<an older checkout>`` measures that checkout's training starts.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def build_corpus(multi30k: Path, pairs: int, folder: Path) -> dict[str, Any]:
    """``train.{de,en}`` of ``pairs`` pairs and ``val.{de,en}`` in ``folder``; their sizes."""
    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        text = gzip.decompress((multi30k / f"train.{lang}.gz").read_bytes()).decode("utf-8")
        lines = text.splitlines(keepends=True)
        with open(folder / f"train.{lang}", "w", encoding="utf-8") as out:
            left = pairs
            while left > 0:
                out.writelines(lines[:left])
                left -= len(lines)
        val = gzip.decompress((multi30k / f"val.{lang}.gz").read_bytes())
        (folder / f"val.{lang}").write_bytes(val)
    text = sum((folder / f"train.{lang}").stat().st_size for lang in ("de", "en"))
    return {"pairs": pairs, "text_mb": round(text / 1e6, 1)}


def phases(prefix: Path, cache: Path, workers: int, sample: int | None) -> dict[str, Any]:
    """(In a child process.) Pairs/s of reading, tokenizer training and encoding; the limit."""
    import sentencepiece as spm

    from seq2seq.config import CustomDataConfig, TokenizerConfig
    from seq2seq.data.dataset import encode_corpus
    from seq2seq.data.readers import open_reader
    from seq2seq.data.tokenizer import train_tokenizers

    cfg = CustomDataConfig(
        train=str(prefix / "train"),
        valid=str(prefix / "val"),
        cache_dir=str(cache),
        tokenizer=TokenizerConfig(vocab_size=8000),
        workers=workers,
    )
    if sample is not None:
        cfg.tokenizer.input_sentence_size = sample
    stream = open_reader(cfg).stream("train")
    start = time.perf_counter()
    pairs = sum(1 for _ in stream)
    result = {"read_pairs_per_s": pairs / (time.perf_counter() - start)}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        toks = train_tokenizers(cfg, stream, Path(run_dir))
    result["tokenizers_s"] = time.perf_counter() - start
    start = time.perf_counter()
    encode_corpus(stream, *toks, cache, cfg.max_len, True, workers)
    result["encode_pairs_per_s"] = pairs / (time.perf_counter() - start)
    sides = [[], []]
    for src, tgt in stream:
        sides[0].append(src)
        sides[1].append(tgt)
    processors = [spm.SentencePieceProcessor(model_proto=tok.proto) for tok in toks]
    for threads in sorted({1, workers}):
        start = time.perf_counter()
        for sp, lines in zip(processors, sides, strict=True):
            sp.encode(lines, num_threads=threads)
        result[f"spm_pairs_per_s_{threads}t"] = pairs / (time.perf_counter() - start)
    return result


def _tree(root: int) -> set[int]:
    """``root`` and its descendants."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def _kib(path: str, field: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def watch(cmd: list[str], memory: bool) -> dict[str, Any]:
    """Run ``cmd``: seconds to its first update, or (``memory``) its peak memory: of the process
    itself (its VmHWM), of its largest process (the kernel's, over it and its children), and the
    largest sampled sum over the process tree (PSS: pages forked children share count once); the
    three also as they stood at the first update (data preparation and the start of training,
    before the steps, whose kept memory grows with the shapes they meet)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks, done = {"main": 0, "largest": 0, "tree": 0}, threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks["main"] = max(peaks["main"], _kib(f"/proc/{proc.pid}/status", "VmHWM:"))
            pids = _tree(proc.pid)
            largest = max(_kib(f"/proc/{pid}/status", "VmHWM:") for pid in pids)
            peaks["largest"] = max(peaks["largest"], largest)
            tree = sum(_kib(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids)
            peaks["tree"] = max(peaks["tree"], tree)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    if memory:
        sampler.start()
    first, output, before_steps = None, [], {}
    for line in proc.stdout:
        output.append(line)
        if first is None and "(step 1):" in line:
            first = time.perf_counter() - start
            before_steps = dict(peaks)  # data preparation, the model and its first update
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    if memory:
        sampler.join()
    if status != 0 or first is None:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{''.join(output[-30:])}")
    if not memory:
        return {"to_first_update_s": round(first, 2)}
    return {
        "main_peak_rss_mb": round(peaks["main"] / 1024),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "tree_peak_pss_mb": round(peaks["tree"] / 1024),
        "first_update_main_peak_rss_mb": round(before_steps["main"] / 1024),
        "first_update_largest_peak_rss_mb": round(before_steps["largest"] / 1024),
        "first_update_tree_peak_pss_mb": round(before_steps["tree"] / 1024),
    }


# As the installed command starts (a light main module), where the checkout has one.
TRAIN = (
    [sys.executable, "-c", "from seq2seq.commands.cli import train; train()"]
    if importlib.util.find_spec("seq2seq.commands.cli")
    else [sys.executable, "-m", "seq2seq.commands.train"]
)


def train_command(
    prefix: Path, cache: Path, run_dir: Path, sample: int | None, overrides: list[str]
) -> list[str]:
    extra = [] if sample is None else [f"data.tokenizer.input_sentence_size={sample}"]
    return [
        *TRAIN,
        "experiment=smoke",
        "data=custom",
        *extra,
        f"data.train={prefix / 'train'}",
        f"data.valid={prefix / 'val'}",
        "data.test=null",
        "data.train_limit=null",
        "data.valid_limit=null",
        "data.tokenizer.vocab_size=8000",
        f"data.cache_dir={cache}",
        "train.max_steps=20",
        "train.log_every=1",
        "log.progress=false",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


def cpu() -> dict[str, Any]:
    name, flags = platform.processor(), set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
    return {"cpu": name, "flags": [f for f in CPU_FLAGS if f in flags], "cores": os.cpu_count()}


def measure(args: argparse.Namespace, size: int, work: Path) -> dict[str, Any]:
    folder = work / str(size)
    row = build_corpus(args.multi30k, size, folder)
    if args.phases:
        child = [sys.executable, __file__, "--phases", str(folder), str(work / f"phase-{size}")]
        child += [str(args.workers), str(args.sample or 0)]
        out = subprocess.run(child, capture_output=True, text=True, check=True)
        row.update(json.loads(out.stdout.strip().splitlines()[-1]))
    times: dict[str, list[float]] = {"cold": [], "cached": []}
    for repeat in range(args.repeats + 1):  # the last pass measures memory (its sampler takes CPU)
        memory = repeat == args.repeats
        cache = work / f"cache-{size}-{repeat}"
        for label in ("cold", "cached"):
            run_dir = work / f"run-{size}-{label}-{repeat}"
            command = train_command(folder, cache, run_dir, args.sample, args.override)
            run = watch(command, memory)
            if memory:
                row.update({f"{label}_{key}": value for key, value in run.items()})
            else:
                times[label].append(run["to_first_update_s"])
        shutil.rmtree(cache)
    for label, values in times.items():  # --repeats 0: memory only
        row[f"{label}_to_first_update_s"] = statistics.median(values) if values else None
        row[f"{label}_to_first_update_all_s"] = values
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """One row per size: phase speeds (where measured), then cold and cached starts."""
    head = (
        "| pairs | text MB | read pairs/s | tokenizers s | encode pairs/s | spm limit pairs/s "
        "| cold: first update s | cold: peak MB, main / largest / tree (at the first update: "
        "main / largest / tree) | cached: first update s | cached: peak MB, the same |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        limits = [v for k, v in r.items() if k.startswith("spm_pairs_per_s")]
        phases = (
            f"{r['read_pairs_per_s']:,.0f} | {r['tokenizers_s']:.1f} | "
            f"{r['encode_pairs_per_s']:,.0f} | {max(limits):,.0f}"
            if limits
            else "- | - | - | -"
        )
        starts = " | ".join(
            f"{r[f'{c}_to_first_update_s'] or '-'} | {r[f'{c}_main_peak_rss_mb']:,} / "
            f"{r[f'{c}_peak_rss_mb']:,} / {r[f'{c}_tree_peak_pss_mb']:,} "
            f"({r[f'{c}_first_update_main_peak_rss_mb']:,} / "
            f"{r[f'{c}_first_update_largest_peak_rss_mb']:,} / "
            f"{r[f'{c}_first_update_tree_peak_pss_mb']:,})"
            for c in ("cold", "cached")
        )
        lines.append(f"| {r['pairs']:,} | {r['text_mb']} | {phases} | {starts} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--phases":
        folder, cache, workers, sample = sys.argv[2:6]
        print(json.dumps(phases(Path(folder), Path(cache), int(workers), int(sample) or None)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--multi30k", type=Path, required=True, help="folder of train.de.gz ...")
    parser.add_argument("--sizes", default="30000,300000,3000000", help="pairs, comma-separated")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="encoding processes")
    parser.add_argument("--workdir", type=Path, help="where corpora and caches go (default: tmp)")
    parser.add_argument("--sample", type=int, help="data.tokenizer.input_sentence_size")
    parser.add_argument("--repeats", type=int, default=3, help="timed starts (median; 0: none)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="a training override for every start, e.g. train.keep_freed_memory=false (repeatable)",
    )
    parser.add_argument(
        "--no-phases",
        dest="phases",
        action="store_false",
        help="only the training starts (e.g. of an older checkout, through PYTHONPATH)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in re.split(r"[,\s]+", args.sizes.strip()) if s]
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="seq2seq-data-", dir=args.workdir) as work:
        rows = [measure(args, size, Path(work)) for size in sizes]
    print(table(rows))
    facts = {**cpu(), "workers": args.workers, "sample": args.sample, "overrides": args.override}
    print(json.dumps({**facts, "rows": rows}))


if __name__ == "__main__":
    main()
