"""Sizes and SHA-256 of the files a command writes and later reads back, to catch damage."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


def damage(path: Path) -> list[str]:
    """What is wrong with the files that the manifest ``path`` describes (empty: nothing).

    A missing or unreadable manifest is itself reported.
    """
    try:
        expected = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return [f"{path.name} cannot be read ({e})"]
    problems = []
    for name, facts in expected.items():
        file = path.parent / name
        if not file.is_file():
            problems.append(f"{name} is missing")
        elif file.stat().st_size != facts.get("size"):
            problems.append(f"{name} has {file.stat().st_size} bytes, not {facts.get('size')}")
        elif sha256_file(file) != facts.get("sha256"):
            problems.append(f"{name} does not match its SHA-256")
    return problems
