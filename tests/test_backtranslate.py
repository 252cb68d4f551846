"""seq2seq-backtranslate: a reverse run's translations of monolingual text as synthetic sources,
equal to what seq2seq-evaluate decodes; real pairs mixed with them at each ratio; a tag from the
same chunks without decoding again; sampling seeded, each chunk with seeds of its own; impossible
requests refused in one line; the simulated low-resource split of the measurement keeps its
monolingual text apart."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from run_helpers import REPO, TRAIN_TIMEOUT, cli, command, gz_lines

MONO = [
    f"Ein {w} {v} auf der Straße."
    for w in ("Mann", "Hund", "Kind", "Mädchen", "Junge")
    for v in ("steht", "läuft", "sitzt", "spielt", "schläft")
]  # 25 German sentences


def backtranslate(run: Path, *overrides: str) -> subprocess.CompletedProcess:
    return command("backtranslate", f"run_dir={run}", *overrides)


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """25 lines of German text and 10 real English-German pairs, the smoke run's reverse."""
    mono = tmp_path / "mono.de"
    mono.write_text("".join(line + "\n" for line in ["", *MONO]), encoding="utf-8")
    (tmp_path / "real.en").write_text("".join(f"A dog {i}.\n" for i in range(10)))
    (tmp_path / "real.de").write_text("".join(f"Ein Hund {i}.\n" for i in range(10)))
    return {"mono": mono, "parallel": tmp_path / "real"}


@pytest.mark.slow
def test_synthetic_sources_are_the_reverse_runs_beam_output(
    smoke_run: Path, tmp_path: Path, inputs: dict[str, Path]
) -> None:
    out = tmp_path / "bt"
    given = [f"mono={inputs['mono']}", f"parallel={inputs['parallel']}", "beam_size=2"]
    proc = backtranslate(smoke_run, *given, "ratios=[1,2]", "chunk_sentences=8", f"out={out}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sentences"] == 20  # what the largest mixture takes; the blank line dropped
    synthetic, texts = gz_lines(out / "synthetic.en.gz"), gz_lines(out / "synthetic.de.gz")
    assert texts == MONO[:20] and len(synthetic) == 20
    (tmp_path / "ref").write_text("".join(line + "\n" for line in MONO), encoding="utf-8")
    evaluated = subprocess.run(
        [*cli("evaluate"), f"run_dir={smoke_run}", "beam_size=2"]
        + [f"input={tmp_path / 'ref'}", f"reference={tmp_path / 'ref'}", f"out={tmp_path / 'e'}"],
        capture_output=True,
        text=True,
        timeout=TRAIN_TIMEOUT,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    hypotheses = json.loads(evaluated.stdout.strip().splitlines()[-1])["hypotheses"]
    assert synthetic == Path(hypotheses).read_text(encoding="utf-8").split("\n")[:20]
    real_en = [f"A dog {i}." for i in range(10)]
    assert gz_lines(out / "mixed_1.en.gz") == real_en + synthetic[:10]
    assert gz_lines(out / "mixed_2.de.gz") == [f"Ein Hund {i}." for i in range(10)] + MONO[:20]

    tagged = backtranslate(
        smoke_run, *given, "ratios=[1,2]", "chunk_sentences=8", f"out={out}", "tag=@bt@"
    )  # the same chunks: nothing decoded again
    assert tagged.returncode == 0 and "] chunk " not in tagged.stderr, tagged.stderr
    assert gz_lines(out / "synthetic.en.gz") == [f"@bt@ {line}" for line in synthetic]

    too_many = backtranslate(smoke_run, *given, "ratios=[3]", f"out={out}")
    assert too_many.returncode == 1 and "takes 30 synthetic pairs" in too_many.stderr
    assert "Traceback" not in too_many.stderr


@pytest.mark.slow
def test_sampled_back_translation_follows_its_seed(
    smoke_run: Path, tmp_path: Path, inputs: dict[str, Path]
) -> None:
    drawn = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        out = tmp_path / name
        given = [f"mono={inputs['mono']}", "sampling=true", f"seed={seed}", f"out={out}"]
        proc = backtranslate(smoke_run, *given)
        assert proc.returncode == 0, proc.stderr
        drawn[name] = gz_lines(out / "synthetic.en.gz")
    assert len(drawn["a"]) == 25
    assert drawn["a"] == drawn["b"] and drawn["a"] != drawn["c"]


@pytest.mark.slow
def test_each_chunk_draws_with_seeds_of_its_own(smoke_run: Path, tmp_path: Path) -> None:
    """One line in chunks of one: each chunk's draw is another, not the first chunk's again."""
    mono = tmp_path / "same.de"
    mono.write_text("Ein Mann steht auf der Straße.\n" * 6, encoding="utf-8")
    out = tmp_path / "out"
    given = ["sampling=true", "temperature=2.0", "chunk_sentences=1", f"out={out}"]
    proc = backtranslate(smoke_run, f"mono={mono}", *given)
    assert proc.returncode == 0, proc.stderr
    assert len(set(gz_lines(out / "synthetic.en.gz"))) > 1
    settings = out / ".parts" / "settings.json"
    older = json.loads(settings.read_text())
    del older["sampling_seeds"]  # as chunks drawn before each had seeds of its own record it
    settings.write_text(json.dumps(older))
    again = backtranslate(smoke_run, f"mono={mono}", *given)
    assert again.returncode == 1 and "holds chunks of other settings" in again.stderr


def test_backtranslate_needs_text_and_an_out_folder(tmp_path: Path) -> None:
    (tmp_path / "blank").write_text("\n \n", encoding="utf-8")
    for overrides, says in (
        ([f"out={tmp_path / 'x'}"], "give mono=<a file of text"),
        ([f"mono={tmp_path / 'm'}"], "give out=<a folder for the synthetic corpus>"),
        ([f"mono={tmp_path / 'm'}", f"out={tmp_path / 'x'}"], "does not exist"),
        ([f"mono={tmp_path / 'blank'}", f"out={tmp_path / 'x'}"], "holds no sentences"),
    ):
        proc = backtranslate(tmp_path, *overrides)
        assert proc.returncode == 1 and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_the_low_resource_split_keeps_the_monolingual_text_apart(
    tatoeba_dir: Path, tmp_path: Path
) -> None:
    """scripts/tatoeba_lowres.py: the monolingual English is in no parallel, validation or test
    pair, each sentence once, and the German kept apart with it is the German it came with."""
    corpus, out = tatoeba_dir / "deu-eng.zip", tmp_path / "lowres"
    script = [sys.executable, str(REPO / "scripts" / "tatoeba_lowres.py"), str(corpus), str(out)]
    subprocess.run([*script, "--parallel", "300", "--mono", "200"], check=True, timeout=300)
    facts = json.loads((out / "split.json").read_text())
    assert (facts["train"], facts["valid"], facts["test"], facts["mono"]) == (300, 2000, 2000, 200)
    mono, kept = gz_lines(out / "mono.en.gz"), gz_lines(out / "mono_reference.de.gz")
    assert len(set(mono)) == len(kept) == 200
    with zipfile.ZipFile(corpus) as z:
        pairs = {tuple(line.split("\t")[:2]) for line in z.read("deu.txt").decode().splitlines()}
    assert all(pair in pairs for pair in zip(mono, kept, strict=True))
    for split in ("train", "valid", "test"):
        english, german = gz_lines(out / f"{split}.en.gz"), gz_lines(out / f"{split}.de.gz")
        assert not set(mono) & set(english)
        assert all(pair in pairs for pair in zip(english, german, strict=True))
