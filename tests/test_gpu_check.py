"""scripts/gpu_check.sh, which only a lent GPU runs for real, parses and forms every command of
its steps: here it runs with a stand-in python3 that prints what it is given, so that a quoting
slip inside a step (a whole step is one quoted bash string) fails here, not on the GPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = """#!/bin/sh
echo "python3 $* (finished)"
"""


def test_the_shell_scripts_parse() -> None:
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script.name}: {proc.stderr}"


def test_gpu_check_forms_every_step(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STAND_IN)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "BUNDLE": str(tmp_path)}
    env["STEPS"] = "tests peer ours recipe"
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", "scripts/gpu_check.sh", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.rstrip().splitlines()[-1].startswith("failed:"), proc.stdout + proc.stderr
    for step in ("tests", "peer", "ours", "recipe"):
        assert f"== {step} " in proc.stdout
    assert "-m pytest -m gpu" in (out / "tests.log").read_text()
    peer = (out / "peer.log").read_text()
    assert "batch_type=tokens batch_size=8192" in peer and "large batches" in peer
    parts = (out / "parts.log").read_text()
    assert parts.count("-- python3 -m seq2seq.commands.train") == 2
    assert parts.count("-- python3 scripts/benchmark.py") == 5
    assert "--model peer --batch 8192 --precision bf16" in parts  # the 4x target in bf16 too
    assert parts.count("--cuda-graphs false,true") >= 3
    # the recipe's first seed trains (the stand-in says it finished), then its log is missing
    assert "experiment=multi30k_de_en device=cuda" in (out / "recipe.log").read_text()
