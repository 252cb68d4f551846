"""Rank 0 is interrupted inside ``from_main`` while rank 1 waits for it; each rank writes what it
saw and how long leaving the group took. Run under torchrun by tests/test_distributed.py."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from seq2seq.runtime.engine import Engine


def interrupted() -> None:
    time.sleep(1)  # rank 1 is inside the collective by now
    raise KeyboardInterrupt


def main(out: Path) -> None:
    engine = Engine.create("cpu", threads=1, distributed=True)
    start = time.monotonic()
    try:
        engine.from_main(interrupted)
        said = "went on"
    except KeyboardInterrupt:
        said = "interrupted"
    engine.close()
    (out / f"rank{engine.rank}").write_text(f"{said} {time.monotonic() - start:.1f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
