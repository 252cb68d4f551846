"""One run folder of the attention comparison, read into a record (``Run``): its test decoding
(evaluated where it has none yet), the measures of that decoding, AER by each way attention
becomes links, validation curves, training speed; and the file of records that the table and
pictures are made from (scripts/attention_table.py)."""

from __future__ import annotations

import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.decoding.alignment import attention_statistics
from seq2seq.runtime.checkpoint import load_checkpoint
from seq2seq.runtime.migrate import upgrade_saved_config
from seq2seq.storage.rundir import BEST, CONFIG_FILE, EVAL_DIR, TENSORBOARD_DIR

WORD_START = "\u2581"  # sentencepiece's mark of a piece that begins a word


@dataclass
class Run:
    """What one run folder of the comparison tells: a record of the comparison's file."""

    folder: str
    row: str
    direction: str
    seed: int
    measures: dict[str, float]  # of the beam-5 test decoding (see ``measures``)
    penalised: dict[str, float] | None  # the same with the coverage penalty (its β: "beta")
    curve: dict[int, float]  # validation BLEU by update
    tokens_per_second: float
    parameters: int
    aer: dict[str, float] | None = None  # by ALIGN_METHODS
    heatmap: dict[str, Any] | None = None  # source, target, weights of one test sentence
    cpu: str = ""  # the machine that summarised the run (right after training it)
    entropy_curve: dict[int, float] = field(default_factory=dict)  # validation's, by update
    threads: int = 0  # torch threads it trained with (0: not recorded)

    @property
    def key(self) -> tuple[str, str, int]:
        return self.direction, self.row, self.seed

    @classmethod
    def from_json(cls, line: str) -> Run:
        record = json.loads(line)
        for key in ("curve", "entropy_curve"):
            record[key] = {int(step): value for step, value in record.get(key, {}).items()}
        return cls(**record)


# overrides that say where a run reads, writes or runs (or that it resumed), not what it trains:
# left out of a row's name, as are the seed and the comparison's own experiments
PLACES = re.compile(
    r"(hydra\.|train\.(seed|threads|resume)=|log\.progress=|device=|experiment=attention_comparison"
    r"(_en_fr)?$|data\.(source|root|cache_dir|train|valid|test|file)=|log\.alignment_(pairs|links)=)"
)


def row_name(folder: Path, cfg: Any) -> str:
    """The comparison row (``+compare=<row>`` in Hydra's record, else the attention's name) and
    every other override that changes what trains, so that runs of one row with other settings
    (``model.attention.scale=false``, another experiment) make rows of their own."""
    overrides = folder / ".hydra" / "overrides.yaml"
    items = [str(i) for i in OmegaConf.load(overrides)] if overrides.is_file() else []
    compare = [i.split("=", 1)[1] for i in items if i.startswith("+compare=")]
    row = compare[0] if compare else str(cfg.model.attention.name)
    own = ("+compare=",) if compare else ("+compare=", "model/attention=")
    settings = sorted(i for i in items if not i.startswith(own) and not PLACES.match(i))
    return " ".join([row, *settings])


def run_command(args: Sequence[str]) -> dict[str, Any]:
    """Run a seq2seq command, found on PATH or beside this Python (a virtual environment run
    without activating it); its last stdout line is its JSON result."""
    beside = Path(sys.executable).with_name(args[0])
    program = shutil.which(args[0]) or (str(beside) if beside.is_file() else None)
    if program is None:
        sys.exit(f"{args[0]} not found: install seq2seq (pip install -e .) in this environment")
    done = subprocess.run([program, *args[1:]], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def evaluated(folder: Path, penalty: float = 0.0) -> dict[str, Any]:
    """The beam-5 test result of ``best.pt`` (with that coverage penalty), evaluating if needed."""
    suffix = f".cp{penalty:g}" if penalty else ""
    for path in sorted((folder / EVAL_DIR).glob(f"*.best.beam5{suffix}.json")):
        result = json.loads(path.read_text())
        if result.get("split") is not None and result.get("runs", [None]) == [
            str(folder.resolve())
        ]:
            return result
    extra = [f"coverage_penalty={penalty}"] if penalty else []
    return run_command(["seq2seq-evaluate", f"run_dir={folder}", *extra])


# how attention becomes links (docs/alignment.md): argmax at the step of the word and the
# steps beside it, or every source word with at least 0.3 of the weight
ALIGN_METHODS = {
    "argmax": ["method=argmax"],
    "argmax shift -1": ["method=argmax", "shift=-1"],
    "argmax shift +1": ["method=argmax", "shift=1"],
    "threshold 0.3": ["method=threshold", "threshold=0.3"],
}


def aligned(folder: Path, cfg: Any) -> dict[str, float] | None:
    """AER of ``best.pt`` by each of ALIGN_METHODS on the gold set the run was validated on."""
    gold = OmegaConf.select(cfg, "log.alignment_pairs")
    links = OmegaConf.select(cfg, "log.alignment_links")
    if gold is None or links is None:
        return None
    cache = folder / EVAL_DIR / "aer.best.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    found = {}
    for method, settings in ALIGN_METHODS.items():
        args = [f"run_dir={folder}", f"input={gold}", f"gold={links}", "output=/dev/null"]
        found[method] = float(run_command(["seq2seq-align", *args, *settings])["aer"])
    cache.write_text(json.dumps(found))
    return found


def validation_curves(folder: Path, *tags: str) -> list[dict[int, float]]:
    """Validation scalars by update, one curve per tag, from one read of the run's TensorBoard
    events (a resume's later file wins)."""
    curves: list[dict[int, float]] = [{} for _ in tags]
    for events in sorted((folder / TENSORBOARD_DIR).glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), {"scalars": 0})
        acc.Reload()
        found = acc.Tags()["scalars"]
        for tag, curve in zip(tags, curves, strict=True):
            if tag in found:
                curve.update({e.step: e.value for e in acc.Scalars(tag)})
    return [dict(sorted(curve.items())) for curve in curves]


def training_speed(folder: Path) -> tuple[float, int]:
    """Median target tokens per second over the training log's progress lines, and the torch
    threads the log says the run had."""
    log = folder / "train.log"
    text = log.read_text(encoding="utf-8") if log.is_file() else ""
    speeds = [float(m.replace(",", "")) for m in re.findall(r"([\d,]+) tok/s", text)]
    threads = re.search(r"(\d+) threads?\b", text)
    median = statistics.median(speeds) if speeds else float("nan")
    return median, int(threads.group(1)) if threads else 0


def speed_runs(group: list[Run]) -> list[Run]:
    """The runs whose training speed a row shows: those with the most threads, so runs trained
    side by side on a share of the cores do not pull the mean down."""
    most = max(r.threads for r in group)
    return [r for r in group if r.threads == most]


def records(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The attention of each test sentence's best hypothesis (seq2seq-evaluate's JSON lines)."""
    lines = Path(result["attention"]).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def repeated_bigrams(lines: Sequence[str]) -> float:
    """Word bigrams that repeat an earlier one of the same line, per 100 words."""
    repeats = words = 0
    for line in lines:
        tokens = line.split()
        words += len(tokens)
        repeats += sum(n - 1 for n in Counter(zip(tokens, tokens[1:], strict=False)).values())
    return 100 * repeats / max(words, 1)


def unattended_words(weights_records: Sequence[dict[str, Any]]) -> float:
    """Percentage of source words (pieces joined at sentencepiece's word mark, the EOS left
    out) that no output piece attends to most: what is likely left untranslated."""
    words = unattended = 0
    for record in weights_records:
        pieces, weights = record["source"][:-1], np.asarray(record["weights"])
        if not pieces or weights.size == 0:
            continue
        word_of = np.cumsum([p.startswith(WORD_START) or i == 0 for i, p in enumerate(pieces)]) - 1
        chosen = weights[:-1].argmax(axis=1)  # each output piece's most attended source piece
        hit = {int(word_of[c]) for c in chosen if c < len(pieces)}
        words += int(word_of[-1]) + 1
        unattended += int(word_of[-1]) + 1 - len(hit)
    return 100 * unattended / max(words, 1)


def measures(result: dict[str, Any]) -> dict[str, float]:
    """Scores and behaviour of one decoding of the test split."""
    found = records(result)
    rows = [np.asarray(r["weights"]) for r in found if r["weights"]]
    rows = [w / w.sum(-1, keepdims=True) for w in rows]  # local_p's rows sum to at most 1
    hypotheses = Path(result["hypotheses"]).read_text(encoding="utf-8").splitlines()
    return {
        "bleu": result["bleu"],
        "chrf": result["chrf"],
        "entropy": attention_statistics(rows)["attention_entropy"],
        "repeats": repeated_bigrams(hypotheses),
        "unattended": unattended_words(found),
        "sentences_per_second": result["sentences_per_second"],
    }


def read_run(folder: Path, penalty: float, sentence: int) -> Run:
    """Evaluate (where needed) and summarise one run folder."""
    cfg = upgrade_saved_config(OmegaConf.load(folder / CONFIG_FILE))  # old runs in new keys
    test = evaluated(folder)
    state = load_checkpoint(folder / BEST)
    unique = {t.data_ptr(): t.numel() for t in state["model"].values()}  # tied weights once
    record = records(test)[sentence]
    bleu_curve, entropy_curve = validation_curves(folder, "valid/bleu", "valid/attention_entropy")
    tokens_per_second, threads = training_speed(folder)
    return Run(
        folder=str(folder),
        row=row_name(folder, cfg),
        direction=f"{cfg.data.src_lang}→{cfg.data.tgt_lang}",
        seed=int(cfg.train.seed),
        measures=measures(test),
        penalised={**measures(evaluated(folder, penalty)), "beta": penalty} if penalty else None,
        curve=bleu_curve,
        entropy_curve=entropy_curve,
        tokens_per_second=tokens_per_second,
        threads=threads,
        parameters=sum(unique.values()),
        aer=aligned(folder, cfg),
        heatmap={"sentence": sentence, **record},
        cpu=cpu_name(),
    )


def cpu_name() -> str:
    """The CPU's model name, family and model (lscpu's), e.g. "AMD EPYC (family 25 model 1)"."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    found = dict(re.findall(r"^(model name|cpu family|model)\s*:\s*(.+)$", text, re.M))
    if "model name" not in found:
        return platform.processor() or "unknown"
    return f"{found['model name']} (family {found.get('cpu family')} model {found.get('model')})"


def merged(path: Path | None, runs: Sequence[Run]) -> list[Run]:
    """The runs of the record file ``path`` with these runs written into it (a run replaces
    its earlier record: same direction, row and seed)."""
    if path is None:
        return list(runs)
    known = {}
    if path.is_file():
        known = {r.key: r for r in map(Run.from_json, path.read_text().splitlines()) if r}
    known.update({run.key: run for run in runs})
    ordered = sorted(known.values(), key=lambda r: r.key)
    path.write_text("".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in ordered))
    return ordered


def find_runs(roots: Sequence[Path]) -> list[Path]:
    """Finished run folders (config.yaml and best.pt) at or under each argument."""
    found = []
    for root in roots:
        candidates = [root, *sorted(p.parent for p in root.rglob(CONFIG_FILE))]
        found += [p for p in candidates if (p / CONFIG_FILE).is_file() and (p / BEST).is_file()]
    return sorted(set(found))
