"""Bad input and bad settings, each answered with one clear line before any work: broken
corpora, wrong keys and values, any Unicode at the prompt, splits and tokenizers with nothing
to read."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from run_helpers import (
    SMOKE_ARGS,
    assert_one_line_error,
    cli,
    outcome,
)

from seq2seq.config import DecodeConfig, LogConfig, TrainConfig
from seq2seq.data.corpus import read_parallel
from seq2seq.decoding.inference import Translator
from seq2seq.errors import DataError
from seq2seq.runtime.engine import Engine
from seq2seq.runtime.run_folder import load_run
from seq2seq.storage.rundir import (
    LOCK,
    not_a_run,
    unused_run_folder,
)
from seq2seq.vocab import EOS

# -- bad corpora ----------------------------------------------------------------------------------


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_bom_crlf_and_control_characters_are_read(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", "\ufeffEin Hund.\r\nZwei\x07 Katzen.\r\n".encode())
    tgt = write(tmp_path / "a.en", b"A dog.\nTwo\x1b cats.\n")
    assert read_parallel(src, tgt) == (
        ["Ein Hund.", "Zwei\x07 Katzen."],
        ["A dog.", "Two\x1b cats."],
    )


@pytest.mark.parametrize(
    ("src", "tgt", "message"),
    [
        (b"", b"", "is empty"),
        (b"a\nb\n", b"a\n", "differ in length"),
        (b"a\n\xff\xfe\n", b"a\nb\n", "line 2: invalid UTF-8"),
    ],
)
def test_broken_corpora_are_refused(tmp_path: Path, src: bytes, tgt: bytes, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_parallel(write(tmp_path / "x.de", src), write(tmp_path / "x.en", tgt))


@pytest.mark.slow
def test_overlong_and_odd_training_lines_are_dropped_and_counted(
    tmp_path: Path, multi30k_dir: Path
) -> None:
    """A custom corpus with a BOM, CRLF ends, control characters and a 100,000-character line
    trains; the long pair is dropped and counted."""
    src, tgt = read_parallel(multi30k_dir / "train.de.gz", multi30k_dir / "train.en.gz", 400)
    src[5] = "Hund " * 20_000  # 100,000 characters
    src[7] += "\x07\x1b"
    (tmp_path / "train.de").write_bytes(("\ufeff" + "\r\n".join(src) + "\r\n").encode())
    (tmp_path / "train.en").write_text("\n".join(tgt) + "\n")
    for lang, lines in (("de", src[:20]), ("en", tgt[:20])):
        (tmp_path / f"val.{lang}").write_text("\n".join(lines) + "\n")
    code, out = outcome(
        "train",
        *SMOKE_ARGS,
        "data=custom",
        f"data.train={tmp_path / 'train'}",
        f"data.valid={tmp_path / 'val'}",
        "train.max_steps=3",
        "data.max_len=400",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert code == 0, out
    assert "dropped 1 of 400 pairs (0 empty, 1 longer than max_len)" in out


# -- bad settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.hidden_size=-8"], "model.hidden_size=-8 must be positive"),
        (["model.dropout=1.5"], "model.dropout=1.5 must be at least 0 and below 1"),
        (["data.tgt_lang=de"], "data.src_lang and data.tgt_lang are both 'de'"),
        (["data.src_lang=xx"], "has no language 'xx'"),
        (["precision=fp16", "device=cpu"], "fp16 needs CUDA"),
        (["device=tpu"], "unknown device 'tpu'"),
        (["train.batch_tokens=0"], "train.batch_tokens=0 must be positive"),
        (["data.source=TMP/none", "data.root=TMP/root"], "data.source=TMP/none holds no train"),
    ],
)
def test_bad_settings_stop_before_any_work(tmp_path: Path, overrides: list[str], message: str):
    """One line, and no run folder left behind (nor a corpus folder made for nothing)."""
    folder = tmp_path / "run"
    overrides = [o.replace("TMP", str(tmp_path)) for o in overrides]
    code, out = outcome("train", *SMOKE_ARGS, f"hydra.run.dir={folder}", *overrides, timeout=300)
    assert_one_line_error(code, out, message.replace("TMP", str(tmp_path)))
    assert list(tmp_path.iterdir()) == []  # nothing was started


def test_a_refused_start_removes_the_folders_it_made_and_keeps_the_others(tmp_path: Path):
    """The default runs/ made for a refused first start goes with its run folder; a folder that
    was there before stays, empty or not."""
    refused = [*cli("train"), *SMOKE_ARGS, "train.batch_tokens=0"]
    proc = subprocess.run(refused, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "train.batch_tokens=0 must be positive" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no runs/ left
    kept = tmp_path / "kept"
    kept.mkdir()
    code, out = outcome(
        "train", *SMOKE_ARGS, f"hydra.run.dir={kept / 'new' / 'run'}", "train.lr=-1"
    )
    assert_one_line_error(code, out, "train.lr=-1.0 must be positive")
    assert list(tmp_path.iterdir()) == [kept] and list(kept.iterdir()) == []


def test_a_folder_of_runs_given_as_a_run_names_the_newest_inside(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert not_a_run(runs, "run_dir=runs").endswith("folder: it does not exist")
    runs.mkdir()
    assert not_a_run(runs, "run_dir=runs") == (
        "run_dir=runs is not a training run or release folder (no config.yaml)"
    )
    for i, name in enumerate(["a", "multirun_b/0_x", "c"]):  # c the newest, a sweep's inside
        (runs / name).mkdir(parents=True)
        (runs / name / ".hydra").mkdir()  # Hydra's copy of the config: not a run
        for config in (runs / name / "config.yaml", runs / name / ".hydra" / "config.yaml"):
            config.write_text("{}\n")
        os.utime(runs / name / "config.yaml", (1e9 + i, 1e9 + i))
    said = not_a_run(runs, "run_dir=runs")
    assert said.endswith(f"; it holds 3 run(s), the newest {runs / 'c'}: give that folder")


def test_only_a_folder_a_training_never_used_is_removed_after_a_refusal(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    (folder / ".hydra").mkdir(parents=True)
    (folder / "train.log").write_text("[ERROR] - train.lr=-1.0 must be positive\n")
    assert unused_run_folder(folder)
    (folder / "config.yaml").write_text("x: 1\n")  # no lock: the user's, no start claimed it
    assert not unused_run_folder(folder)
    (folder / LOCK).write_text("")  # claimed: the config is the start's
    assert unused_run_folder(folder)
    (folder / "src.model").write_text("")  # a tokenizer: work done
    assert not unused_run_folder(folder)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.lrate=1"], "train.lrate: no such key; did you mean train.lr?"),
        (["train.batch_tokens=many"], "train.batch_tokens=many: expected an integer"),
    ],
)
def test_unknown_keys_and_wrong_types_are_one_line(tmp_path, overrides, message) -> None:
    code, out = outcome("train", *SMOKE_ARGS, f"hydra.run.dir={tmp_path}", *overrides, timeout=300)
    assert_one_line_error(code, out, message)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing was started


# -- any text in, one line out --------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator(smoke_run: Path) -> Translator:
    return Translator.from_run(load_run(smoke_run), DecodeConfig(beam_size=2))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(max_size=60), min_size=1, max_size=6))
def test_any_unicode_gives_one_line_per_line(translator: Translator, lines: list[str]) -> None:
    lines = [line.replace("\n", " ") for line in lines]  # one input line each
    translations = translator.translate(lines)
    assert len(translations) == len(lines)
    for line, translation in zip(lines, translations, strict=True):
        text = translator.best_text(translation)
        assert "\n" not in text and "\r" not in text
        # blank in, blank out: blank is what the tokenizer keeps nothing of (ESC alone, say)
        kept = translator.src_tok.encode(line.strip())
        assert bool(translation.hypotheses) == bool(kept)


def test_control_characters_alone_are_a_blank_line(translator: Translator) -> None:
    blank, text = translator.translate(["\x1b\x07", "ein \x1bHund"])
    assert blank.hypotheses == [] and translator.best_text(blank) == ""
    assert text.hypotheses and text.source_ids[-1] == EOS


# -- a validation split or tokenizer with nothing to read -----------------------------------------


def test_a_validation_split_without_a_line_to_translate_is_refused_before_training(caplog) -> None:
    """All blank, or all over max_source_len: refused before any update (it ended the first
    epoch in a traceback, without a checkpoint). Pairs with a blank side are warned of."""
    from types import SimpleNamespace

    from seq2seq.training.validation import check_validation_lines

    tok = SimpleNamespace(encode_batch=lambda lines: [line.split() for line in lines])
    search = DecodeConfig(max_source_len=3)
    cases = ((["", " "], "2 lines are blank;"), (["a b c d", ""], "2 lines are blank or over"))
    for lines, says in cases:
        with pytest.raises(DataError, match=f"no line to translate: its {says}"):
            split = SimpleNamespace(src_tok=tok, valid_src=lines, valid_refs=["x"] * len(lines))
            check_validation_lines(split, search)
    split = SimpleNamespace(src_tok=tok, valid_src=["a", "a b", "b"], valid_refs=["x", "y", "z"])
    with caplog.at_level(logging.WARNING):
        check_validation_lines(split, search)
        assert not caplog.records
        split.valid_src[0], split.valid_refs[2] = "", " "  # misaligned files, say
        check_validation_lines(split, search)
    said = "2 of 3 validation pairs have a blank source or reference: each is scored as a pair"
    assert caplog.messages == [
        said + ", so BLEU is lower than the sentences deserve (check the split's files)"
    ]


def test_validation_blanks_lines_over_max_source_len_and_says_so_once(monkeypatch, caplog):
    """Every validation translates the same lines: those over max_source_len are found, blanked
    and reported at the first validation only."""
    from types import SimpleNamespace

    from seq2seq.training import validation

    tok = SimpleNamespace(encode_batch=lambda lines: [line.split() for line in lines])
    data = SimpleNamespace(src_tok=tok, valid_src=["a b c d", "a b", ""])
    given = []
    monkeypatch.setattr(
        validation, "validate", lambda model, data, sources, *rest: given.append(sources)
    )
    cfg = OmegaConf.create(
        {
            "train": TrainConfig(),
            "log": LogConfig(),
            "data": {"tgt_lang": "en", "bleu_tokenize": None},
        }
    )
    validator = validation.Validator(cfg, Engine.create("cpu"))
    validator.search.max_source_len = 3
    with caplog.at_level("WARNING", logger="seq2seq.train"):
        validator(None, data)
        validator(None, data)
    assert given == [["", "a b", ""]] * 2
    said = [r.getMessage() for r in caplog.records if "max_source_len" in r.getMessage()]
    assert said == ["1 validation lines have more than max_source_len=3 subwords: not translated"]


def test_a_tokenizer_of_blank_lines_says_why_it_cannot_be_trained(tmp_path: Path) -> None:
    """sentencepiece's reason is its own code's condition: said in words (it was empty)."""
    from seq2seq.data.tokenizer import _train_one

    text = tmp_path / "blank.txt"
    text.write_text("\n\n\n\n")
    settings = {"model_type": "unigram", "vocab_size": 100}
    with pytest.raises(DataError, match="on 4 lines: no line with text \\(all are blank\\)$"):
        _train_one(text, 4, settings, "src")
