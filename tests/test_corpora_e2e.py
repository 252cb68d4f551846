"""End to end on corpora other than Multi30k: a Tatoeba tab-separated export, the Chinese recipe
scored with sacreBLEU's zh tokenizer, and a Hugging Face dataset saved to disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from run_helpers import composed, run, sacrebleu_cli

from seq2seq.storage.manifest import damage


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_tatoeba_recipes_compose() -> None:
    cpu = composed("experiment=tatoeba_de_en_cpu")
    assert cpu.data.kind == "tsv" and cpu.data.columns == ["en", "de"]
    assert (cpu.data.src_lang, cpu.data.tgt_lang, cpu.train.max_minutes) == ("de", "en", 30)
    assert composed("experiment=tatoeba_en_de").data.src_lang == "en"
    zh = composed("experiment=tatoeba_en_zh_smoke")
    assert zh.data.tgt_lang == "zh" and zh.train.max_epochs == 4  # from the smoke recipe
    assert zh.data.train_limit is None and zh.data.tokenizer.vocab_size == 4000
    zh_en = composed("experiment=tatoeba_zh_en_cpu")
    en_zh = composed("experiment=tatoeba_en_zh_cpu")  # its reverse
    assert (zh_en.data.src_lang, zh_en.data.tgt_lang, en_zh.data.src_lang) == ("zh", "en", "en")
    assert en_zh.data.tgt_lang == "zh" and en_zh.data.columns == ["en", "zh"]
    for recipe in (zh_en, en_zh):  # the quick start's model, on the smoke recipe's splits
        assert (recipe.model.hidden_size, recipe.model.attention.name) == (512, "luong")
        splits = (recipe.data.valid_size, recipe.data.test_size, recipe.data.split_seed)
        assert splits == (500, 1000, 1) and recipe.train.max_minutes == 30


@pytest.mark.slow
def test_tsv_run_evaluates_without_its_corpus(tatoeba_dir: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "deu-eng.zip"
    shutil.copyfile(tatoeba_dir / "deu-eng.zip", corpus)
    folder = tmp_path / "run"
    run(
        "train",
        "experiment=smoke",
        "data=tsv",
        f"data.file={corpus}",
        "data.columns=[en,de]",
        "data.src_lang=de",
        "data.tgt_lang=en",
        "data.valid_size=300",
        "data.test_size=400",
        f"data.cache_dir={tmp_path / 'cache'}",
        "train.max_steps=20",
        "log.progress=false",
        f"hydra.run.dir={folder}",
    )
    assert not damage(folder / "manifest.json")
    assert "splits/test.de" in json.loads((folder / "manifest.json").read_text())
    corpus.unlink()  # the run folder holds its test split
    result = last_json(run("evaluate", f"run_dir={folder}", "beam_size=1"))
    assert result["split"] == "test" and 400 <= result["sentences"] < 420
    assert result["source"] == str((folder / "splits" / "test.de").resolve())
    assert result["hypotheses"].endswith("test.best.beam1.hyp")


@pytest.mark.slow
def test_chinese_recipe_is_scored_with_the_zh_tokenizer(tatoeba_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    run(
        "train",
        "experiment=tatoeba_en_zh_smoke",
        f"data.file={tatoeba_dir / 'cmn-eng.txt.gz'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.train_limit=3000",
        "train.max_epochs=1",
        "log.progress=false",
        f"hydra.run.dir={folder}",
    )
    result = last_json(run("evaluate", f"run_dir={folder}", "beam_size=1"))
    assert "tok:zh" in result["signature"] and result["sentences"] >= 1000
    cli = sacrebleu_cli(result["reference"], result["hypotheses"], "-tok", "zh", "-w", "6")
    assert result["bleu"] == pytest.approx(float(cli), abs=1e-4)


@pytest.mark.slow
def test_hugging_face_dataset_on_disk(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="the hf extra (pip install -e '.[hf]')")
    words = ["ein", "Hund", "läuft", "eine", "Katze", "schläft", "im", "Park", "Haus"]
    english = dict(
        zip(words, ["a", "dog", "runs", "a", "cat", "sleeps", "in", "park", "house"], strict=True)
    )
    rows = []
    for i in range(600):
        de = " ".join(words[(i + k) % len(words)] for k in range(3 + i % 4))
        rows.append({"de": de, "en": " ".join(english[w] for w in de.split())})
    path = tmp_path / "dataset"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"translation": rows[:500]}),
            "test": datasets.Dataset.from_dict({"translation": rows[500:]}),
        }
    ).save_to_disk(str(path))
    folder = tmp_path / "run"
    run(
        "train",
        "experiment=smoke",
        "data=hf",
        f"data.path={path}",
        "data.valid=null",
        "data.valid_size=50",
        f"data.cache_dir={tmp_path / 'cache'}",
        "train.max_steps=10",
        "log.progress=false",
        f"hydra.run.dir={folder}",
    )
    assert (folder / "splits" / "test.en").read_text().count("\n") == 100
    result = last_json(run("evaluate", f"run_dir={folder}", "beam_size=1"))
    assert result["split"] == "test" and result["sentences"] == 100
