"""The house rules that keep the code readable: the model does not know the app, the library's
folders import downward only, one list of attention variants, no file, function or class past
its size limit, and tests that share helpers through helper modules, not through each other."""

from __future__ import annotations

import ast
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from seq2seq.data.stream import worker_context
from seq2seq.model import build_model
from seq2seq.model.attention import Attention
from seq2seq.model.registry import ATTENTIONS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seq2seq"
MAX_FILE, MAX_FUNCTION, MAX_CLASS = 400, 60, 200  # lines
HEAVY = ("matplotlib", "torch.utils.tensorboard", "tensorboard")


def test_the_model_imports_neither_the_app_config_nor_hydra() -> None:
    code = (
        "import sys, seq2seq.model.registry, seq2seq.model.seq2seq, seq2seq.model.ensemble;"
        "print(sorted(m for m in sys.modules if m in ('seq2seq.config', 'hydra')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_commands_load_drawing_and_tensorboard_only_when_they_write() -> None:
    """matplotlib and TensorBoard take about a second to import: a command that stops on a wrong
    setting or bad input answers without them."""
    commands = ", ".join(
        f"seq2seq.commands.{c}" for c in ("train", "evaluate", "translate", "serve")
    )
    code = f"import sys, {commands}; print(sorted(m for m in sys.modules if m in {HEAVY}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_importing_the_library_registers_nothing_with_hydra() -> None:
    """The schemas and the resolver are registered by a command when it starts."""
    commands = ", ".join(f"seq2seq.commands.{c}" for c in ("train", "evaluate", "serve", "export"))
    code = (
        f"import {commands}; from hydra.core.config_store import ConfigStore;"
        "from omegaconf import OmegaConf; from seq2seq.commands.configs import register_schemas;"
        "ours = {'base_config.yaml', 'evaluate_config.yaml'};"
        "names = lambda: sorted(ours & set(ConfigStore.instance().list('')));"
        "print(names(), OmegaConf.has_resolver('path_safe')); register_schemas();"
        "print(names(), OmegaConf.has_resolver('path_safe'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    registered = "['base_config.yaml', 'evaluate_config.yaml'] True"
    assert out.stdout.split("\n")[:2] == ["[] False", registered]


# The library's folders, lowest first: each imports only from its own folder, the folders before
# it, and the shared modules; none imports seq2seq.commands, the room of the ten commands, their
# configs and their one wrapper, which sits on top.
LAYERS = ["storage", "model", "data", "runtime", "decoding", "training", "serving"]
SHARED = {"config", "config_choices", "errors", "languages", "vocab"}
COMMANDS = {
    "align",
    "average",
    "backtranslate",
    "distill",
    "evaluate",
    "export",
    "score",
    "serve",
    "train",
    "translate",
}


def _imported(path: Path, root: Path) -> set[str]:
    """Every module a file imports, dotted and absolute: relative imports resolved against the
    file's package under ``root``, and each name of ``from package import name`` counted as a
    module too (it may be one), wherever the import sits (top level, a function, a TYPE_CHECKING
    block)."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _imports(path: Path) -> set[str]:
    """The `seq2seq.*` modules that a file imports, as dotted names without the `seq2seq.`."""
    names = _imported(path, ROOT)
    return {n.removeprefix("seq2seq.") for n in names if n.startswith("seq2seq.")}


def test_imports_are_found_however_they_are_written(tmp_path: Path) -> None:
    module = tmp_path / "seq2seq" / "data" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        "from ..commands import configs\nfrom . import batching\nfrom seq2seq import training\n"
        "def f():\n    import seq2seq.serving.api\n",
        encoding="utf-8",
    )
    found = {n for n in _imported(module, tmp_path) if n.startswith("seq2seq.")}
    assert {"seq2seq.commands.configs", "seq2seq.data.batching"} <= found
    assert {"seq2seq.training", "seq2seq.serving.api"} <= found


def test_the_library_folders_import_downward_only_and_never_a_command() -> None:
    wrong = []
    for rank, layer in enumerate(LAYERS):
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for name in _imports(path):
                top = name.split(".")[0]
                allowed = top in SHARED or (top in LAYERS and LAYERS.index(top) <= rank)
                if not allowed:
                    wrong.append(f"{path.relative_to(ROOT)} imports seq2seq.{name}")
    assert not wrong, wrong


def test_the_shared_modules_import_each_other_and_the_models_schema_only() -> None:
    """Every layer may import the shared modules, so they import no layer: only one another and
    the model's own schema, which the app's typed config nests."""
    wrong = [
        f"seq2seq/{name}.py imports seq2seq.{imported}"
        for name in sorted(SHARED)
        for imported in _imports(PACKAGE / f"{name}.py")
        if imported.split(".")[0] not in SHARED and not imported.startswith("model.config")
    ]
    assert not wrong, wrong


def test_only_the_commands_make_an_engine() -> None:
    """An engine sets process-wide state (threads, the device, the seed, oneDNN's cache): the
    commands make one and hand it down; the library's layers take it as given."""
    calls = ("Engine.create(", "inference_engine(")
    wrong = [
        f"{path.relative_to(ROOT)} makes an engine"
        for layer in LAYERS
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        if path.name != "engine.py" and any(call in _code(path) for call in calls)
    ]
    assert not wrong, wrong


def test_the_data_workers_start_method_changes_nothing_process_wide(monkeypatch) -> None:
    """What the workers' server preloads is the command's setting (the wrapper's), not a side
    effect of the library asking for the start method."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver here (Windows): spawn has nothing to preload")
    settings = []
    context = type(multiprocessing.get_context("forkserver"))
    monkeypatch.setattr(context, "set_forkserver_preload", lambda _, names: settings.append(names))
    assert worker_context() is multiprocessing.get_context("forkserver")
    assert settings == []


def _code(path: Path) -> str:
    """A module's source without its comments and docstrings."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            body[0] = ast.Pass()  # a docstring (or a bare constant)
    return ast.unparse(tree)


def test_lite_imports_nothing_of_seq2seq() -> None:
    """seq2seq builds on lite (its rules), never the reverse: lite installs without torch."""
    lite = ROOT / "lite"
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((lite / "seq2seq_lite").rglob("*.py"))
        for name in _imported(path, lite)
        if name == "seq2seq" or name.startswith(("seq2seq.", "torch"))
    ]
    assert not wrong, wrong


def test_the_package_top_holds_the_shared_modules_and_the_rooms_only() -> None:
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    rooms = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert loose == SHARED
    assert rooms == {*LAYERS, "commands"}


def test_each_command_is_a_module_of_the_commands_room_run_by_the_one_wrapper() -> None:
    """Every command's main is ``hydra_command(...)(task)``; only the wrapper ends a process, and
    the entry points (cli.py) where a Ctrl-C comes before the command's wrapper is imported."""
    room = PACKAGE / "commands"
    for name in COMMANDS:
        tree = ast.parse((room / f"{name}.py").read_text(encoding="utf-8"))
        mains = [
            ast.unparse(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["main"]
        ]
        assert len(mains) == 1 and mains[0].startswith("hydra_command("), (name, mains)
    exits = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).as_posix() not in ("commands/wrapper.py", "commands/cli.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "exit")
    ]
    assert not exits, exits


def _subclasses(cls: type) -> set[type]:
    return {sub for child in cls.__subclasses__() for sub in {child, *_subclasses(child)}}


def test_every_attention_class_is_chosen_through_the_registry() -> None:
    """No attention class outside the registry, and each name of Hydra's model/attention group
    builds its own class and data flow: a new variant cannot enter as a special case."""
    assert _subclasses(Attention) == {kind.attention for kind in ATTENTIONS.values()}
    with initialize_config_module("seq2seq.configs", version_base=None):
        for name, kind in ATTENTIONS.items():
            cfg = compose("config", [f"model/attention={name}"])
            model = build_model(cfg.model, 20, 20)
            assert type(model.decoder.attention) is kind.attention, name
            assert type(model.decoder.flow) is kind.step, name


def test_the_attention_comparison_covers_every_variant_of_the_registry() -> None:
    rows = sorted(path.stem for path in (ROOT / "configs" / "compare").glob("*.yaml"))
    sweep = OmegaConf.load(ROOT / "configs" / "experiment" / "attention_comparison.yaml")
    assert sorted(sweep.hydra.sweeper.params["+compare"].split(",")) == rows
    with initialize_config_module("seq2seq.configs", version_base=None):
        chosen = {compose("config", [f"+compare={row}"]).model.attention.name for row in rows}
    assert chosen == set(ATTENTIONS)


def test_no_file_function_or_class_over_the_house_limits() -> None:
    """A module is read in one sitting, a function or a class on a screen or two: no file in
    seq2seq/, lite/, scripts/ or tests/ over 400 lines, no function (method, nested function)
    over 60, no class over 200."""
    roots = (PACKAGE, ROOT / "lite" / "seq2seq_lite", ROOT / "scripts", ROOT / "tests")
    files = [path for root in roots for path in sorted(root.rglob("*.py"))]
    assert all(any(root in p.parents for p in files) for root in roots), "a folder has no Python"
    over = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        if (lines := len(text.splitlines())) > MAX_FILE:
            over.append(f"{name}: file of {lines} lines (at most {MAX_FILE})")
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kind, limit = "function", MAX_FUNCTION
            elif isinstance(node, ast.ClassDef):
                kind, limit = "class", MAX_CLASS
            else:
                continue
            if (lines := node.end_lineno - node.lineno + 1) > limit:
                over.append(
                    f"{name}:{node.lineno}: {kind} {node.name} of {lines} lines (at most {limit})"
                )
    assert not over, "over the house limits:\n" + "\n".join(over)


def test_no_test_module_imports_another() -> None:
    """What tests share lives in conftest.py or a helpers module: importing a test module from
    another runs its module-level set-up twice and ties unrelated tests together."""
    tests = Path(__file__).resolve().parent
    wrong = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            names = [n.removeprefix("tests.") for n in names]
            wrong += [f"{path.name} imports {n}" for n in names if n.startswith("test_")]
    assert not wrong, wrong
