"""Corpus readers: tab-separated files, carved splits, Hugging Face datasets, streamed encoding."""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import stat
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from seq2seq.config import CustomDataConfig, HfDataConfig, TokenizerConfig, TsvDataConfig
from seq2seq.data import carve as carve_module
from seq2seq.data import dataset as dataset_module
from seq2seq.data.carve import group_hash
from seq2seq.data.dataset import NpyWriter, encode_corpus
from seq2seq.data.readers import open_reader
from seq2seq.data.stream import file_digest, from_lists
from seq2seq.data.textstore import text_store
from seq2seq.data.tokenizer import train_tokenizers
from seq2seq.data.tsv import tsv_stream
from seq2seq.errors import DataError

ROWS = ["Hi.\tHallo!\tCC-BY #1", "Hi.\tGrüß Gott!\tCC-BY #2", "Run!\tLauf!\tCC-BY #3"]


def write_tsv(path: Path, lines: list[str], about: bool = True) -> Path:
    data = "".join(line + "\n" for line in lines).encode()
    if path.suffix == ".zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("deu.txt", data)
            if about:
                z.writestr("_about.txt", "notes")
    elif path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["pairs.tsv", "pairs.tsv.gz", "deu-eng.zip"])
def test_tsv_reads_named_columns_and_ignores_the_rest(tmp_path: Path, name: str) -> None:
    path = write_tsv(tmp_path / name, ROWS)
    stream = tsv_stream(path, ["en", "de"], "de", "en")
    assert list(stream) == [("Hallo!", "Hi."), ("Grüß Gott!", "Hi."), ("Lauf!", "Run!")]
    assert list(stream) == list(stream)  # a stream can be read again
    assert list(tsv_stream(path, ["en", "de"], "en", "de", limit=1)) == [("Hi.", "Hallo!")]


def test_tsv_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "a.tsv", ["a\tb", "only one field", "c\td"])
    with pytest.raises(DataError, match=re.escape(f"{path}, line 2: 1 tab-separated field")):
        list(tsv_stream(path, ["en", "de"], "en", "de"))
    named = "but data.columns names 3"  # the unused third as any other (it was not checked)
    with pytest.raises(
        DataError, match=re.escape(f"{path}, line 1: 2 tab-separated fields, {named}")
    ):
        list(tsv_stream(path, ["de", "en", "fr"], "de", "en"))
    bad = tmp_path / "b.tsv"
    bad.write_bytes(b"a\tb\nc\t\xff\n")
    with pytest.raises(DataError, match="line 2: invalid UTF-8"):
        list(tsv_stream(bad, ["en", "de"], "en", "de"))
    with pytest.raises(DataError, match=r"data.columns=\['en', 'fr'\] has no 'de' column"):
        tsv_stream(path, ["en", "fr"], "de", "en")
    two = tmp_path / "two.zip"
    with zipfile.ZipFile(two, "w") as z:
        z.writestr("a.txt", "x\ty\n")
        z.writestr("b.txt", "x\ty\n")
    with pytest.raises(DataError, match="should hold one text file besides notes"):
        list(tsv_stream(two, ["en", "de"], "en", "de"))
    blank = write_tsv(tmp_path / "blank.tsv", ["a\tb", "", "c\t"])
    assert list(tsv_stream(blank, ["en", "de"], "en", "de")) == [("a", "b"), ("", ""), ("c", "")]


def test_tsv_refuses_a_line_with_a_stray_tab(tmp_path: Path) -> None:
    """A tab inside the English moved the German into an ignored column, silently."""
    lines = ["Hi.\tHallo!", "English sentence. and\tmore\tGerman sentence", "Run!\tLauf!"]
    path = write_tsv(tmp_path / "a.tsv", lines)
    said = f"{path}, line 2: 3 tab-separated fields, but line 1 has 2: a tab inside a sentence"
    with pytest.raises(DataError, match=re.escape(said)):
        list(tsv_stream(path, ["en", "de"], "en", "de"))
    odd_first = write_tsv(tmp_path / "b.tsv", lines[1:])  # the first line is the odd one
    with pytest.raises(DataError, match="line 2: 2 tab-separated fields, but line 1 has 3"):
        list(tsv_stream(odd_first, ["en", "de"], "en", "de"))
    assert len(list(tsv_stream(write_tsv(tmp_path / "c.tsv", ROWS), ["en", "de"], "en", "de"))) == 3


def corpus_lines(groups: int = 150, per_group: int = 3) -> list[str]:
    """English repeated with several German translations, as in Tatoeba."""
    return [
        f"Sentence number {g}.\tSatz {g}, Fassung {v}."
        for g in range(groups)
        for v in range(per_group)
    ]


def tsv_config(tmp_path: Path, path: Path, **extra: object) -> TsvDataConfig:
    values = dict(
        file=str(path),
        columns=["en", "de"],
        src_lang="en",
        tgt_lang="de",
        cache_dir=str(tmp_path / "cache"),
        valid_size=20,
        test_size=30,
    )
    return TsvDataConfig(**{**values, **extra})


def test_carved_splits_share_no_source_sentence(tmp_path: Path, monkeypatch) -> None:
    path = write_tsv(tmp_path / "c.tsv", corpus_lines())
    reader = open_reader(tsv_config(tmp_path, path))
    reader.check()
    splits = {split: reader.stream(split).lists() for split in ("train", "valid", "test")}
    sources = {split: {s.casefold() for s in src} for split, (src, _) in splits.items()}
    assert not sources["train"] & sources["valid"] and not sources["train"] & sources["test"]
    assert not sources["valid"] & sources["test"]
    assert 20 <= len(splits["valid"][0]) < 20 + 3 and 30 <= len(splits["test"][0]) < 30 + 3
    assert sum(len(src) for src, _ in splits.values()) == 450  # every pair in one split
    # Carved once: a second reader finds the cached splits without selecting again.
    monkeypatch.setattr(carve_module, "_select", lambda *a: pytest.fail("carved again"))
    again = open_reader(tsv_config(tmp_path, path))
    assert again.stream("test").lists() == splits["test"]
    monkeypatch.undo()
    other = open_reader(tsv_config(tmp_path, path, split_seed=2))
    assert other.stream("test").lists() != splits["test"]  # the seed picks the groups
    fresh = open_reader(tsv_config(tmp_path / "fresh", path))
    assert fresh.stream("test").lists() == splits["test"]  # the same seed, the same split


def test_group_hash_ignores_case_and_spacing() -> None:
    assert group_hash("Hi  there.", 1) == group_hash(" hi there.", 1) != group_hash("Hi.", 1)
    assert group_hash("Hi.", 1) != group_hash("Hi.", 2)


def test_carving_refuses_to_leave_nothing_for_training(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "small.tsv", corpus_lines(groups=10))
    reader = open_reader(tsv_config(tmp_path, path))
    with pytest.raises(DataError, match="leave none for training"):
        reader.stream("train")


def test_own_split_files_and_a_pinned_checksum(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "train.tsv", corpus_lines(groups=20))
    test = write_tsv(tmp_path / "test.tsv", ["Own test.\tEigener Test."])
    cfg = tsv_config(tmp_path, path, test=str(test), valid_size=5)
    reader = open_reader(cfg)
    assert reader.stream("test").lists() == (["Own test."], ["Eigener Test."])
    assert len(reader.stream("train").lists()[0]) + len(reader.stream("valid").lists()[0]) == 60
    cfg.sha256 = "0" * 64
    with pytest.raises(DataError, match="is not the file data.sha256 names"):
        open_reader(cfg).check()
    cfg.sha256 = file_digest(path)
    open_reader(cfg).check()
    cfg.test, cfg.test_size = None, 0
    assert not open_reader(cfg).has("test")


def test_file_stream_limit_and_validation(tmp_path: Path) -> None:
    (tmp_path / "t.de").write_text("a\nb\nc\n")
    (tmp_path / "t.en").write_text("A\nB\nC\n")
    cfg = CustomDataConfig(train=str(tmp_path / "t"), valid=str(tmp_path / "t"))
    stream = open_reader(cfg).stream("train", limit=2)
    assert stream.lists() == (["a", "b"], ["A", "B"])
    (tmp_path / "t.en").write_text("A\nB\n")
    with pytest.raises(DataError, match="has 3 lines, .* has 2"):
        open_reader(cfg).stream("train", limit=1).lists()


# -- Hugging Face datasets -------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    datasets = pytest.importorskip("datasets", reason="the hf extra (pip install -e '.[hf]')")
    folder = tmp_path_factory.mktemp("hf") / "dataset"
    rows = [{"de": f"Satz {i}.", "en": f"Sentence {i}."} for i in range(300)]
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(
                {"translation": rows[:250], "id": list(range(250))}
            ),
            "test": datasets.Dataset.from_dict({"translation": rows[250:], "id": list(range(50))}),
        }
    ).save_to_disk(str(folder))
    return folder


def test_hf_translation_column_splits_and_carving(hf_folder: Path, tmp_path: Path) -> None:
    cfg = HfDataConfig(path=str(hf_folder), valid=None, valid_size=10, cache_dir=str(tmp_path))
    reader = open_reader(cfg)
    reader.check()
    test = reader.stream("test")
    assert test.size == 50 and next(iter(test)) == ("Satz 250.", "Sentence 250.")
    valid, train = reader.stream("valid").lists(), reader.stream("train").lists()
    assert len(valid[0]) == 10 and len(train[0]) == 240 and not set(valid[0]) & set(train[0])
    assert reader.stream("train", limit=5).lists()[0] == train[0][:5]
    cfg.valid = "validation"
    with pytest.raises(DataError, match="has no split 'validation' .* it has: train, test"):
        open_reader(cfg).check()


def test_hf_a_folder_of_jsonl_files(tmp_path: Path) -> None:
    """A folder of data files is datasets' to load (it was taken for a save_to_disk folder:
    'neither a Dataset directory nor a DatasetDict directory')."""
    pytest.importorskip("datasets", reason="the hf extra (pip install -e '.[hf]')")
    folder = tmp_path / "jsonl"
    folder.mkdir()
    for split, count in (("train", 40), ("test", 5)):
        rows = [{"translation": {"de": f"Satz {i}.", "en": f"Sentence {i}."}} for i in range(count)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = HfDataConfig(path=str(folder), valid=None, valid_size=4, cache_dir=str(tmp_path))
    reader = open_reader(cfg)
    reader.check()
    assert reader.stream("test").lists() == (
        [f"Satz {i}." for i in range(5)],
        [f"Sentence {i}." for i in range(5)],
    )
    assert len(reader.stream("train").lists()[0]) == 36


def test_hf_string_columns_and_missing_columns(hf_folder: Path, tmp_path: Path) -> None:
    cfg = HfDataConfig(path=str(hf_folder), src_column="id", tgt_column="nope", valid=None)
    with pytest.raises(DataError, match="must both name columns; the dataset has: translation, id"):
        open_reader(cfg).stream("test")
    cfg = HfDataConfig(path=str(hf_folder), src_lang="fr", valid=None)
    with pytest.raises(DataError, match="has no language 'fr'; it has: de, en"):
        open_reader(cfg).stream("test")


def test_hf_a_column_of_numbers_is_refused_before_any_work(tmp_path: Path) -> None:
    """data.src_column=id was read until a traceback: 'int' object has no attribute 'replace'."""
    datasets = pytest.importorskip("datasets", reason="the hf extra (pip install -e '.[hf]')")
    rows = {"de": ["Satz."] * 20, "en": ["Sentence."] * 20, "id": list(range(20))}
    rows["pair"] = [{"de": i, "en": "Sentence."} for i in range(20)]
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "cols"))
    cfg = HfDataConfig(path=str(tmp_path / "cols"), src_column="id", tgt_column="en", valid=None)
    said = "data.src_column=id holds int64 values, not text; name a column of strings "
    with pytest.raises(DataError, match=re.escape(said + "(the dataset's: de, en)")):
        open_reader(cfg).check()
    cfg = HfDataConfig(path=str(tmp_path / "cols"), column="pair", valid=None, test=None)
    with pytest.raises(DataError, match=re.escape("data.column=pair (de) holds int64 values")):
        open_reader(cfg).check()


def test_hf_translation_feature_of_hub_datasets(tmp_path: Path) -> None:
    """Hub datasets such as wmt14 declare datasets.Translation, not a dict of strings."""
    datasets = pytest.importorskip("datasets", reason="the hf extra (pip install -e '.[hf]')")
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    rows = [{"de": f" Satz {i}.\n", "en": f"Sentence\n{i}."} for i in range(30)]
    split = datasets.Dataset.from_dict({"translation": rows}, features=features)
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "d"))
    cfg = HfDataConfig(path=str(tmp_path / "d"), valid="test", cache_dir=str(tmp_path))
    src, tgt = open_reader(cfg).stream("test").lists()
    assert (src[3], tgt[3]) == ("Satz 3.", "Sentence 3.")  # one line each


def test_hf_without_the_extra_says_how_to_install(monkeypatch, tmp_path: Path) -> None:
    from seq2seq.data import hf

    hf.load_splits.cache_clear()
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(DataError, match=re.escape("pip install -e '.[hf]'")):
        open_reader(HfDataConfig(path=str(tmp_path))).check()
    hf.load_splits.cache_clear()


# -- streamed encoding -----------------------------------------------------------------------


def test_npy_writer_appends_a_loadable_array(tmp_path: Path) -> None:
    with NpyWriter(tmp_path / "a.npy", np.int32) as writer:
        writer.append(np.arange(5))
        writer.append(np.array([], dtype=np.int64))
        writer.append(np.array([7]))
    loaded = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert loaded.dtype == np.int32 and loaded.tolist() == [0, 1, 2, 3, 4, 7]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tok")
    lines = [f"Satz {i} mit {i % 7} Wörtern." for i in range(400)]
    cfg = CustomDataConfig(
        train="x", valid="x", cache_dir=str(tmp), tokenizer=TokenizerConfig(vocab_size=60)
    )
    return train_tokenizers(cfg, from_lists(lines, [s.upper() for s in lines]), tmp / "run")


def test_worker_processes_encode_what_one_process_does(tokenizers, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(dataset_module, "CHUNK", 97)  # many chunks from a small corpus
    src = [f"Satz {i} mit {'langen ' * (i % 5)}Wörtern." if i % 50 else "" for i in range(1000)]
    pairs = from_lists(src, [s.upper() for s in src])
    one = encode_corpus(pairs, *tokenizers, tmp_path / "one", 24, True, workers=1)
    two = encode_corpus(pairs, *tokenizers, tmp_path / "two", 24, True, workers=2)
    assert 0 < len(one) < 1000
    for name in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets", "line_numbers"):
        assert np.array_equal(getattr(one, name), getattr(two, name)), name
    assert one.src(3).tolist() == tokenizers[0].encode(src[one.line_numbers[3]]) + [3]


def test_text_store_reads_lines_by_number(tmp_path: Path) -> None:
    src = ["ein", "", "zwei ünd drei", "龘"] * 30_000  # more than one block of offsets
    store = text_store(from_lists(src, [s[::-1] for s in src]), tmp_path)
    assert len(store[0]) == len(src) and store[0][2] == "zwei ünd drei" and store[1][3] == "龘"
    assert store[0][119_999] == "龘" and store[0][1] == ""
    again = text_store(from_lists(src, [s[::-1] for s in src]), tmp_path)
    assert again[1][2] == "ierd dnü iewz"


def test_cache_folders_are_as_readable_as_the_umask_allows(tokenizers, tmp_path: Path) -> None:
    """Written in a temporary folder (mkdtemp: 0700) and renamed: the cache a run leaves is
    readable as the umask allows, as the files in it are."""
    mask = os.umask(0o022)
    try:
        lines = [f"Satz {i}." for i in range(300)]
        text_store(from_lists(lines, lines), tmp_path / "text")
        encode_corpus(from_lists(lines, lines), *tokenizers, tmp_path / "ids", 24, True, workers=1)
        reader = open_reader(tsv_config(tmp_path, write_tsv(tmp_path / "c.tsv", corpus_lines())))
        reader.check()
        reader.stream("test").lists()
    finally:
        os.umask(mask)
    folders = {p.relative_to(tmp_path): p for p in tmp_path.rglob("*") if p.is_dir()}
    assert len(folders) >= 4  # text, ids, the carved splits and their cache folder
    assert {str(k): oct(stat.S_IMODE(p.stat().st_mode)) for k, p in folders.items()} == {
        str(k): oct(0o755) for k in folders
    }


def test_run_configs_of_older_versions_name_their_reader(tmp_path: Path) -> None:
    """Run folders written before data.kind said data.name: multi30k or custom."""
    from seq2seq.runtime.run_folder import read_config

    old = tmp_path / "config.yaml"
    old.write_text(
        "data: {name: custom, src_lang: de, tgt_lang: en, train: a, valid: b, test: null}\n"
        "model: {hidden_size: 8, attention: {name: bahdanau}}\n"
    )
    cfg = read_config(old)
    assert cfg.data.kind == "custom" and open_reader(cfg.data).describe() == "custom (a)"


def test_an_unreachable_hub_is_one_line_that_says_how_to_go_offline(monkeypatch, caplog) -> None:
    datasets = pytest.importorskip("datasets", reason="the hf extra (pip install -e '.[hf]')")
    from seq2seq.data import hf

    bars_while_loading = []

    def unreachable(*args: object) -> None:
        bars_while_loading.append(datasets.is_progress_bar_enabled())
        logging.getLogger("huggingface_hub").warning("Retrying in 1s [Retry 1/5].")
        raise ConnectionError("Couldn't reach 'wmt14' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    hf.load_splits.cache_clear()
    before, bars = logging.getLogger("huggingface_hub").level, datasets.is_progress_bar_enabled()
    datasets.enable_progress_bars()
    with pytest.raises(DataError, match="HF_HUB_OFFLINE=1 loads a dataset from the .* cache"):
        hf.load_splits("wmt14", "de-en")
    assert logging.getLogger("huggingface_hub").level == before  # as it was
    assert bars_while_loading == [False]
    assert datasets.is_progress_bar_enabled()  # the process's setting, as it was
    if not bars:
        datasets.disable_progress_bars()
    assert "Retrying" not in caplog.text  # the hub client's retries left out
