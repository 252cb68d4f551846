"""Sizes and SHA-256 of the files a command writes and later reads back, to catch damage (the
check itself, `damage`, is the rule lite's translator follows too: seq2seq_lite.rules)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from seq2seq_lite.rules import damage, sha256_file

__all__ = ["damage", "describe", "sha256_file", "write_manifest"]


def describe(paths: Iterable[Path], base: Path | None = None) -> dict[str, dict[str, int | str]]:
    """{file name: {"size", "sha256"}} of files in one folder (names relative to ``base``, for
    files in its subfolders)."""
    return {
        (Path(os.path.relpath(p, base)).as_posix() if base else p.name): {
            "size": p.stat().st_size,
            "sha256": sha256_file(p),
        }
        for p in paths
    }


def write_manifest(path: Path, files: Iterable[Path]) -> None:
    """Write ``path`` (JSON) describing ``files``, which sit beside it or below; atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(describe(files, path.parent), indent=1, sort_keys=True))
    os.replace(tmp, path)
