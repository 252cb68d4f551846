"""Long input is read whole: a sentence of over 300 subwords (three times the smoke model's
data.max_len) through seq2seq-evaluate, -translate, -serve and -align, and a line over
max_source_len refused in one line naming it, never cut."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from run_helpers import cli
from serve_helpers import post, server

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.storage.rundir import SRC_TOKENIZER

LONG_DE = " ".join(["Ein Hund läuft schnell über die grüne Wiese ."] * 30)
LONG_EN = " ".join(["A dog runs fast over the green meadow ."] * 30)


def pieces(run: Path, text: str) -> int:
    return len(Tokenizer.load(run / SRC_TOKENIZER).encode_batch([text])[0])


def command(module: str, *args: str, cwd: Path, data: str | None = None):
    cmd = [*cli(module), *args]
    return subprocess.run(cmd, cwd=cwd, input=data, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_evaluate_and_translate_read_a_long_line_whole(smoke_run: Path, tmp_path: Path) -> None:
    length = pieces(smoke_run, LONG_DE)
    assert length > 300
    run = tmp_path / "run"  # evaluate writes into the run folder: a copy of the shared one
    shutil.copytree(smoke_run, run, ignore=shutil.ignore_patterns("eval"))
    src, ref = tmp_path / "long.de", tmp_path / "long.en"
    src.write_text(f"Ein Hund .\n{LONG_DE}\n", encoding="utf-8")
    ref.write_text(f"A dog .\n{LONG_EN}\n", encoding="utf-8")
    proc = command("evaluate", f"run_dir={run}", f"input={src}", f"reference={ref}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    records = [json.loads(x) for x in Path(result["attention"]).read_text().splitlines()]
    assert len(records[1]["source"]) == length + 1  # every piece and EOS: nothing cut
    refused = command(
        "evaluate",
        f"run_dir={run}",
        f"input={src}",
        f"reference={ref}",
        "max_source_len=50",
        cwd=tmp_path,
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"long.de, line 2 has {length:,} subwords; at most 50" in refused.stderr

    lines = f"Ein Hund .\n{LONG_DE}\n"
    proc = command("translate", f"run_dir={smoke_run}", cwd=tmp_path, data=lines)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 2, proc.stderr
    assert proc.stdout.splitlines()[1] and "subwords" not in proc.stderr
    refused = command(
        "translate", f"run_dir={smoke_run}", "max_source_len=50", cwd=tmp_path, data=lines
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"standard input, line 2 has {length:,} subwords; at most 50" in refused.stderr
    assert refused.stdout.splitlines() == proc.stdout.splitlines()[:1]  # the line before it


@pytest.mark.slow
def test_the_server_reads_a_long_sentence_whole_or_answers_413(smoke_run: Path) -> None:
    length = pieces(smoke_run, LONG_DE)
    longer = f"{LONG_DE} {LONG_DE}"
    with server(smoke_run, "max_chars=4000", f"max_source_len={length + 10}") as (url, _):
        status, data = post(url, {"sentences": [LONG_DE], "alignment": True})
        assert status == 200, data
        [item] = data["translations"]
        assert item["translation"] and len(item["alignment"]["source"]) == length + 1
        status, data = post(url, {"sentences": ["Ein Hund .", longer]})
        assert status == 413 and data["error"].startswith("sentence 1 has")
        assert f"at most {length + 10:,}" in data["error"]


@pytest.mark.slow
def test_align_reads_a_long_pair_whole(smoke_run: Path, tmp_path: Path) -> None:
    pairs, weights = tmp_path / "pairs.txt", tmp_path / "weights.jsonl"
    pairs.write_text(f"{LONG_DE} ||| {LONG_EN}\n", encoding="utf-8")
    proc = command(
        "align", f"run_dir={smoke_run}", f"input={pairs}", f"weights={weights}", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    matrix = np.array(json.loads(weights.read_text())["weights"])
    # a row per target word, a column per source word and one for EOS; each row whole
    assert matrix.shape == (len(LONG_EN.split()), len(LONG_DE.split()) + 1)
    np.testing.assert_allclose(matrix.sum(1), 1, atol=0.02)  # 241 weights rounded to 4 places
