"""scripts/attention_table.py and attention_runs.py: the comparison's measures, and the table from
run folders."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seq2seq.storage.manifest import write_manifest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import attention_runs  # noqa: E402
import attention_table  # noqa: E402

W = "\u2581"  # sentencepiece's word mark


def run(**fields) -> attention_runs.Run:
    """A summary with only the fields a test looks at."""
    defaults = {"folder": "f", "row": "r", "direction": "de→en", "seed": 1, "measures": {}}
    defaults |= {"penalised": None, "curve": {}, "tokens_per_second": 1.0, "parameters": 1}
    return attention_runs.Run(**(defaults | fields))


def test_repeated_bigrams_count_repeats_within_a_line_per_100_words() -> None:
    lines = ["a man a man a man", "a man", "x y z"]  # 6 + 2 + 3 words
    # line 1: (a, man) x3, (man, a) x2 -> 2 + 1 repeats; the others none
    assert attention_runs.repeated_bigrams(lines) == pytest.approx(100 * 3 / 11)
    assert attention_runs.repeated_bigrams([]) == 0


def test_unattended_words_join_pieces_into_words_and_leave_out_eos() -> None:
    record = {
        "source": [f"{W}ein", f"{W}hund", "e", f"{W}läuft", "</s>"],  # 3 words + EOS
        "target": [f"{W}a", f"{W}dog", "</s>"],
        "weights": [  # rows: a, dog, EOS (its row is left out)
            [0.7, 0.1, 0.1, 0.0, 0.1],
            [0.0, 0.1, 0.8, 0.0, 0.1],  # the second piece of the second word
            [0.0, 0.0, 0.0, 1.0, 0.0],
        ],
    }
    assert attention_runs.unattended_words([record]) == pytest.approx(100 / 3)  # "läuft"
    eos_only = {**record, "weights": [[0, 0, 0, 0, 1.0]] * 3}
    assert attention_runs.unattended_words([eos_only]) == pytest.approx(100)


def test_mean_spread_and_the_seeds_spread_rule() -> None:
    assert attention_table.mean_spread([30.0, 32.0]) == "31.00 ± 1.00"
    assert attention_table.mean_spread([30.0]) == "30.00"
    assert attention_table.mean_spread([None, float("nan")]) == "–"

    def runs(*bleus: float) -> list:
        return [run(measures={"bleu": b}) for b in bleus]

    best = runs(32.0, 33.0)
    assert attention_table.within_spread(runs(31.8, 32.2), best)  # gap 0.5 <= range 1.0
    assert not attention_table.within_spread(runs(30.0, 30.2), best)  # gap 2.4 > range 1.0


@pytest.mark.slow
def test_the_table_and_pictures_from_run_folders(
    smoke_run: Path, multi30k_dir: Path, tmp_path: Path
) -> None:
    """Two rows (one of them with two seeds) as a sweep leaves them: each run folder is evaluated
    by the script, the table has a line per row with its seeds, and the pictures are written.
    The runs' test split is the first 60 test sentences, as files: six evaluations in seconds."""
    test = tmp_path / "test"
    for lang in ("de", "en"):
        with gzip.open(multi30k_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(60)]
        Path(f"{test}.{lang}").write_text("".join(lines), encoding="utf-8")
    sweep = tmp_path / "sweep"
    for folder, row, seed in (("0_a", "bahdanau", 1), ("1_b", "bahdanau", 2), ("2_c", "other", 1)):
        copy = sweep / folder
        shutil.copytree(smoke_run, copy, ignore=shutil.ignore_patterns("eval"))
        (copy / ".hydra").mkdir(exist_ok=True)
        (copy / ".hydra" / "overrides.yaml").write_text(f"- +compare={row}\n- train.seed={seed}\n")
        cfg = OmegaConf.load(copy / "config.yaml")
        cfg.train.seed = seed
        data = {k: v for k, v in cfg.data.items() if k not in ("source", "root")}
        cfg.data = {**data, "kind": "custom", "test": str(test)}
        OmegaConf.save(cfg, copy / "config.yaml")
        write_manifest(
            copy / "manifest.json", [copy / n for n in ("config.yaml", "src.model", "tgt.model")]
        )
    record = tmp_path / "comparison.jsonl"
    script = [sys.executable, "scripts/attention_table.py"]
    options = ["--pictures", str(tmp_path), "--sentence", "0", "--coverage-penalty", "0.5"]
    proc = subprocess.run(
        [*script, str(sweep), *options, "--record", str(record)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("| de→en")]
    rows = {line.split("|")[2].strip(): [c.strip() for c in line.split("|")] for line in lines[:2]}
    assert set(rows) == {"bahdanau", "other"} and rows["bahdanau"][3] == "1,2"
    assert float(rows["bahdanau"][4].split()[0]) > 0  # test BLEU, the mean of the two seeds
    # the entropy table: a line per row; the coverage table: 2 rows x 2 betas
    assert "β" in proc.stdout and len(lines) == 2 + 2 + 2 * 2
    for copy in sweep.iterdir():
        assert (copy / "eval" / "test.best.beam5.json").is_file()
        assert (copy / "eval" / "test.best.beam5.cp0.5.json").is_file()
    for name in ("attention_curves.png", "attention_heatmaps.png", "attention_other.de-en.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert len(record.read_text().splitlines()) == 3
    again = subprocess.run(
        [*script, "--record", str(record)], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert again.returncode == 0 and again.stdout == proc.stdout  # the records alone


def test_aer_cells_give_argmax_and_the_rows_best_method() -> None:
    def aligned(**aer: float):
        return run(aer=dict.fromkeys(attention_runs.ALIGN_METHODS, 0.9) | aer)

    cells = attention_table.aer_cells([aligned(argmax=0.6), aligned(**{"threshold 0.3": 0.4})])
    assert cells == ["0.750 ± 0.150", "0.650 ± 0.250 (threshold 0.3)"]
    assert attention_table.aer_cells([run()]) == ["–", "–"]


def test_records_merge_by_direction_row_and_seed(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    first = [run(row="a", seed=1, curve={200: 5.0}), run(row="a", seed=2)]
    assert len(attention_runs.merged(path, first)) == 2
    again = attention_runs.merged(path, [run(row="a", seed=1, curve={200: 6.0}), run(row="b")])
    assert [(r.row, r.seed) for r in again] == [("a", 1), ("a", 2), ("b", 1)]
    assert again[0].curve == {200: 6.0}  # replaced, and the update keys are ints again
    assert attention_runs.merged(path, []) == again  # the file alone makes the table


def test_training_speed_comes_from_the_runs_with_the_most_threads() -> None:
    measures = dict.fromkeys(("bleu", "chrf", "entropy", "repeats", "unattended"), 1.0)
    measures["sentences_per_second"] = 1.0
    alone = run(seed=1, threads=2, tokens_per_second=2700.0, measures=measures)
    shared = run(seed=2, threads=1, tokens_per_second=1500.0, measures=measures)
    assert attention_runs.speed_runs([alone, shared]) == [alone]
    assert attention_runs.speed_runs([shared]) == [shared]
    cells = attention_table.table([alone, shared]).splitlines()[2].split(" | ")
    assert "2700" in cells and "2100" not in cells


def test_tables_are_written_between_their_marks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- attention_table:main -->\nold\n<!-- /attention_table -->\nend\n")
    attention_table.write_into(page, {"main": "| new |"})
    assert page.read_text() == (
        "intro\n<!-- attention_table:main -->\n| new |\n<!-- /attention_table -->\nend\n"
    )
    with pytest.raises(SystemExit, match="attention_table:entropy"):
        attention_table.write_into(page, {"entropy": "x"})


def measured(bleu: float) -> dict[str, float]:
    names = ("chrf", "entropy", "repeats", "unattended", "sentences_per_second")
    return dict.fromkeys(names, 1.0) | {"bleu": bleu}


def comparison() -> list[attention_runs.Run]:
    """Two directions; a best row, one within its seeds' spread and one outside; AER by each
    method with threshold 0.3 best for one row; validation curves and the coverage penalty."""
    runs = []
    for direction, row, seed, bleu in (
        ("de→en", "luong", 1, 30.0),
        ("de→en", "luong", 2, 32.0),
        ("de→en", "local_m", 1, 30.5),
        ("de→en", "bahdanau", 1, 20.0),
        ("en→fr", "local_m", 1, 38.0),
    ):
        aer = dict.fromkeys(attention_runs.ALIGN_METHODS, 0.6) | {"threshold 0.3": 0.5}
        runs.append(
            run(
                direction=direction,
                row=row,
                seed=seed,
                measures=measured(bleu),
                penalised=measured(bleu + 0.5) | {"beta": 0.2},
                curve={200: bleu / 2, 400: bleu},
                entropy_curve={200: 2.0, 400: 1.0},
                aer=aer if direction == "en→fr" else None,
                cpu="AMD EPYC (family 25 model 1)",
            )
        )
    return runs


# what a Chinese table may keep from English: names of measures and methods, units
KEPT = re.compile(r"BLEU|chrF|AER|argmax|nats|/s\b|M\b|[/%@·()（），、：:;\s.,0-9±–−→β]")


def test_the_chinese_tables_translate_every_header_and_word_but_keep_the_numbers() -> None:
    runs = comparison()
    english = attention_table.tables(runs, "en", speed=True)
    chinese = attention_table.tables(runs, "zh", speed=True)
    assert english.keys() == chinese.keys()
    assert chinese.pop("machines") == "汇总所用的机器：AMD EPYC (family 25 model 1)"  # a CPU's name
    for name, text in chinese.items():
        lines = text.splitlines()
        for cell in lines[0].strip("|").split("|"):  # every header cell
            leftover = KEPT.sub("", cell)
            assert not re.search(r"[A-Za-z]", leftover), f"{name}: untranslated {cell!r}"
        for en_line, zh_line in zip(english[name].splitlines(), lines, strict=True):
            numbers = re.compile(r"\d+(?:\.\d+)?")
            assert numbers.findall(en_line) == numbers.findall(zh_line)  # the same numbers
        for line in lines[2:]:  # the cells: no English word but a row name or method
            cells = [c.strip() for c in line.strip("|").split("|")]
            words = [KEPT.sub("", c) for i, c in enumerate(cells) if i != 1]  # 1: the row name
            assert not any(re.search(r"[A-Za-z]", w) for w in words), line
    assert "在种子波动之内" in chinese["main"] and "阈值 0.3" in chinese["main"]
    assert chinese["main"].splitlines()[2].startswith("| 德→英 | luong |")
    assert set(attention_runs.ALIGN_METHODS) <= set(attention_table.WORDS)  # any best method
    with pytest.raises(ValueError, match="zh"):
        attention_table.tables(runs, "fr")


def test_the_pages_leave_the_speeds_out_and_each_page_gets_its_language(tmp_path: Path) -> None:
    marks = "".join(
        f"<!-- attention_table:{name} -->\nold\n<!-- /attention_table -->\n"
        for name in ("main", "entropy", "coverage", "machines")
    )
    record = tmp_path / "records.jsonl"
    attention_runs.merged(record, comparison())
    pages = [tmp_path / "attention.md", tmp_path / "attention.zh.md"]
    for page in pages:
        page.write_text(marks, encoding="utf-8")
    attention_table.main(["--record", str(record), "--docs", *map(str, pages)])
    english, chinese = (page.read_text(encoding="utf-8") for page in pages)
    assert "| direction | row |" in english and "| 方向 | 对比行 |" in chinese
    assert "| direction" not in chinese and "Summarised on" not in chinese
    assert "汇总所用的机器：AMD EPYC" in chinese
    for text in (english, chinese):
        assert "tok/s" not in text and "sent/s" not in text


def test_runs_of_one_row_with_other_settings_are_rows_of_their_own(tmp_path: Path) -> None:
    """An exercise's runs in one folder: an override beyond the row, seed and locations (scale,
    normalizer, another experiment) names its own row instead of passing for another seed or
    for the row it started from."""
    cfg = OmegaConf.create({"model": {"attention": {"name": "luong"}}})
    places = ["train.seed=1", "data.source=/data/m30k", "train.threads=1", "hydra.run.dir=x/y"]

    def name(*overrides: str) -> str:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        (folder / ".hydra").mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(list(overrides)), folder / ".hydra" / "overrides.yaml")
        return attention_runs.row_name(folder, cfg)

    comparison = ("experiment=attention_comparison", "+compare=luong")
    assert name(*comparison, *places) == "luong"
    assert name(*comparison, "model.attention.scale=false", *places) == (
        "luong model.attention.scale=false"
    )
    assert (
        name(
            "experiment=attention_comparison",
            "+compare=bahdanau",
            *places,
            "model.attention.normalizer=entmax15",
        )
        == "bahdanau model.attention.normalizer=entmax15"
    )
    assert name("experiment=smoke", "+compare=luong", *places) == "luong experiment=smoke"
    assert (
        name("model/attention=luong", "model.attention.score=dot")
        == "luong model.attention.score=dot"
    )
    assert attention_runs.row_name(tmp_path / "none", cfg) == "luong"  # no Hydra record
