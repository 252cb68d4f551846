"""Shared fixtures: where the Multi30k mirror is, and whether its absence is a skip or a failure."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (the suite runs `-n logical`, a worker per logical core), each worker
    and every command it starts take their share of the cores unless OMP_NUM_THREADS says
    otherwise: two workers of two threads each on two cores would wait for each other."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        # counted here, not by seq2seq's available_cores: importing it imports torch too early
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        os.environ["OMP_NUM_THREADS"] = str(max(1, (cores or 1) // workers))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with the most slow tests first (each module's own order kept): the workers start
    the long modules early and finish together."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


@pytest.fixture(autouse=True, scope="session")
def hydra_schemas() -> None:
    """The schemas the commands register when they start, for tests that compose configs."""
    from seq2seq.commands.configs import register_schemas

    register_schemas()


def _multi30k_path() -> Path:
    env = os.environ.get("SEQ2SEQ_MULTI30K")
    return Path(env) if env else REPO.parent / "shared" / "data" / "multi30k"


def _shared(path: Path, what: str, setting: str) -> Path:
    """``path`` if it holds a shared data folder; else skipped, or failed under CI=true."""
    if not (path / "SHA256SUMS").is_file():
        reason = f"{what} not found at {path} (set {setting})"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """The local Multi30k mirror; skipped when absent, except under CI=true where it must exist."""
    return _shared(_multi30k_path(), "Multi30k mirror", "SEQ2SEQ_MULTI30K to its folder")


@pytest.fixture(scope="session")
def tatoeba_dir() -> Path:
    """The shared Tatoeba exports (German-English, Chinese-English); skipped when absent, except
    under CI=true where they must exist."""
    env = os.environ.get("SEQ2SEQ_TATOEBA")
    path = Path(env) if env else REPO.parent / "shared" / "data" / "tatoeba"
    return _shared(path, "Tatoeba exports", "SEQ2SEQ_TATOEBA to their folder")


@pytest.fixture(scope="session")
def multi30k_url(multi30k_dir: Path):
    """The mirror served over HTTP on 127.0.0.1, so the real download code runs."""
    import functools
    import http.server
    import threading

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(QuietHandler, directory=str(multi30k_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory, multi30k_url: str) -> Path:
    """A smoke model trained for one epoch, shared by the evaluate and translate tests.

    Its config points at a download folder beside it and at the test server, so evaluating a split
    downloads it like a user's run would.
    """
    import subprocess

    from run_helpers import cli

    base = tmp_path_factory.mktemp("smoke_run")
    run = base / "run"
    cmd = [
        *cli("train"),
        "experiment=smoke",
        "train.max_epochs=1",
        "log.progress=false",
        "device=cpu",  # also where a GPU is: the tests compare it with runs trained there
        f"hydra.run.dir={run}",
        f"data.source={multi30k_url}",
        f"data.root={base / 'multi30k'}",
        f"data.cache_dir={base / 'cache'}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory, multi30k_url: str) -> list[str]:
    """Overrides for a download folder and a cache of the test module: the first training
    downloads and tokenizes, the others reuse."""
    base = tmp_path_factory.mktemp("data")
    return [
        f"data.source={multi30k_url}",
        f"data.root={base / 'multi30k'}",
        f"data.cache_dir={base / 'cache'}",
    ]


@pytest.fixture(scope="session")
def onnx_release(smoke_run: Path, tmp_path_factory) -> Path:
    """The smoke run's release with its ONNX graphs, exported once: the tests only read it."""
    from serve_helpers import export

    return export(smoke_run, tmp_path_factory.mktemp("onnx_release") / "de-en", "onnx=true")


@pytest.fixture(scope="session")
def luong_run(smoke_run: Path, tmp_path_factory) -> Path:
    """A run folder named ``luong`` that differs from the smoke run only in its model: Luong
    attention (general score) and untrained, seeded weights, beside the smoke run's tokenizers.
    Two models that answer differently, for the tests of serving several, without a second
    training."""
    import shutil

    import torch
    from omegaconf import OmegaConf

    from seq2seq.data.tokenizer import Tokenizer
    from seq2seq.model.config import LuongConfig
    from seq2seq.model.seq2seq import build_model
    from seq2seq.runtime.checkpoint import save_checkpoint
    from seq2seq.storage.rundir import BEST, CONFIG_FILE, SRC_TOKENIZER, TGT_TOKENIZER

    run = tmp_path_factory.mktemp("luong_run") / "luong"
    run.mkdir()
    for name in (SRC_TOKENIZER, TGT_TOKENIZER):
        shutil.copy(smoke_run / name, run / name)
    cfg = OmegaConf.load(smoke_run / CONFIG_FILE)
    luong = OmegaConf.structured(LuongConfig(size=cfg.model.attention.size))
    cfg.model.attention = OmegaConf.to_container(luong, enum_to_str=True)
    OmegaConf.save(cfg, run / CONFIG_FILE)
    vocab = [Tokenizer.load(run / name).vocab_size for name in (SRC_TOKENIZER, TGT_TOKENIZER)]
    torch.manual_seed(0)
    model = build_model(cfg.model, *vocab)
    save_checkpoint(run / BEST, {"model": model.state_dict(), "step": 0, "vocab": vocab})
    return run


@pytest.fixture(scope="session", params=["bahdanau", "multihead"])
def peaky_graphs(request, tmp_path_factory):
    """A peaky tiny model (model_helpers.peaky_model) and its graphs for the lite search."""
    from model_helpers import exported_graphs, peaky_model

    model = peaky_model(request.param)
    return model, exported_graphs(model, tmp_path_factory.mktemp("release"))
