"""What a run folder holds: every file name in one place, and the lock of its one writer."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from seq2seq_lite import release

from seq2seq.errors import Seq2SeqError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the lock file is created exclusively instead
    fcntl = None

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"  # the resolved training config
SRC_TOKENIZER = "src.model"  # sentencepiece models
TGT_TOKENIZER = "tgt.model"
MANIFEST = release.MANIFEST  # sizes and SHA-256 of the tokenizer models and config
BEST = "best.pt"  # the checkpoint of the best validation score (train.best_metric: BLEU)
LAST = "last.pt"  # the latest checkpoint, to resume from
LOCK = "train.lock"  # held by the training that writes the folder
OVERRIDES = "overrides.yaml"  # the command line of the run's last accepted start: a resume's base
# what a training start writes before any work: Hydra's record, the log, the lock and, once it
# holds the lock, its config.yaml (`unused_run_folder`)
START_FILES = frozenset({".hydra", "train.log", LOCK, CONFIG_FILE})
KEPT_DIR = "checkpoints"  # validation checkpoints kept for averaging (weights only)
KEPT_INDEX = "index.json"  # {step: validation score (train.best_metric)} of those
AVERAGED = "averaged.pt"  # what seq2seq-average writes
TENSORBOARD_DIR = "tensorboard"  # event files
RELEASE_WEIGHTS = "model.safetensors"  # a release folder's weights (seq2seq-export)
RELEASE_FACTS = "release.json"  # the model card's facts, for programs
MODEL_CARD = "README.md"
GRAPHS_DIR = str(release.GRAPHS.parent)  # a release's ONNX graphs (seq2seq-export onnx=true)
GRAPHS_FACTS = release.GRAPHS.name  # in GRAPHS_DIR: the graphs' inputs and outputs, read by lite
EVAL_DIR = "eval"  # seq2seq-evaluate's outputs
SPLITS_DIR = "splits"  # validation and test text of corpora without files per split
CHECKPOINTS = {"best": BEST, "last": LAST, "averaged": AVERAGED}
RELEASE_MARKERS = (RELEASE_WEIGHTS, RELEASE_FACTS, str(release.GRAPHS))  # seq2seq-export's
# what a training start writes over: the user's own files of these names are refused instead
OVERWRITTEN = (CONFIG_FILE, SRC_TOKENIZER, TGT_TOKENIZER, MANIFEST)


def own_file(run_dir: Path, path: Path) -> str | None:
    """Which of the files that make ``run_dir`` a run or a release ``path`` is, or lies in (its
    config, tokenizers, manifest, checkpoints, release files, lock, log, record of overrides,
    kept checkpoints, events): no command's output may take their place. None: none."""
    folder, path = Path(run_dir).resolve(), Path(path).resolve()
    if folder not in path.parents:
        return None
    top = path.relative_to(folder).parts[0]
    own = {*OVERWRITTEN, *CHECKPOINTS.values(), *RELEASE_MARKERS, MODEL_CARD, LOCK, OVERRIDES}
    own |= {"train.log", ".hydra", KEPT_DIR, TENSORBOARD_DIR, GRAPHS_DIR}
    return top if top in own else None


def checkpoint_path(run_dir: Path, checkpoint: str) -> Path:
    """``best``, ``last`` and ``averaged`` name the run's own checkpoints; anything else is a
    path."""
    if checkpoint in CHECKPOINTS:
        return Path(run_dir) / CHECKPOINTS[checkpoint]
    return Path(checkpoint)


def overrides_file(run_dir: Path) -> Path | None:
    """The run's command line (a YAML list of overrides): its last accepted start's, else, for
    runs of before that record, Hydra's (which refused starts rewrite too); None: neither."""
    folder = Path(run_dir)
    return next(
        (p for p in (folder / OVERRIDES, folder / ".hydra" / OVERRIDES) if p.is_file()), None
    )


def split_file(run_dir: Path, split: str, lang: str) -> Path:
    """Where a run keeps one side of its validation or test split (``splits/test.de``)."""
    return Path(run_dir) / SPLITS_DIR / f"{split}.{lang}"


def kept_checkpoint(run_dir: Path, step: int) -> Path:
    """Where the weights validated at ``step`` are kept (``train.keep_checkpoints``)."""
    return Path(run_dir) / KEPT_DIR / f"step-{step}.pt"


def not_a_run(folder: Path, given: str) -> str:
    """Why ``folder`` (``given`` as the user gave it, e.g. ``run_dir=runs``) is no run or release
    folder, and the newest run inside it where it holds runs (``runs/`` for ``runs/<time>``)."""
    message = f"{given} is not a training run or release folder"
    if not folder.exists():
        return f"{message}: it does not exist"
    message += f" (no {CONFIG_FILE})"
    found = [*folder.glob(f"*/{CONFIG_FILE}"), *folder.glob(f"*/*/{CONFIG_FILE}")]
    # not Hydra's copy in a run's .hydra/, nor other hidden folders
    inside = [p for p in found if not any(f.startswith(".") for f in p.relative_to(folder).parts)]
    if inside:
        newest = max(inside, key=lambda p: p.stat().st_mtime).parent
        message += f"; it holds {len(inside)} run(s), the newest {newest}: give that folder"
    return message


def unused_run_folder(folder: Path) -> bool:
    """Whether ``folder`` holds nothing a training did: only START_FILES, and config.yaml only
    beside the lock (a start that claimed the folder wrote it; without the lock it may be a
    config.yaml the user put there); never while another process holds the lock."""
    if not folder.is_dir() or RunLock(folder).held_elsewhere():
        return False
    names = {p.name for p in folder.iterdir()}
    return not names - START_FILES and (CONFIG_FILE not in names or LOCK in names)


def start_refusal(folder: Path, resuming: bool) -> str | None:
    """Why a training may not start in ``folder`` (None: it may): a new start, or a resume
    without last.pt (which starts afresh), would overwrite a checkpoint, a release, or a
    config.yaml or tokenizer model that no training wrote there (a folder without ``LOCK``)."""
    folder = Path(folder)
    if not folder.is_dir():
        return None  # made anew; a resume of it starts afresh (preemptible jobs)
    if (folder / LAST).is_file():
        if resuming:
            return None
        return (
            f"{folder} already holds a checkpoint ({LAST}): add train.resume=true to continue "
            "it, or choose another folder with hydra.run.dir=..."
        )
    start = f"it has no {LAST} to resume from, and" if resuming else "and"
    elsewhere = "choose another folder with hydra.run.dir=..."
    if markers := [name for name in RELEASE_MARKERS if (folder / name).exists()]:
        return (
            f"{folder} is a release folder ({', '.join(markers)}), {start} a training would "
            f"overwrite it: {elsewhere}"
        )
    kept = sorted(str(p.relative_to(folder)) for p in (folder / KEPT_DIR).glob("*.pt"))
    if kept := [name for name in (BEST, AVERAGED) if (folder / name).is_file()] + kept[:2]:
        return (
            f"{folder} holds checkpoints ({', '.join(kept)}), {start} a new start would "
            f"overwrite them: {elsewhere} (train.init_from={folder} starts from its weights)"
        )
    theirs = [name for name in OVERWRITTEN if (folder / name).is_file()]
    if theirs and not (folder / LOCK).exists():  # no training claimed the folder: they are yours
        return (
            f"{folder} holds {', '.join(theirs)} that no training wrote, {start} a training would "
            f"overwrite {'them' if len(theirs) > 1 else 'it'}: {elsewhere}"
        )
    return None


class RunLock:
    """One training at a time per run folder: an advisory lock on ``train.lock``, which holds the
    holder's host and PID. The operating system drops the lock when its process ends, however it
    ends, so a lock left by a killed process is simply taken over."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or refuse with one line naming the process that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            fd = self._create_exclusively()
        else:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise self._busy() from None
        previous = os.read(fd, 4096).decode("utf-8", "replace").strip()
        if previous:
            log.warning(
                "took over %s, left by a training that no longer runs: %s", self.path, previous
            )
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        os.write(fd, json.dumps(holder).encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        """Empty the lock file (an empty one was released cleanly) and let go of it."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing drops the lock
        if fcntl is None:
            self.path.unlink(missing_ok=True)
        self._fd = None

    def holder(self) -> str:
        """Who holds the lock, as its file says."""
        try:
            info = json.loads(self.path.read_text(encoding="utf-8"))
            return f"process {info['pid']} on {info['host']} (since {info['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process"

    def _busy(self) -> Seq2SeqError:
        return Seq2SeqError(
            f"{self.path.parent} is in use: a training ({self.holder()}) writes it; wait for it "
            "to finish or stop it, or choose another folder with hydra.run.dir=..."
        )

    def _create_exclusively(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise Seq2SeqError(
                f"{self._busy()} (if no training runs there, remove {self.path})"
            ) from None

    def held_elsewhere(self) -> bool:
        """Whether another process holds the lock now."""
        try:
            self.check_free()
        except Seq2SeqError:
            return True
        return False

    def check_free(self) -> None:
        """Refuse, as ``acquire`` would, if another process holds the lock now; takes nothing."""
        if not self.path.exists():
            return
        if fcntl is None:
            self._create_exclusively()  # raises: the file exists
        with open(self.path, "rb") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self._busy() from None
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def release_facts(folder: Path) -> dict[str, Any]:
    """The facts a release folder states about its model (release.json); {} for a run folder."""
    path = Path(folder) / RELEASE_FACTS
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
