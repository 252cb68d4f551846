"""`seq2seq-train`: train a BiGRU + attention translator in a Hydra run folder.

One process, or one per rank under ``torchrun`` (DistributedDataParallel through the engine):
rank 0 owns the run folder and writes every file and log line; the other ranks train their share
of each epoch and receive what they need (tokenizers, resumed state, validation results) from it.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from seq2seq.config import Config
from seq2seq.config_commands import hydra_command
from seq2seq.config_rules import check_config, upgrade_config
from seq2seq.data.sources import open_source
from seq2seq.errors import ReportedByRankZero, Seq2SeqError
from seq2seq.runtime.distributed import follower_argv, process_rank
from seq2seq.runtime.engine import Engine
from seq2seq.storage.diskfull import guard_log_files
from seq2seq.storage.rundir import RunLock
from seq2seq.training.trainer import Trainer

log = logging.getLogger("seq2seq.train")


@hydra_command("config")
def _main(cfg: Config) -> None:
    """Train with the composed config; user errors exit 1 with one clear message."""
    engine = None
    guard_log_files()
    try:
        upgrade_config(cfg)
        check_config(cfg)
        open_source(cfg.data).check()
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
        Trainer(cfg, run_dir, engine).fit()
    except Seq2SeqError as e:
        if not isinstance(e, ReportedByRankZero):
            log.error("%s", e)
        sys.exit(1)
    except OSError as e:  # a full disk, a folder that went away: which file, in one line
        where = f"{e.filename}: " if e.filename else ""
        log.error("stopped: %s%s; checkpoints already written are intact", where, e.strerror or e)
        sys.exit(1)
    finally:
        if engine is not None:
            engine.close()


def main() -> None:
    """The `seq2seq-train` command. Under torchrun, ranks other than 0 get no Hydra output
    folder or log file (rank 0 owns the run folder and tells them where it is)."""
    rank = process_rank()
    run_dir = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("hydra.run.dir=")), None)
    if rank == 0 and run_dir:  # a busy folder is refused before Hydra writes into it
        try:
            RunLock(Path(run_dir)).check_free()
        except Seq2SeqError as e:
            sys.exit(f"seq2seq-train: {e}")
    if rank > 0:
        if {"-m", "--multirun"} & set(sys.argv):
            sys.exit("seq2seq-train: a sweep (-m) cannot run under torchrun; start one per run")
        sys.argv = follower_argv(sys.argv)
    _main()


if __name__ == "__main__":
    main()
