"""A folder written whole or not at all (a release): its files go into a hidden sibling, renamed
to the folder's name at the end; an error or Ctrl-C on the way removes the sibling and leaves
the name as it was."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """The folder to write ``out``'s files into; ``out`` (absent or an empty folder) appears with
    all of them when the block ends well, and not at all otherwise."""
    staging = out.parent / f".{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)  # one a killed process left
    staging.mkdir(parents=True)
    try:
        yield staging
        os.replace(staging, out)  # rename(2) takes the place of an empty folder too
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
