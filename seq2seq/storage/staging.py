"""A folder written whole or not at all (a release, a cache entry): its files go into a hidden
sibling, renamed to the folder's name at the end; an error or Ctrl-C on the way removes the
sibling and leaves the name as it was."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from seq2seq.storage.manifest import write_manifest
from seq2seq.storage.permissions import as_umask_allows


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


@contextlib.contextmanager
def cache_entry(directory: Path, manifest: str = "manifest.json") -> Iterator[Path]:
    """A private folder beside ``directory`` to write a cache entry into; when the block ends well
    its files get a manifest and the folder takes ``directory``'s name, unless another process
    wrote the same entry first. A write that fails without naming its file (a full disk) is
    raised naming the cache's folder."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=".tmp-"))
    as_umask_allows(tmp)  # mkdtemp made it 0700
    try:
        try:
            yield tmp
            write_manifest(tmp / manifest, [p for p in tmp.iterdir() if p.name != manifest])
        except OSError as e:
            if e.filename:
                raise
            raise OSError(e.errno, e.strerror or str(e), str(directory.parent)) from None
        with contextlib.suppress(OSError):  # another process wrote the same entry first
            os.rename(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
