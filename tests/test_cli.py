"""What a new user meets first: the README's quick start, which ends by itself, and each
command's own help."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import REPO, cli, command, run


def quick_start_overrides() -> list[str]:
    """The overrides of the README's quick-start training command (its first bash block)."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Quick start\n.*?```bash\n(.*?)```", readme, re.S)
    assert block, "the README has no quick start"
    [command] = [line for line in block.group(1).splitlines() if "seq2seq-train" in line]
    return command.split("seq2seq-train", 1)[1].split()


def test_the_quick_start_trains_a_recipe_that_ends_by_itself() -> None:
    """On a machine without a GPU the README's first command must end in the time it states:
    a recipe with a time limit, not the reference model's 50 epochs."""
    overrides = quick_start_overrides()
    assert overrides == ["experiment=multi30k_de_en_cpu"]
    recipe = (REPO / "configs/experiment/multi30k_de_en_cpu.yaml").read_text()
    assert re.search(r"^  max_minutes: 30$", recipe, re.M)
    assert "about 31 minutes, 30 of them training" in (REPO / "README.md").read_text()


@pytest.mark.slow
def test_the_quick_start_shortened_runs_to_a_clean_end(tmp_path: Path, data_dirs) -> None:
    shortened = [
        "train.max_steps=2",
        "data.train_limit=600",
        "data.valid_limit=20",
        "data.tokenizer.vocab_size=300",
        "log.progress=false",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    out = run("train", *quick_start_overrides(), *data_dirs, *shortened)
    assert "finished after 2 updates" in out and "Traceback" not in out
    assert (tmp_path / "run" / "best.pt").is_file() and (tmp_path / "run" / "last.pt").is_file()


@pytest.mark.slow
def test_a_folder_named_seq2seq_where_it_runs_hides_nothing(tmp_path: Path, data_dirs) -> None:
    """Run from the folder above a clone (``seq2seq/``, with the downloads' ``data/`` in it),
    the tokenizers' worker processes still import the installed package, not that folder."""
    (tmp_path / "seq2seq" / "data").mkdir(parents=True)
    data = [d for d in data_dirs if not d.startswith("data.cache_dir=")]  # tokenizers trained
    args = ["experiment=smoke", "log.progress=false", "train.max_steps=1", *data]
    args.append(f"data.cache_dir={tmp_path / 'cache'}")
    proc = subprocess.run(
        [*cli("train"), *args, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_the_quick_start_installs_the_lite_distribution_seq2seq_needs() -> None:
    """seq2seq depends on seq2seq-lite (its search rules), which is on no index: the quick start
    installs ./lite in the same pip call."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Quick start\n.*?```bash\n(.*?)```", readme, re.S)
    assert block, "the README has no quick start"
    [install] = [line for line in block.group(1).splitlines() if line.startswith("pip install")]
    assert " -e . -e ./lite " in install
    assert '"seq2seq-lite",' in (REPO / "pyproject.toml").read_text()


def test_ci_installs_and_tests_as_the_readme_says() -> None:
    """.ci/run proves the README's test command in a new venv: the same pip install (./lite
    included, which the onnx server's tests start) and pytest."""
    readme = (REPO / "README.md").read_text()
    [line] = [x for x in readme.splitlines() if x.startswith("pip install") and "[dev]" in x]
    install, test = line.split(" && ")
    assert install.endswith(" -e ./lite") and test == "pytest"
    ci = (REPO / ".ci/run").read_text()
    assert "python3 -m venv" in ci
    assert f"pip install --quiet {install.removeprefix('pip install ')}\n" in ci
    assert "python -m pytest -q\n" in ci


def test_train_help_is_its_own() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "seq2seq.commands.train", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("seq2seq-train: train a BiGRU encoder")
    assert "experiment=multi30k_de_en_cpu" in proc.stdout and "data.source=" in proc.stdout
    assert "model/attention: bahdanau, local_m, local_p, luong, multihead" in proc.stdout
    assert "Powered by Hydra" not in proc.stdout  # Hydra's generic text


def test_help_with_a_typo_and_help_read_by_head_are_no_tracebacks() -> None:
    """``train.lrr=1 --help`` ended in Hydra's traceback; so did ``--help | head -1``."""
    train = [sys.executable, "-m", "seq2seq.commands.train"]
    proc = subprocess.run([*train, "train.lrr=1", "--help"], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "seq2seq-train: train.lrr: no such key; did you mean train.lr?"
    read, write = os.pipe()
    os.close(read)  # a reader that has gone, as head's after its line
    proc = subprocess.run([*train, "--help"], stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_hydra_help_with_the_tasks_overrides_shows_hydras_settings(tmp_path: Path) -> None:
    """``--hydra-help experiment=smoke`` ended in Hydra's traceback (no 'experiment' among its
    own groups): the task's overrides are left out of Hydra's own help."""
    train = [sys.executable, "-m", "seq2seq.commands.train", "--hydra-help"]
    proc = subprocess.run(
        [*train, "experiment=smoke", "hydra.job.chdir=false"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.startswith("Hydra (") and "== Flags ==" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # no run folder


@pytest.mark.slow
def test_process_settings_are_debug_lines(smoke_run: Path) -> None:
    """The allocator and oneDNN's kernel cache are the process's settings, not choices a user
    makes: shown with hydra.verbose, not on every command's first lines."""

    def said(*overrides: str) -> str:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "seq2seq.commands.translate",
                f"run_dir={smoke_run}",
                *overrides,
            ],
            input="Ein Hund.\n",
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    quiet = said()
    assert "loaded " in quiet and "memory:" not in quiet and "oneDNN:" not in quiet
    for flag in ("hydra.verbose=seq2seq.runtime", "-v"):
        verbose = said(flag)
        assert "[DEBUG] memory: " in verbose and "[DEBUG] oneDNN: " in verbose, flag


def test_the_final_answer_to_a_reader_that_left_ends_quietly() -> None:
    """``seq2seq-align ... | head -1``: the final JSON line finds the pipe closed."""
    code = "from seq2seq.commands.wrapper import _say; _say({'pairs': 300})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader leaves before the answer
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1 and err == "", err


@pytest.mark.parametrize("given", ['"~/runs/r"', "~/runs/r"])
def test_a_run_folder_under_home_is_the_homes_not_a_folder_named_tilde(given, tmp_path) -> None:
    """``hydra.run.dir="~/runs/r"`` (quoted, as Hydra's grammar needs) is the home's folder."""
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = command("train", "--cfg", "hydra", f"hydra.run.dir={given}", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"dir: {tmp_path / 'runs' / 'r'}\n" in proc.stdout, proc.stdout


def test_a_sweeps_warning_is_said_once_per_job(tmp_path: Path) -> None:
    """The jobs' up-front check keeps quiet; each job warns as it starts (the first job stops
    here on its missing corpus, and the sweep with it)."""
    proc = command(
        "train",
        "-m",
        "experiment=smoke",
        "model/attention=luong",
        "model.attention.score=dot",
        "train.seed=1,2",
        f"data.source={tmp_path / 'none'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert proc.returncode == 1 and proc.stderr.count("which makes it the general score") == 1


def test_a_quoted_home_folder_is_expanded(tmp_path: Path) -> None:
    """``run_dir="~/..."`` (quoted, as the message on ``~`` advises) names the home's folder."""
    (tmp_path / "runs").mkdir()
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = command("average", 'run_dir="~/runs"', env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{tmp_path / 'runs'} is not a training run" in proc.stderr, proc.stderr


def test_a_ctrl_c_while_the_command_imports_is_one_line(monkeypatch, capsys) -> None:
    """Ctrl-C in a command's first two seconds (torch importing, before the command's own
    handling) printed the import's traceback: it is one line and exit status 130."""
    from seq2seq.commands import cli as entry

    def interrupted(name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "import_module", interrupted)
    try:
        entry.train()
    except KeyboardInterrupt:  # what the user saw: its traceback
        pytest.fail("the interrupt came through as a traceback")
    except SystemExit as stop:
        assert stop.code == 130
    else:
        pytest.fail("the command went on")
    assert capsys.readouterr().err == "seq2seq-train: interrupted\n"


def test_a_ctrl_c_before_the_commands_handling_waits_for_it(monkeypatch, capsys) -> None:
    """Raised inside torch's import or Hydra's composing, a KeyboardInterrupt can meet C++ code
    that aborts the process (exit status -6) or leave Hydra's config half made: the entry point
    holds a Ctrl-C until the command's handling begins (the wrapper's release), then stops in
    one line, 130; SIGINT is Python's own again."""
    import os
    import signal

    from seq2seq.commands import cli as entry

    steps: list[str] = []

    def command() -> None:
        steps.append("composed")  # not reached where the interrupt is raised at once
        entry.release_ctrl_c()  # the wrapper's first step
        steps.append("ran")

    def importing(name: str) -> object:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C halfway through
        steps.append("imported")
        return type("Command", (), {"main": staticmethod(command)})

    monkeypatch.setattr(entry, "import_module", importing)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts it
    try:
        with pytest.raises(SystemExit) as stop:
            entry.train()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert stop.value.code == 130 and steps == ["imported", "composed"]
    assert capsys.readouterr().err == "seq2seq-train: interrupted\n"
