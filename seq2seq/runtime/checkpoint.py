"""Checkpoint files: written atomically with host tensors and plain data only, read back safely;
the checkpoints a run keeps. What training puts in them: `seq2seq.training.state`."""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from seq2seq.data.tokenizer import Tokenizer, fingerprints
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import HOST
from seq2seq.runtime.migrate import upgrade_saved_config, upgrade_saved_state
from seq2seq.storage.rundir import (
    CONFIG_FILE,
    KEPT_DIR,
    KEPT_INDEX,
    LAST,
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    kept_checkpoint,
    start_refusal,
)

log = logging.getLogger(__name__)


def to_host(obj: Any, copy: bool = False) -> Any:
    """``obj`` with every tensor inside (dicts, lists, tuples) in host memory; with ``copy``,
    copied even where it is there already."""
    if isinstance(obj, Tensor):
        return obj.detach().to(HOST, copy=copy)
    if isinstance(obj, dict):
        return {key: to_host(value, copy) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_host(value, copy) for value in obj)
    return obj


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file beside `path`, then rename: a crash never leaves half a file.

    Tensors are copied to host memory first, so the file loads on any device. It is created with
    the usual permissions (the umask applies), like any other output.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:  # "x": never an existing file
            torch.save(to_host(state), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        # a full disk, a read-only folder, ...: torch's zip writer raises it as a RuntimeError
        failed = e if isinstance(e, OSError) else e.__context__
        if not isinstance(e, OSError | RuntimeError) or not isinstance(failed, OSError):
            raise
        kept = f"the previous {path.name} is kept" if path.is_file() else "none was written"
        if failed.errno in (errno.ENOSPC, errno.EDQUOT):
            kept += "; free some space, then continue with train.resume=true"
        raise Seq2SeqError(f"could not write {path}: {failed.strerror or failed}; {kept}") from e


class CheckpointWriter:
    """Writes checkpoints in a background thread, in order, so that training pays only for a
    host copy of the state; ``wait`` returns when everything asked for is on disk (and raises
    what writing raised)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: Future | None = None

    def save(self, paths: list[Path], state: dict[str, Any]) -> None:
        """Copy ``state`` to host memory now; write it to each of ``paths`` in the background."""
        self.wait()
        snapshot = to_host(state, copy=True)  # training goes on changing the originals
        self._pending = self._pool.submit(lambda: [save_checkpoint(p, snapshot) for p in paths])

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown()


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint into host memory safely (`weights_only=True`: no code from the file)."""
    if not path.is_file():
        raise Seq2SeqError(f"checkpoint not found: {path}")
    try:
        return torch.load(path, map_location=HOST, weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise Seq2SeqError(f"cannot read checkpoint {path}: {_why(e, path)}") from e


def _why(error: Exception, path: Path) -> str:
    """torch.load's reason in a line: a cut-short file by its size (torch's own reason is an
    errno or a zip library's); its weights-only refusal goes on for lines about the unpickler
    and advises loading the file with ``weights_only=False``, which would run code from it."""
    if _cut_short(path):
        return f"it is damaged or cut short ({path.stat().st_size:,} bytes)"
    text = str(error)
    if "WeightsUnpickler error:" in text:
        return "not a checkpoint this program wrote, or damaged"
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def _cut_short(path: Path) -> bool:
    """Whether ``path`` begins as torch.save's zip archive does but lacks the archive's end."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
        return b"PK\x03\x04".startswith(head) and not zipfile.is_zipfile(path)
    except OSError:  # unreadable: torch.load's own reason says why
        return False


def check_tokenizers(
    state: dict, path: Path, run_dir: Path, toks: tuple[Tokenizer, Tokenizer], advice: str = ""
) -> None:
    """Refuse a checkpoint trained with other tokenizers than the run's: its recorded
    fingerprints, else (a checkpoint from before them) its vocabulary sizes; ``advice`` ends the
    line (what to do)."""
    vocab = (toks[0].vocab_size, toks[1].vocab_size)
    if state.get("tokenizers") is not None and list(state["tokenizers"]) != fingerprints(*toks):
        raise Seq2SeqError(
            f"{path} was trained with other tokenizers than those in {run_dir} "
            f"({SRC_TOKENIZER}, {TGT_TOKENIZER}): it belongs to another run{advice}"
        )
    if "vocab" in state and tuple(state["vocab"]) != vocab:
        raise Seq2SeqError(
            f"{path} was trained with vocabularies of {state['vocab'][0]}/"
            f"{state['vocab'][1]} pieces, but the tokenizers in {run_dir} have {vocab[0]}/"
            f"{vocab[1]}: it belongs to another run{advice}"
        )


# what a resume takes from last.pt (runtime/migrate.py fills in what older ones lack)
RESUMED = ("model", "optimizer", "scheduler", "rng", "config")


def start_or_resume(run_dir: Path, cfg: DictConfig) -> dict[str, Any] | None:
    """A new run: refuse a folder whose checkpoints, release or files it would overwrite
    (`start_refusal`), save the config, return None. ``train.resume=true``: the state of the
    folder's last.pt; without one, a start afresh (where a new one would be accepted)."""
    if why := start_refusal(run_dir, cfg.train.resume):  # checked again now the lock is held
        raise Seq2SeqError(why)
    if cfg.train.resume and (run_dir / LAST).exists():
        return _resumed(run_dir / LAST, cfg)
    if cfg.train.resume:
        log.warning("train.resume=true but %s has no %s: starting afresh", run_dir, LAST)
    OmegaConf.save(cfg, run_dir / CONFIG_FILE, resolve=True)
    return None


def _resumed(last: Path, cfg: DictConfig) -> dict[str, Any]:
    """The state of ``last``, refused in one line where it cannot continue with ``cfg``."""
    state = load_checkpoint(last)
    if missing := [key for key in RESUMED if key not in state]:
        raise Seq2SeqError(
            f"train.resume=true, but {last} is no training's state (it lacks "
            f"{', '.join(missing)}: weights alone, as seq2seq-average writes): put back the "
            "run's own last.pt, or start a new run"
        )
    saved = upgrade_saved_config(OmegaConf.create(state["config"]))
    if changed := _differences(_plain(saved.model), _plain(cfg.model), "model"):
        raise Seq2SeqError(
            f"train.resume=true, but the model settings differ from {LAST}'s: "
            f"{'; '.join(changed[:4])}{'; ...' if len(changed) > 4 else ''}"
        )
    if changed := _languages_changed(saved, cfg):
        raise Seq2SeqError(
            f"train.resume=true, but the languages differ from {LAST}'s: {'; '.join(changed)}; "
            "its model and tokenizers are for those: leave these keys out, or start a new run "
            "with another hydra.run.dir=..."
        )
    toks = []
    for name in (SRC_TOKENIZER, TGT_TOKENIZER):
        if not (last.parent / name).is_file():
            raise Seq2SeqError(
                f"train.resume=true, but {last.parent} has no tokenizer model {name}: put back "
                "the run's own, or start a new run with another hydra.run.dir=..."
            )
        toks.append(Tokenizer.load(last.parent / name))
    again = "; train.resume=true needs the run's own: put it back, or start a new run elsewhere"
    check_tokenizers(state, last, last.parent, (toks[0], toks[1]), again)
    # the run's tokenizers are its own: other settings would be recorded but never applied
    recorded = OmegaConf.select(saved, "data.tokenizer")  # None before there were any
    theirs = _plain(recorded) if recorded is not None else {}
    ours = {key: value for key, value in _plain(cfg.data.tokenizer).items() if key in theirs}
    if changed := _differences(theirs, ours, "data.tokenizer"):
        raise Seq2SeqError(
            f"train.resume=true, but the tokenizer settings differ from {LAST}'s: "
            f"{'; '.join(changed)}; the run keeps its tokenizers: leave these keys out, or "
            "start a new run with another hydra.run.dir=..."
        )
    return upgrade_saved_state(state)


def _languages_changed(saved: DictConfig, cfg: DictConfig) -> list[str]:
    """The run's languages (data.src_lang, data.tgt_lang) changed since ``saved``, as "key saved
    (now value)"; a swapped pair too, whose files exist but which the run's model never read."""
    keys = ("data.src_lang", "data.tgt_lang")
    return [
        f"{key} {was} (now {now})"
        for key in keys
        if (was := OmegaConf.select(saved, key, default=None)) is not None
        and (now := OmegaConf.select(cfg, key, default=None)) != was
    ]


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)


def _differences(saved: Any, now: Any, key: str) -> list[str]:
    """``key``'s settings that differ between two nested dicts, as "key saved (now value)"."""
    if isinstance(saved, dict) and isinstance(now, dict):
        names = [*saved, *(k for k in now if k not in saved)]
        return [d for k in names for d in _differences(saved.get(k), now.get(k), f"{key}.{k}")]
    return [] if saved == now else [f"{key} {saved} (now {now})"]


def kept_steps(run_dir: Path) -> dict[int, float]:
    """{step: validation score} of the checkpoints kept in the run folder (of the run's
    train.best_metric: BLEU by default); a damaged index is a Seq2SeqError naming it."""
    index = Path(run_dir) / KEPT_DIR / KEPT_INDEX
    if not index.is_file():
        return {}
    try:
        return {int(step): float(bleu) for step, bleu in json.loads(index.read_text()).items()}
    except (ValueError, TypeError, AttributeError, OSError) as e:  # not {"step": bleu, ...}
        raise Seq2SeqError(f"{index} is damaged ({e}): it lists the kept checkpoints") from None


def best_steps(steps: dict[int, float], n: int, higher_is_better: bool = True) -> list[int]:
    """The ``n`` steps of the best scores (the later step first among equal ones)."""
    sign = -1 if higher_is_better else 1
    return sorted(steps, key=lambda s: (sign * steps[s], -s))[:n]


def keep(
    writer: CheckpointWriter,
    run_dir: Path,
    step: int,
    score: float,
    weights: dict,
    n: int,
    higher_is_better: bool = True,
) -> None:
    """Keep the weights validated at ``step`` (written in the background) with their validation
    ``score``; of all kept, only the ``n`` latest and the ``n`` best stay."""
    try:
        steps = {**kept_steps(run_dir), step: score}
    except Seq2SeqError as e:  # training goes on: the index starts again from this one
        log.warning("%s; a new one starts with step %d", e, step)
        steps = {step: score}
    stay = set(sorted(steps)[-n:]) | set(best_steps(steps, n, higher_is_better))
    writer.save([kept_checkpoint(run_dir, step)], {**weights, "step": step, "score": score})
    for old in set(steps) - stay:
        kept_checkpoint(run_dir, old).unlink(missing_ok=True)
    index = Path(run_dir) / KEPT_DIR / KEPT_INDEX
    index.parent.mkdir(parents=True, exist_ok=True)
    tmp = index.with_name(f".{index.name}.{os.getpid()}.tmp")  # replaced whole, never half
    tmp.write_text(json.dumps({str(s): steps[s] for s in sorted(stay)}))
    os.replace(tmp, index)
