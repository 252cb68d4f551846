"""Every command's overrides checked before any work: an unknown key (a ``+`` one too), a key
the chosen attention or corpus reader lacks, a group's unknown option and a wrong type are each
one line naming what was meant."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from run_helpers import cli, command

from seq2seq.commands.arguments import check_arguments
from seq2seq.commands.keys import check_command_line, sweep_jobs
from seq2seq.errors import Seq2SeqError

# each command's config: a key of its schema, a typo of it, and a value the key takes
COMMANDS = {
    "config": ("train.max_steps", "train.max_step", "100"),
    "evaluate": ("beam_size", "beam_sizes", "4"),
    "translate": ("show_alignment", "show_aligment", "true"),
    "align": ("src_file", "src_fiel", "a.en"),
    "score": ("normalize", "normalise", "true"),
    "average": ("select", "selct", "best"),
    "export": ("onnx", "onxx", "true"),
    "distill": ("chunk_sentences", "chunk_sentence", "500"),
    "backtranslate": ("ratios", "ratio", "[1,2]"),
    "serve": ("port", "prot", "8080"),
}


def refusal(config: str, *overrides: str, check=check_command_line) -> str:
    with pytest.raises(Seq2SeqError) as error:
        check(config, list(overrides))
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("config", COMMANDS)
def test_each_command_names_the_key_a_typo_meant(config: str) -> None:
    key, typo, value = COMMANDS[config]
    check_command_line(config, [f"{key}={value}"])  # the key itself passes
    for prefix in ("", "+", "++"):  # adding a key the schema lacks is refused all the same
        message = refusal(config, f"{prefix}{typo}={value}")
        assert message == f"{typo}: no such key; did you mean {key}?"


def test_a_key_of_another_attention_or_reader_says_which_has_it() -> None:
    assert refusal("config", "+model.attention.heads=8") == (
        "model.attention.heads: no such key with model/attention=luong; "
        "heads is a key of model/attention=multihead"
    )
    check_command_line("config", ["model/attention=multihead", "model.attention.heads=8"])
    assert refusal("config", "data.columns=[en,de]") == (
        "data.columns: no such key with data=multi30k; columns is a key of data=tsv"
    )
    check_command_line("config", ["data=tsv", "data.file=x.tsv", "data.columns=[en,de]"])
    # a sweep: every job must have the key
    message = refusal(
        "config", "-m", "model/attention=multihead,bahdanau", "model.attention.heads=8"
    )
    assert message.startswith("model.attention.heads: no such key with model/attention=bahdanau")


def test_a_group_given_as_a_key_and_an_unknown_option() -> None:
    assert refusal("config", "model.attention=luong") == (
        "model.attention=luong: model.attention is a group, chosen with model/attention=luong"
    )
    message = refusal("config", "model/attention=luongg")
    assert message.startswith("model/attention=luongg: no such option; did you mean luong? (")
    assert refusal("config", "experiment=smok").startswith("experiment=smok: no such option; did")
    assert refusal("config", "+compare=luongx").startswith("compare=luongx: no such option; did")


def test_a_comparison_row_or_a_normalizer_given_as_an_attention_says_how_to_choose_it() -> None:
    """The docs' tables name rows (luong_concat) and normalizers (sparsemax) beside attentions."""
    message = refusal("config", "model/attention=luong_concat")
    assert message.endswith(
        "; luong_concat is a row of the attention comparison: "
        "+compare=luong_concat experiment=attention_comparison"
    )
    assert refusal("config", "model/attention=sparsemax").endswith(
        "+compare=sparsemax experiment=attention_comparison, and a normalizer of every "
        "attention: model.attention.normalizer=sparsemax"
    )
    assert "is a row" not in refusal("config", "model/attention=luongg")
    assert "is a row" not in refusal("config", "experiment=luong_concat")


def test_two_options_that_do_not_fit_are_one_line() -> None:
    """A recipe of one data kind with another kind chosen: not Hydra's five-line error."""
    assert refusal("config", "experiment=tatoeba_de_en_cpu", "data=custom") == (
        "experiment=tatoeba_de_en_cpu sets data.file, a key data=custom does not have"
    )


@pytest.mark.parametrize(
    ("config", "override", "expected"),
    [
        ("config", "train.max_steps=abc", "an integer or null"),
        ("config", "train.lr=fast", "a number"),
        ("config", "log.progress=maybe", "true or false"),
        ("config", "precision=fp64", "one of auto, fp32, bf16, fp16, int8"),
        ("serve", "port=http", "an integer"),
        ("serve", "backend=onnxx", "one of torch, onnx"),
        ("config", "-m train.max_epochs=1,x", "an integer"),
    ],
)
def test_a_wrong_type_says_what_is_expected(config: str, override: str, expected: str) -> None:
    *flags, given = override.split()
    key, value = given.split("=")
    value = value.split(",")[-1]
    assert refusal(config, *flags, given) == f"{key}={value}: expected {expected}"


def test_what_is_left_to_hydra_passes() -> None:
    for overrides in (
        ["hydra.run.dir=/tmp/x", "hydra.job.chdir=true"],
        ["--help", "train.lr=1"],  # help with a typo is refused (Hydra ended in a traceback)
        ["-m", "experiment=attention_comparison"],
        ["+compare=luong", "versions.torch=2.13", "~log.progress"],
        ["-m", "train.lr=1e-3,3e-4", "train.seed=range(1,3)"],
        ["precision=fp16", "model/attention=luong", "model.attention.score=dot"],
        ["experiment=multi30k_de_en_cpu", "data.source=/data/multi30k"],
    ):
        check_command_line("config", overrides)


def test_a_run_folder_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    """Hydra would make the folder and end in FileExistsError's traceback."""
    (tmp_path / "afile").write_text("hi\n")
    for key in ("hydra.run.dir", "hydra.sweep.dir"):
        for value in (tmp_path / "afile", tmp_path / "afile" / "sub"):
            with pytest.raises(Seq2SeqError, match="afile is a file, not a folder$"):
                check_command_line("config", [f"{key}={value}"])
    check_command_line("config", [f"hydra.run.dir={tmp_path / 'new' / 'run'}"])


def test_a_typo_stops_a_command_before_any_work(tmp_path: Path) -> None:
    """End to end: one line on stderr, exit 1, no traceback; a run folder that does not exist is
    not even looked at, and training creates no folder."""
    commands = [
        ("evaluate", [f"run_dir={tmp_path / 'nothing'}", "+beam_sizes=5"], "beam_size"),
        ("train", [f"hydra.run.dir={tmp_path / 'run'}", "train.max_step=100"], "train.max_steps"),
    ]
    for module, overrides, meant in commands:
        proc = subprocess.run(
            [*cli(module), *overrides],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1 and proc.stdout == "", proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"seq2seq-{module}: {overrides[1].lstrip('+').split('=')[0]}: no such key; "
            f"did you mean {meant}?"
        ]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("config", COMMANDS)
def test_every_command_checks_before_it_starts(config: str, tmp_path: Path) -> None:
    """Each of the ten commands, started as a user starts it, with a + typo: one line naming
    the key meant, exit 1, and the run folder it names never read."""
    key, typo, value = COMMANDS[config]
    module = "train" if config == "config" else config
    folder = f"hydra.run.dir={tmp_path / 'run'}" if config == "config" else "run_dir=nowhere"
    proc = subprocess.run(
        [*cli(module), folder, f"+{typo}={value}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    expected = f"seq2seq-{module}: {typo}: no such key; did you mean {key}?"
    assert proc.stderr.splitlines() == [expected]
    assert not any(tmp_path.iterdir())  # nothing written, not even Hydra's folders


def test_every_job_of_a_sweep_is_checked_before_the_first_starts() -> None:
    """A value out of range in one job of ``-m`` stopped the sweep when that job came (after
    the jobs before it had trained), or never ran the jobs after it."""
    argv = ["-m", "experiment=smoke", "train.lr=1e-3,-1", "train.seed=range(1,3)"]
    jobs = [job for job, _ in sweep_jobs("config", argv)]
    assert jobs == [f"train.lr={lr} train.seed={s}" for lr in ("0.001", "-1") for s in (1, 2)]
    assert list(sweep_jobs("config", argv[1:])) == []  # no -m: one run, checked as it starts
    mine = ["-m", "experiment=attention_comparison", "train.lr=1e-3,3e-4"]
    assert list(sweep_jobs("config", mine)) == []  # the experiment's own sweep: Hydra's jobs
    proc = command("train", *argv, "hydra.sweep.dir=/nonexistent/never")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    said = "seq2seq-train: the sweep's job train.lr=-1 train.seed=1: train.lr=-1.0 must be positive"
    assert proc.stderr.strip() == said


def test_a_sweep_with_one_runs_folder_is_refused(tmp_path) -> None:
    """hydra.run.dir under -m was silently unused: the runs went to runs/multirun_.../."""
    argv = ["-m", "experiment=smoke", "train.seed=1,2", "train.lr=-1"]  # -1: never trains
    proc = command("train", *argv, f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 1 and proc.stdout == ""
    said = "hydra.run.dir names one run's folder, which a sweep (-m) does not use: its runs go"
    assert proc.stderr.startswith(f"seq2seq-train: {said}") and len(proc.stderr.splitlines()) == 1


STDIN = "it reads standard input and writes standard output: seq2seq-translate run_dir=..."


@pytest.mark.parametrize(
    ("config", "words", "said"),
    [
        ("translate", "--beam 3", "--beam 3: settings are key=value; did you mean beam_size=3?"),
        ("translate", "--beam=3", "--beam=3: settings are key=value; did you mean beam_size=3?"),
        ("config", "-m --epochs 3", "--epochs 3: settings are key=value; did you mean train."),
        ("config", "--beam 3", "--beam 3: settings are key=value; validation searches with"),
        ("config", "--nbest 3", "--nbest 3: settings are key=value; validation searches with"),
        ("translate", "-src in.txt", f"-src in.txt: settings are key=value; {STDIN}"),
        ("evaluate", "--gpu", "--gpu: settings are key=value (--help lists them)"),
        ("translate", "run_dir runs/x", "run_dir runs/x: give it as run_dir=runs/x"),
        ("evaluate", "beam_size=2 run_dir", "run_dir: give it a value, run_dir=..."),
        ("config", "hello", "hello: settings are key=value (--help lists them)"),
        ("translate", "terms=a(b).tsv", "terms=a(b).tsv: Hydra cannot read it (mismatched "),
        ("config", "data.columns=[en,de", "data.columns=[en,de: the list's brackets do not pair"),
    ],
)
def test_a_command_line_of_another_tools_shape_says_the_override_meant(
    config: str, words: str, said: str
) -> None:
    """Flags of OpenNMT-py or fairseq, a key and its value apart, a value Hydra's grammar
    cannot read: one line, not argparse's usage or Hydra's parser error."""
    assert refusal(config, *words.split(), check=check_arguments).startswith(said)


def test_a_folder_alone_or_a_quoted_value_and_hydras_own_flags(tmp_path: Path) -> None:
    assert refusal("translate", str(tmp_path), check=check_arguments) == (
        f"{tmp_path}: give the folder as run_dir={tmp_path}"
    )
    quoted = "terms=a(b).tsv: Hydra cannot read it (mismatched input '.' expecting <EOF>); "
    assert refusal("translate", "terms=a(b).tsv", check=check_arguments) == (
        quoted + """quote the value: 'terms="a(b).tsv"'"""
    )
    assert refusal("translate", "input=x.de").startswith(f"input: no such key; {STDIN}")
    for argv in (
        ["--cfg", "job", "-p", "train", "train.lr=1e-3"],
        ["--help", "--beam", "3"],
        ["-m", "train.lr=1e-3,3e-4", "~log.progress", "hydra.run.dir=x"],
        ['data.source="https://example.org/m30k?x=1&y=2"', "-c", "job"],
    ):
        check_arguments("config", argv)


def test_a_folder_given_alone_stops_before_any_work(tmp_path: Path) -> None:
    """End to end: the one line on stderr, exit 1, no traceback."""
    proc = command("translate", str(tmp_path))
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    said = f"seq2seq-translate: {tmp_path}: give the folder as run_dir={tmp_path}"
    assert proc.stderr.splitlines() == [said]
