"""The allocator setting: freed memory kept where glibc allocates, the environment's choice kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from seq2seq.runtime import heap
from seq2seq.runtime.kernels import KERNEL_CACHE_VARIABLE

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


IMPORT_ALL = """
import importlib, os, pkgutil, sys, seq2seq
before = dict(os.environ)
for module in pkgutil.walk_packages(seq2seq.__path__, "seq2seq."):
    if module.name.split(".")[-1] not in ("__main__",):
        importlib.import_module(module.name)
print(sorted(set(os.environ.items()) ^ set(before.items())))
"""


def test_importing_the_package_changes_no_process_setting() -> None:
    """Every module of seq2seq imported: the environment is as it was (process settings are
    made by the commands, logged)."""
    env = {k: v for k, v in os.environ.items() if k != KERNEL_CACHE_VARIABLE}
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


ENGINE = """
import os, sys
from seq2seq.runtime.kernels import KERNEL_CACHE_VARIABLE
from seq2seq.runtime import heap
from seq2seq.runtime.engine import Engine
engine = Engine.create("cpu")
if sys.argv[1] == "keep":
    engine.keep_freed_memory()
print(os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY"), heap._done)
"""


@pytest.mark.skipif(heap._glibc() is None, reason="glibc's malloc only: this C library is not")
def test_the_engine_makes_the_process_settings_a_command_asks_for() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "ONEDNN_"))}

    def settings(mode: str) -> str:
        cmd = [sys.executable, "-c", ENGINE, mode]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout

    assert settings("keep").split(maxsplit=1) == [
        "64",
        "freed memory kept for reuse " + ("(glibc malloc: no mmap, no trimming)\n"),
    ]
    assert settings("defaults").split() == ["64", "None"]  # the allocator left alone
    env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = "8"
    assert settings("defaults").split()[0] == "8"  # the environment's value wins
