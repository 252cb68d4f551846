"""What a new user meets first on the command line: each command's own help."""

from __future__ import annotations

import subprocess
import sys


def test_train_help_is_its_own() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "seq2seq.train", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("seq2seq-train: train a BiGRU encoder")
    assert "experiment=multi30k_de_en_cpu" in proc.stdout and "data.source=" in proc.stdout
    assert "model/attention: bahdanau, local_m, local_p, luong, multihead" in proc.stdout
    assert "Powered by Hydra" not in proc.stdout  # Hydra's generic text
