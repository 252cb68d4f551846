"""Every private API of a library the code leans on has a checked fallback: each fallback,
forced here, does the job (the private names may go in any release)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from seq2seq.decoding import monitor
from seq2seq.decoding.monitor import Monitor
from seq2seq.errors import Seq2SeqError
from seq2seq.languages import check_bleu_tokenizer
from seq2seq.model import build_model, linear
from seq2seq.model.config import BahdanauConfig, ModelConfig
from seq2seq.runtime import precision
from seq2seq.runtime.kernels import fastest_products


def test_native_bf16_is_read_from_the_cpu_flags_without_torchs_probes(
    monkeypatch, tmp_path: Path
) -> None:
    for name in precision.CPU_PROBES:
        monkeypatch.delattr(torch.cpu, name, raising=False)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert precision.cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    read = precision.cpu_flags
    monkeypatch.setattr(precision, "cpu_flags", lambda: read(cpuinfo))
    assert precision.native_bf16()
    cpuinfo.write_text("flags\t\t: fpu avx2\n")
    assert not precision.native_bf16()
    assert read(tmp_path / "missing") == set()


def test_without_onednns_private_product_the_model_multiplies_in_pytorch(monkeypatch) -> None:
    monkeypatch.setattr(linear, "_ONEDNN_OP", None)
    attention = BahdanauConfig(size=16)
    cfg = OmegaConf.structured(ModelConfig(emb_size=16, hidden_size=16, attention=attention))
    model = build_model(cfg, 20, 20)
    name, seconds = fastest_products(model, training=True)
    assert name == "pytorch" and seconds == {}
    src = torch.randint(4, 20, (2, 5))
    tgt = torch.randint(4, 20, (2, 4))
    with linear.products("onednn"):  # asked for, but this torch lacks it: PyTorch's
        loss, _ = model(src, torch.tensor([5, 3]), tgt, tgt)
    assert torch.isfinite(loss)


def test_hparams_reach_the_event_file_through_the_public_writer_or_are_skipped(
    monkeypatch, tmp_path: Path, caplog
) -> None:
    with Monitor(tmp_path / "a") as kept:
        assert monitor.event_file(kept.writer) is kept.writer.file_writer
        kept.hparams(1, {"attention": "bahdanau"}, {"hparams/test_bleu": 1.0})

    class Bare:  # a writer of a torch with neither the attribute nor the method
        pass

    assert monitor.event_file(Bare()) is None
    with Monitor(tmp_path / "b") as skipped:
        monkeypatch.setattr(monitor, "event_file", lambda writer: None)
        with caplog.at_level(logging.WARNING):
            skipped.hparams(1, {"attention": "bahdanau"}, {"hparams/test_bleu": 1.0})
    assert "no event file to add hparams to" in caplog.text


def test_bleu_tokenizers_are_checked_without_sacrebleus_private_table(monkeypatch) -> None:
    from seq2seq import languages

    monkeypatch.setattr(languages, "_known_tokenizers", lambda: None)
    check_bleu_tokenizer("13a")
    check_bleu_tokenizer("zh")
    with pytest.raises(Seq2SeqError, match="unknown BLEU tokenizer 'nope'"):
        check_bleu_tokenizer("nope")
