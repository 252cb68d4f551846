"""`seq2seq-train`: train a BiGRU + attention translator in a Hydra run folder.

One process, or one per rank under ``torchrun`` (DistributedDataParallel through the engine):
rank 0 owns the run folder and writes every file and log line; the other ranks train their share
of each epoch and receive what they need (tokenizers, resumed state, validation results) from it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import shutil
from datetime import datetime
from importlib import resources
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from seq2seq.commands.keys import CONFIG_MODULE
from seq2seq.commands.wrapper import hydra_command
from seq2seq.config import Config
from seq2seq.data.readers import open_reader
from seq2seq.errors import Seq2SeqError
from seq2seq.languages import warn_unknown_languages
from seq2seq.runtime.distributed import follower_argv, process_rank, processes, with_overrides
from seq2seq.runtime.engine import Engine
from seq2seq.storage.diskfull import guard_log_files
from seq2seq.storage.rundir import (
    LAST,
    OVERRIDES,
    RunLock,
    overrides_file,
    start_refusal,
    unused_run_folder,
)
from seq2seq.training.trainer import Trainer

log = logging.getLogger("seq2seq.train")


class _RunFolder:
    """A start's run folder. Before Hydra writes anything, rank 0 refuses a busy one and notes
    the folders above it that are not there yet; after a user error, it removes the run folder
    if no training used it, and the noted folders it leaves empty: typos leave nothing behind."""

    def __init__(self) -> None:
        self.new_parents: list[Path] = []  # deepest first
        self.saved: list[str] = []  # a resume's settings from the run's first command
        self.made: Path | None = None  # the default folder, made before Hydra starts

    def claim(self, argv: list[str]) -> list[str]:
        """Under torchrun, ranks other than 0 get no Hydra output folder or log file (rank 0 owns
        the run folder and tells them where it is), and a sweep is refused."""
        rank = process_rank()
        run_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("hydra.run.dir=")), None)
        sweep = bool({"-m", "--multirun"} & set(argv))
        if run_dir and sweep:
            raise Seq2SeqError(
                "hydra.run.dir names one run's folder, which a sweep (-m) does not use: its "
                "runs go into hydra.sweep.dir=... (runs/multirun_<date>_<time>/ by default)"
            )
        self.saved = saved_settings(argv, run_dir)
        argv = [*self.saved, *argv]
        own = any(a.partition("=")[0] in ("--config-path", "-cp") for a in argv)  # the user's
        argv = with_overrides(argv, [f"hydra.searchpath=[pkg://{CONFIG_MODULE}]"] if own else [])
        if rank == 0 and run_dir:
            RunLock(Path(run_dir)).check_free()
            if why := start_refusal(Path(run_dir), _resuming(argv)):  # before Hydra writes
                raise Seq2SeqError(why)
        if rank == 0:
            self.new_parents = _new_parents(run_dir or _default_run_dir())
            if run_dir is None and not sweep:
                self.made = _fresh_folder(_default_run_dir())
                argv = with_overrides(argv, [f"hydra.run.dir={self.made}"] if self.made else [])
            logging_of_ours = ["hydra/job_logging=train", "hydra/hydra_logging=stderr"]
            return with_overrides(argv, logging_of_ours if own else [])
        if sweep:
            raise Seq2SeqError("a sweep (-m) cannot run under torchrun; start one per run")
        return follower_argv(argv)

    def drop_empty(self) -> None:
        """The default folder, and the folders above it that it needed, if nothing ran in them
        (``--cfg job``, a refused command line)."""
        for folder in [self.made, *self.new_parents] if self.made else []:
            with contextlib.suppress(OSError):  # not empty, or gone
                folder.rmdir()

    def drop_unused(self) -> None:
        if process_rank() != 0 or not HydraConfig.initialized():
            return
        folder = Path(HydraConfig.get().runtime.output_dir)
        if not unused_run_folder(folder):
            return
        _close_log_files(folder)
        shutil.rmtree(folder, ignore_errors=True)
        for parent in self.new_parents:
            if parent in folder.parents and parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()


def saved_settings(argv: list[str], run_dir: str | None) -> list[str]:
    """What a resume adds before its command line: the run's own overrides (`overrides_file`:
    the recipe, the model) but those this command sets, so that
    ``train.resume=true hydra.run.dir=...`` alone continues the run as it was started."""
    folder = Path(run_dir or "")
    saved = overrides_file(folder)
    if not (_resuming(argv) and run_dir and saved and (folder / LAST).is_file()) or processes() > 1:
        return []  # under torchrun other machines never read the folder: each rank as typed
    given = {_override_key(a) for a in argv}
    return [
        o for o in OmegaConf.to_container(OmegaConf.load(saved)) if _override_key(o) not in given
    ]


def _config_source() -> list[str]:
    """The flags that name the run's primary config where it is not this package's (a rerun
    from a run's config.yaml), so that a resume composes the same config; else none."""
    hydra_cfg = HydraConfig.get()
    main = next(s for s in hydra_cfg.runtime.config_sources if s.provider == "main")
    if main.schema == "pkg":
        return []
    return [f"--config-path={main.path}", f"--config-name={hydra_cfg.job.config_name}"]


def _resuming(argv: list[str]) -> bool:
    return any(_override_key(a) == "train.resume" and a.lower().endswith("=true") for a in argv)


def _write_overrides(path: Path, overrides: list[str]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    OmegaConf.save(OmegaConf.create(overrides), temporary)
    os.replace(temporary, path)


def _override_key(arg: str) -> str:
    """An override's key (``+model.x=1``: ``model.x``; ``experiment=smoke``: ``experiment``)."""
    return arg.split("=", 1)[0].lstrip("+~")


def _close_log_files(folder: Path) -> None:
    """The log handlers writing into ``folder``, closed before it goes."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == folder:
            root.removeHandler(handler)
            handler.close()


def _default_run_dir() -> str:
    """configs/config.yaml's hydra.run.dir, unresolved (``runs/${now:...}``)."""
    cfg = OmegaConf.load(resources.files(CONFIG_MODULE) / "config.yaml")
    return OmegaConf.to_container(cfg.hydra, resolve=False)["run"]["dir"]


def _fresh_folder(pattern: str) -> Path | None:
    """The default run folder (``runs/${now:...}``) with the time now, made here, so that a start
    in the same second as another gets a folder of its own (``..._2``); None where the pattern
    holds more than the time, or the folder cannot be made (Hydra then says why)."""
    name = re.sub(r"\$\{now:([^}]*)\}", lambda m: datetime.now().strftime(m.group(1)), pattern)
    if "${" in name:
        return None
    for n in itertools.count(1):
        folder = Path(name if n == 1 else f"{name}_{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
        except OSError:
            return None


def _new_parents(run_dir: str) -> list[Path]:
    """The folders above ``run_dir`` (up to its first ``${...}``) not there yet, deepest first."""
    fixed = run_dir.split("${")[0]
    above = Path(fixed).absolute() if fixed.endswith("/") else Path(fixed).absolute().parent
    return [p for p in [above, *above.parents] if not p.exists()]


_run_folder = _RunFolder()


def train(cfg: Config) -> str | None:
    """Train with the composed config, in the run folder Hydra made (rank 0's); rank 0 answers
    with the folder, for scripts (the log goes to stderr and train.log)."""
    engine = None
    guard_log_files()
    try:
        open_reader(cfg.data).check()
        if process_rank() == 0:  # said once, not by every rank under torchrun
            warn_unknown_languages(cfg.data.src_lang, cfg.data.tgt_lang, cfg.data.bleu_tokenize)
        tcfg = cfg.train
        engine = Engine.create(
            cfg.device,
            cfg.precision,
            tcfg.threads,
            tcfg.seed,
            True,
            products=cfg.products,
        )
        if not engine.is_main:  # rank 0 speaks for every rank; the others only warn
            logging.getLogger().setLevel(logging.WARNING)
        run_dir = Path(engine.broadcast(HydraConfig.get().runtime.output_dir))
        if _run_folder.saved:
            log.info("resuming with the run's own settings too: %s", " ".join(_run_folder.saved))
        trainer = Trainer(cfg, run_dir, engine)  # a start its checks accepted
        if engine.is_main:
            given = list(HydraConfig.get().overrides.task)
            _write_overrides(run_dir / OVERRIDES, [*_config_source(), *given])
        trainer.fit()
        return str(run_dir) if engine.is_main else None
    finally:
        if engine is not None:
            engine.close()


main = hydra_command(
    "config",
    before=_run_folder.claim,
    refused=_run_folder.drop_unused,
    after=_run_folder.drop_empty,
)(train)

if __name__ == "__main__":
    main()
