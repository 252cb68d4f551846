"""What the alignment tests share: `seq2seq-align` run as a user runs it, and Multi30k's
validation pairs written as its input."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

from run_helpers import cli


def run_align(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`seq2seq-align ARGS`; products pinned: runs compared link by link must not
    differ by which fp32 products a start-up timing chose (near ties of the argmax)."""
    cmd = [*cli("align"), "products=pytorch", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def pairs_of(multi30k_dir: Path, tmp_path: Path, count: int = 40) -> tuple[Path, list[str]]:
    """`de ||| en` lines of Multi30k's val split, words split off their punctuation."""
    sides = []
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            sides.append([line.strip().replace(".", " .") for line in f][:count])
    lines = [f"{de} ||| {en}" for de, en in zip(*sides, strict=True)]
    path = tmp_path / "pairs.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path, lines
