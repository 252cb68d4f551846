"""Files and folders written through a temporary name (``tempfile.mkstemp``, ``mkdtemp``, or a
library that does so, as safetensors does) are created private, 0600 or 0700; a release or a run
copied to a machine where another user reads it must be readable as any other file written there.
"""

from __future__ import annotations

import os
from pathlib import Path


def process_umask() -> int:
    """This process's umask, read without changing it where the system says it (Linux), else by
    setting it and putting it back at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def as_umask_allows(path: Path | str) -> None:
    """Give ``path`` the mode that ``open`` (a file: 0666) or ``mkdir`` (a folder: 0777) would
    have given it under this process's umask; a folder's contents are left as they are."""
    full = 0o777 if os.path.isdir(path) else 0o666
    os.chmod(path, full & ~process_umask())
