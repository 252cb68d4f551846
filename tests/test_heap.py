"""The allocator setting: freed memory kept where glibc allocates, the environment's choice kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from seq2seq.runtime import heap

# minor page faults of allocating and freeing a 64 MB tensor 20 times, after one warm-up round
FAULTS = """
import resource, sys, torch
from seq2seq.runtime.heap import keep_freed_memory
if sys.argv[1] == "keep":
    print(keep_freed_memory(), file=sys.stderr)
def churn():
    for _ in range(20):
        torch.ones(16 * 2**20).sum()
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, env=env, check=True
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(heap._glibc() is None, reason="glibc's malloc only: this C library is not")
def test_kept_memory_is_not_faulted_in_again() -> None:
    """glibc's default maps each 64 MB block afresh and faults its pages in (16,384 small pages
    or 32 huge ones per allocation); kept memory is reused without faults."""
    system, kept = faults("system"), faults("keep")
    assert kept * 10 < system


def test_the_environments_allocator_setting_wins(monkeypatch) -> None:
    monkeypatch.setattr(heap, "_glibc", lambda: None)  # never calls mallopt in this process
    for environ, named in [
        ({"MALLOC_MMAP_MAX_": "65536"}, "MALLOC_MMAP_MAX_"),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, "GLIBC_TUNABLES"),
        ({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, "LD_PRELOAD"),
    ]:
        monkeypatch.setattr(heap, "_done", None)
        assert named in heap.keep_freed_memory(environ)
    monkeypatch.setattr(heap, "_done", None)
    assert "not glibc" in heap.keep_freed_memory({"GLIBC_TUNABLES": "glibc.cpu.x86=1"})


def test_the_setting_is_made_once_per_process(monkeypatch) -> None:
    monkeypatch.setattr(heap, "_done", "done before")
    assert heap.keep_freed_memory({}) == "done before"
