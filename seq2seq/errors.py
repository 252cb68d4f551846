"""Errors a user can cause and fix; the command-line apps print them without a traceback."""

from __future__ import annotations

import os
from pathlib import Path


class Seq2SeqError(Exception):
    """Base class: a problem with the user's input, data or run folder."""


class DataError(Seq2SeqError):
    """A corpus file is missing, malformed or inconsistent."""


class UnknownSplit(DataError):
    """A split a corpus does not have (by name, or in one of the languages)."""


class ChecksumError(DataError):
    """A downloaded file does not match its published SHA-256."""


class ReportedByRankZero(Seq2SeqError):
    """Rank 0's error, received by another process under torchrun: rank 0 reports it."""


def require_file(path: str | Path, key: str = "") -> Path:
    """``path`` where it is a file; else DataError saying what it is instead (a folder, or
    nothing), named by the ``key`` that gave it where there is one."""
    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        if path.exists() and not path.is_dir():  # <(...) of the shell: may be read only once
            what = "is a pipe or a device, not a file: write it to a file first"
        raise DataError(f"{key}={path} {what}" if key else f"{path} {what}")
    return path


def relative_note(*paths: str | Path) -> str:
    """The ending of a missing-file error whose paths include a relative one (a recipe's
    ``../shared/...``, not typed by the user): the folder they were looked for from; none
    where every path is absolute (or none is given)."""
    if all(Path(path).is_absolute() for path in paths):
        return ""
    return f"; relative paths are read from the current folder, {os.getcwd()}"
