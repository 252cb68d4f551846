"""Freed memory kept for the next batch instead of handed back to the kernel.

glibc's malloc serves blocks above its mmap threshold (32 MB at most) with fresh pages from the
kernel and returns them on ``free``: every training step then faults in the pages of its largest
tensors (the logits, their softmax, their gradient) again. Switching malloc's mmap off and its
trimming up keeps those pages in the heap for reuse; the resident size stays near the peak of the
work instead of following it (what it gains, by CPU: docs/performance.md). Training asks for it
(``train.keep_freed_memory``); the other commands keep the allocator's defaults. A ``MALLOC_*``
variable, ``GLIBC_TUNABLES`` for malloc or a preloaded allocator (jemalloc, tcmalloc, mimalloc) in
the environment wins; other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: free memory kept at the heap's top, bytes
ENVIRONMENT = (
    "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
)

_done: str | None = None  # what keep_freed_memory did in this process


def _environment_choice(environ: dict[str, str]) -> str | None:
    """The environment's own allocator setting, named; None where it has none."""
    named = [name for name in ENVIRONMENT if name in environ]
    if "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        named.append("GLIBC_TUNABLES")
    if "malloc" in environ.get("LD_PRELOAD", ""):
        named.append("LD_PRELOAD")
    return ", ".join(named) or None


def _glibc() -> ctypes.CDLL | None:
    """This process's C library where it is glibc (the one with ``mallopt``), else None."""
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):  # Windows has no process-wide handle
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def keep_freed_memory(environ: dict[str, str] | None = None) -> str:
    """Make glibc's malloc keep freed memory for reuse (once per process); what was done, in
    words, for the log."""
    global _done
    if _done is not None:
        return _done
    chosen = _environment_choice(dict(os.environ) if environ is None else environ)
    if chosen is not None:
        _done = f"allocator as the environment sets it ({chosen})"
        return _done
    libc = _glibc()
    if libc is None:
        _done = "the C library's allocator (not glibc: left as it is)"
    elif libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        _done = "freed memory kept for reuse (glibc malloc: no mmap, no trimming)"
    else:
        _done = "glibc's allocator (mallopt refused the settings)"
    return _done


def allocator_setting() -> str:
    """What this process's allocator does, in words: keep_freed_memory's answer once it ran,
    else the C library's defaults."""
    return _done or "the C library's allocator defaults"
