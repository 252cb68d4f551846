"""Corpus files: split names resolved, parallel text read and validated."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import pytest
from run_helpers import composed

from seq2seq.commands.rules import check_files
from seq2seq.config import CustomDataConfig, Multi30kConfig
from seq2seq.data.corpus import check_splits, read_parallel, split_files
from seq2seq.data.readers import open_reader
from seq2seq.errors import DataError


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_strips_and_splits_on_newline_only(tmp_path: Path, suffix: str) -> None:
    src = write(tmp_path / f"a.de{suffix}", "  eins \r\nzwei\u2028drei\n\nvier".encode())
    tgt = write(tmp_path / f"a.en{suffix}", b"one\ntwo\n\nfour\n")
    assert read_parallel(src, tgt) == (
        ["eins", "zwei\u2028drei", "", "vier"],
        ["one", "two", "", "four"],
    )
    assert read_parallel(src, tgt, limit=2) == (["eins", "zwei\u2028drei"], ["one", "two"])


def test_lines_ended_by_cr_alone_are_refused_not_read_as_one(tmp_path: Path) -> None:
    """Old Mac text: every pair would be one line (or the whole file one over max_len)."""
    src = write(tmp_path / "a.de", b"eins\rzwei\rdrei\r")
    tgt = write(tmp_path / "a.en", b"one\ntwo\nthree\n")
    with pytest.raises(DataError, match=r"a.de ends its lines with CR alone \(old Mac text\)"):
        read_parallel(src, tgt)
    write(tmp_path / "b.de", b"eins\r")  # one line, a CR at its end: read as CRLF's
    write(tmp_path / "b.en", b"one")
    assert read_parallel(tmp_path / "b.de", tmp_path / "b.en") == (["eins"], ["one"])


def test_line_count_mismatch_names_both_files_and_counts(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", b"1\n2\n3\n")
    tgt = write(tmp_path / "a.en.gz", b"1\n2\n")
    with pytest.raises(DataError) as err:
        read_parallel(src, tgt, limit=1)  # validated even when only a prefix is used
    assert f"{src} has 3 lines" in str(err.value) and f"{tgt} has 2" in str(err.value)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_invalid_utf8_names_file_and_line(tmp_path: Path, suffix: str) -> None:
    src = write(tmp_path / f"a.de{suffix}", "gut\nschön\n".encode() + b"kaputt \xff hier\nok\n")
    tgt = write(tmp_path / "a.en", b"good\nnice\nbroken\nok\n")
    with pytest.raises(DataError, match=re.escape(f"{src}, line 3: invalid UTF-8")):
        read_parallel(src, tgt)


def test_custom_prefixes_plain_and_gz(tmp_path: Path) -> None:
    write(tmp_path / "train.de", b"a\n")
    write(tmp_path / "train.en.gz", b"b\n")
    write(tmp_path / "dev.de.gz", b"c\n")
    write(tmp_path / "dev.en.gz", b"d\n")
    cfg = CustomDataConfig(train=str(tmp_path / "train"), valid=str(tmp_path / "dev"))
    assert split_files(cfg, "train") == (tmp_path / "train.de", tmp_path / "train.en.gz")
    assert split_files(cfg, "valid") == (tmp_path / "dev.de.gz", tmp_path / "dev.en.gz")
    with pytest.raises(DataError, match="no test split configured"):
        split_files(cfg, "test")
    with pytest.raises(DataError, match=r"neither .*missing\.de nor .*missing\.de\.gz exists"):
        split_files(cfg, str(tmp_path / "missing"))
    with pytest.raises(DataError, match=r"exists: give the prefix without its language, .*/dev$"):
        split_files(cfg, str(tmp_path / "dev.de.gz"))
    folder = f"{tmp_path}/ is a folder: a split is given by the prefix of its files, e.g. "
    with pytest.raises(DataError, match=f"^{re.escape(folder)}.*/train for .*/train.de and "):
        split_files(cfg, f"{tmp_path}/")


def test_a_side_with_both_forms_reads_the_other_sides_form_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain train.de beside train.de.gz was read with train.en.gz, silently misaligned."""
    write(tmp_path / "train.de", b"stale\n")
    write(tmp_path / "train.de.gz", b"a\n")
    write(tmp_path / "train.en.gz", b"b\n")
    cfg = CustomDataConfig(train=str(tmp_path / "train"), valid=None, test=None)
    with caplog.at_level("WARNING"):
        assert split_files(cfg, "train") == (tmp_path / "train.de.gz", tmp_path / "train.en.gz")
        check_splits(cfg)  # told by the start's check, not again as the split is read
    said = [r.getMessage() for r in caplog.records if "both exist" in r.getMessage()]
    assert said == [
        f"{tmp_path}/train.de and {tmp_path}/train.de.gz both exist: reading "
        f"{tmp_path}/train.de.gz, the form of {tmp_path}/train.en.gz; remove the file not meant, "
        "or the pairs may be misaligned"
    ]
    write(tmp_path / "train.en", b"b\n")  # both forms on both sides: the plain files
    with caplog.at_level("WARNING"):
        check_splits(cfg)
    assert "both exist: reading the plain files" in caplog.records[-1].getMessage()
    assert split_files(cfg, "train") == (tmp_path / "train.de", tmp_path / "train.en")


def test_the_configured_files_are_checked_without_a_download(multi30k_dir, tmp_path) -> None:
    """A wrong local folder or prefix is said before a run starts, naming its key."""
    check_splits(Multi30kConfig(source=str(multi30k_dir), root=str(tmp_path / "root")))
    check_splits(Multi30kConfig(source="https://example.org/m30k", root=str(tmp_path / "r")))
    with pytest.raises(DataError, match=r"^data.source=.*none holds no train.de.gz \(nor does"):
        check_splits(Multi30kConfig(source=str(tmp_path / "none"), root=str(tmp_path / "root")))
    assert not (tmp_path / "root").exists()
    cfg = CustomDataConfig(train=str(tmp_path / "train"), valid=str(tmp_path / "dev"))
    with pytest.raises(DataError, match=r"^data.train=.*train: neither .*train\.de nor"):
        check_splits(cfg)


MADE_BY = (
    "; this recipe's data is made by: python scripts/alignment_data.py --multi30k "
    "../shared/data/multi30k --pairs ../shared/data/alignment/en-fr.hansards.txt "
    "--out data/hansards_mix"
)


@pytest.mark.parametrize(
    "recipe",
    [
        ("experiment=hansards_en_fr_cpu",),
        ("experiment=attention_comparison_en_fr", "+compare=luong"),
    ],
)
def test_a_recipes_missing_data_names_the_command_that_makes_it(recipe, tmp_path, monkeypatch):
    """The English->French recipes read files a script writes (data.prepare): a start without
    them says that command and the folder their relative paths were read from, in one line;
    evaluation's reading of a configured split says it too, a prefix of the user's does not."""
    monkeypatch.chdir(tmp_path)
    data = composed(*recipe).data
    with pytest.raises(DataError) as said:
        open_reader(data).check()
    assert str(said.value) == (
        "data.train=data/hansards_mix/train: neither data/hansards_mix/train.en nor "
        "data/hansards_mix/train.en.gz exists; relative paths are read from the current folder, "
        f"{os.getcwd()}{MADE_BY}"
    )
    with pytest.raises(DataError) as said:
        split_files(data, "test")
    assert str(said.value).endswith(f"test_2016_flickr.en.gz exists{MADE_BY}")
    with pytest.raises(DataError, match=r"neither other\.en nor other\.en\.gz exists$"):
        split_files(data, "other")


def test_only_the_splits_data_prepare_writes_name_its_command(tmp_path, monkeypatch) -> None:
    """data.prepare's command ends the refusal of a split in a folder that command names; a split
    overridden to files of another making (back-translated data) is refused without it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as said:
        open_reader(composed("experiment=tatoeba_lowres_de_en").data).check()
    assert str(said.value).endswith(
        "; this recipe's data is made by: python scripts/tatoeba_lowres.py "
        "../shared/data/tatoeba/deu-eng.zip data/tatoeba_lowres"
    )
    overridden = composed("experiment=tatoeba_lowres_de_en", "data.train=data/bt_beam/mixed_1")
    with pytest.raises(DataError) as said:
        open_reader(overridden.data).check()
    assert str(said.value).startswith("data.train=data/bt_beam/mixed_1: neither")
    assert "made by" not in str(said.value)


@pytest.mark.parametrize(
    ("recipe", "file"),
    [
        ("tatoeba_zh_en_smoke", "cmn-eng.txt.gz"),
        ("tatoeba_en_zh_cpu", "cmn-eng.txt.gz"),
        ("tatoeba_de_en_cpu", "deu-eng.zip"),
    ],
)
def test_a_tatoeba_recipes_missing_file_says_where_it_looked_and_how_to_copy_it(
    recipe: str, file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """data.file=data/tatoeba/...: the folder it was read from and data.prepare's copy from
    ../shared; a data.file of the user's elsewhere is refused without the copy."""
    monkeypatch.chdir(tmp_path)
    cfg = composed(f"experiment={recipe}")
    for check in (lambda: open_reader(cfg.data).check(), lambda: check_files(cfg)):
        with pytest.raises(DataError) as said:
            check()  # the reader's check as training starts, and the command's check of files
        assert str(said.value) == (
            f"data.file=data/tatoeba/{file} does not exist; relative paths are read from the "
            f"current folder, {os.getcwd()}; this recipe's data is made by: mkdir -p data/tatoeba "
            f"&& cp ../shared/data/tatoeba/{file} data/tatoeba"
        )
    with pytest.raises(DataError) as said:
        open_reader(composed(f"experiment={recipe}", "data.file=mine/x.gz").data).check()
    assert str(said.value).startswith("data.file=mine/x.gz does not exist; relative paths are")
    assert "made by" not in str(said.value)


def test_multi30k_split_names(multi30k_dir: Path, tmp_path: Path) -> None:
    cfg = Multi30kConfig(source=str(multi30k_dir), root=str(tmp_path), src_lang="fr", tgt_lang="cs")
    assert split_files(cfg, "valid") == (tmp_path / "val.fr.gz", tmp_path / "val.cs.gz")
    assert split_files(cfg, "test_2016_flickr")[0] == tmp_path / "test_2016_flickr.fr.gz"
    src, tgt = read_parallel(*split_files(cfg, "test"))
    assert len(src) == len(tgt) == 1000
    with pytest.raises(DataError, match="splits are: train, val, test_2016_flickr, test_2017"):
        split_files(cfg, "test_2019")
    with pytest.raises(
        DataError, match="test_2017_mscoco has no language 'cs'; it has: de, en, fr"
    ):
        split_files(cfg, "test_2017_mscoco")
    cfg.tgt_lang = "fr"
    with pytest.raises(DataError, match="both 'fr'"):
        split_files(cfg, "train")


def test_workers_of_a_python_m_command_start_without_warnings(tmp_path: Path) -> None:
    """Under ``python -m`` the workers' server preloads the command's module, and each worker runs
    it again: no RuntimeWarning about a module already imported may reach the user."""
    import subprocess
    import sys

    (tmp_path / "probe").mkdir()  # a module in a package, as seq2seq.commands.train is
    (tmp_path / "probe" / "__init__.py").write_text("")
    (tmp_path / "probe" / "command.py").write_text(
        "from seq2seq.data.stream import worker_context\n"
        "if __name__ == '__main__':\n"
        "    with worker_context().Pool(1) as pool:\n"
        "        print(pool.apply(abs, (-3,)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "probe.command"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "3", proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr


def test_an_interrupted_worker_pool_stops_its_workers_at_once() -> None:
    """Ctrl-C during tokenizer training waited for sentencepiece to finish (its C++ loop hears
    no signal; under torchrun the workers get none): minutes on a large corpus."""
    import time

    from seq2seq.data.stream import worker_pool

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), worker_pool(1) as pool:
        busy = pool.submit(time.sleep, 60)
        while not busy.running():
            time.sleep(0.05)
        raise KeyboardInterrupt
    assert time.monotonic() - start < 30
