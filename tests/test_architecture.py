"""The house rules that keep the code readable: the model does not know the app."""

from __future__ import annotations

import subprocess
import sys

from seq2seq.model.config import ATTENTION_CONFIGS
from seq2seq.model.registry import ATTENTIONS


def test_the_model_imports_neither_the_app_config_nor_hydra() -> None:
    code = (
        "import sys, seq2seq.model.registry, seq2seq.model.seq2seq, seq2seq.model.ensemble;"
        "print(sorted(m for m in sys.modules if m in ('seq2seq.config', 'hydra')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_registry_is_the_one_list_of_attention_variants() -> None:
    assert list(ATTENTIONS) == list(ATTENTION_CONFIGS)
    for name, kind in ATTENTIONS.items():
        assert kind.config is ATTENTION_CONFIGS[name] and kind.config.name == name
