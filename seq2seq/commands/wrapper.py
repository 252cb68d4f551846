"""The one wrapper all ten commands run in. Before Hydra starts: the schemas registered, ``-v``
read, the command line checked for Hydra's shape and its overrides against the schema (an old
key's spelling refused with today's). Before any work: the values checked (commands/rules.py).
After: the result printed (a JSON line or a path) or a user error said in one line with exit 1,
never a traceback."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, ListConfig

from seq2seq.commands.arguments import check_arguments, for_hydra_help
from seq2seq.commands.cli import release_ctrl_c
from seq2seq.commands.configs import CONFIGS, SCHEMAS, register_schemas
from seq2seq.commands.keys import check_command_line, sweep_jobs
from seq2seq.commands.rules import check_config, check_files
from seq2seq.data.stream import preload_workers
from seq2seq.errors import ReportedByRankZero, Seq2SeqError
from seq2seq.runtime.distributed import process_rank
from seq2seq.storage.diskfull import quiet_event_writer_threads

log = logging.getLogger("seq2seq")

Task = Callable[[Any], Any]  # the command's work on its composed config; returns what to print


def hydra_command(
    config_name: str,
    before: Callable[[list[str]], list[str]] | None = None,
    refused: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
) -> Callable[[Task], Callable[[], None]]:
    """``hydra.main`` of a command that reads ``configs/<config_name>.yaml`` (shipped inside the
    package). ``-v`` (``--verbose``) is ``hydra.verbose=seq2seq``: the debug lines too.
    ``before`` sees the arguments first and may change them or refuse (a Seq2SeqError);
    ``refused`` tidies up after a user error has been said (training: an unused run folder);
    ``after`` runs when the command ends, however it ends (training: a folder left empty)."""

    def decorate(task: Task) -> Callable[[], None]:
        @functools.wraps(task)
        def body(cfg: Any) -> None:
            _say(_run(task, cfg, SCHEMAS[config_name], refused))

        run = hydra.main(version_base=None, config_path=CONFIGS, config_name=config_name)(body)

        @functools.wraps(task)
        def command() -> None:
            register_schemas()
            verbose = "hydra.verbose=seq2seq"
            sys.argv[1:] = [verbose if a in ("-v", "--verbose") else a for a in sys.argv[1:]]
            sys.argv[1:] = [_home_folder(a) for a in sys.argv[1:]]
            try:
                _start(config_name, before)
                run()
            except BrokenPipeError:  # --help or --cfg read by `| head`
                _reader_left()
            finally:
                if after is not None:
                    after()

        return command

    return decorate


def _start(config_name: str, before: Callable[[list[str]], list[str]] | None) -> None:
    """``before``, then the command line's checks; a refusal exits with its one line."""
    try:
        sys.argv[1:] = for_hydra_help(sys.argv[1:])
        if before is not None:
            sys.argv[1:] = before(sys.argv[1:])
        check_arguments(config_name, sys.argv[1:])
        check_command_line(config_name, sys.argv[1:])
        for job, cfg in sweep_jobs(config_name, sys.argv[1:]):  # -m: all before any
            _check_job(job, cfg, SCHEMAS[config_name])
    except Seq2SeqError as e:
        command_name = "train" if config_name == "config" else config_name
        sys.exit(f"seq2seq-{command_name}: {e}" if process_rank() == 0 else 1)  # said once


def _check_job(job: str, cfg: Any, schema: type) -> None:
    """One job of a sweep meets its command's rules, or the refusal names the job; the rules'
    warnings wait for the job's own start (else each would be said twice)."""
    rules_log = logging.getLogger("seq2seq.config")
    was, rules_log.disabled = rules_log.disabled, True
    try:
        check_config(cfg, schema)
    except Seq2SeqError as e:
        raise Seq2SeqError(f"the sweep's job {job}: {e}") from None
    finally:
        rules_log.disabled = was


def _run(task: Task, cfg: Any, schema: type, refused: Callable[[], None] | None) -> Any:
    """The task on its config, checked by ``schema``'s rules; each way a user error ends, said
    once (then ``refused``). The command's process-wide settings: TensorBoard's writer thread
    keeps a full disk's traceback quiet; the data workers' server preloads their modules."""
    try:
        release_ctrl_c()  # held since the entry point began (commands/cli.py)
        expand_home(cfg)
        try:
            check_config(cfg, schema)
        except Seq2SeqError as e:  # the same on every rank under torchrun: rank 0 says it
            raise (ReportedByRankZero(str(e)) if process_rank() else e) from None
        check_files(cfg)
        quiet_event_writer_threads()
        preload_workers()
        return task(cfg)
    except Seq2SeqError as e:
        if not isinstance(e, ReportedByRankZero):  # rank 0 has said it for every rank
            log.error("%s", e)
        if refused is not None:
            refused()
    except KeyboardInterrupt:  # Ctrl-C: what each command keeps (chunks, checkpoints) is kept
        if process_rank() == 0:  # under torchrun every rank hears it: one says it
            log.error("interrupted")
        sys.exit(130)
    except BrokenPipeError:  # e.g. `... | head`: the reader left, nothing more to say
        _reader_left()
    except OSError as e:  # a full disk, a folder that went away: which file, in one line
        where = f"{e.filename}: " if e.filename else ""
        log.error("stopped: %s%s; what was written before is intact", where, e.strerror or e)
    sys.exit(1)


def _reader_left() -> None:
    """stdout's reader has gone: what is still buffered goes nowhere, not into a traceback."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _home_folder(arg: str) -> str:
    """``hydra.run.dir="~/x"`` (quoted, as Hydra's grammar needs) names the home's folder, as
    expand_home does for the command's own settings, not a folder ``./~/x``."""
    key, sep, value = arg.partition("=")
    quote = value[:1] if value[:1] in ("'", '"') and value[-1:] == value[:1] else ""
    bare = value[1:-1] if quote else value
    if key.lstrip("+") not in ("hydra.run.dir", "hydra.sweep.dir") or not bare.startswith("~"):
        return arg
    return f"{key}{sep}{quote}{os.path.expanduser(bare)}{quote}"


def expand_home(cfg: Any) -> None:
    """Each setting that starts with ``~`` (run_dir, checkpoint, input, data.source, ...)
    expanded as a shell would have: a quoted ``run_dir="~/runs/x"`` names that folder."""
    keys = cfg.keys() if isinstance(cfg, DictConfig) else range(len(cfg))
    for key in list(keys):
        node = cfg._get_node(key)
        if isinstance(node, DictConfig | ListConfig):
            if not node._is_none() and not node._is_missing() and not node._is_interpolation():
                expand_home(node)
        elif not node._is_interpolation() and str(value := node._value()).startswith("~"):
            cfg[key] = os.path.expanduser(str(value))


def _say(result: Any) -> None:
    """A command's answer on stdout, last: a JSON line (scores, counts) or a written path; a
    reader that has left (``... | head -1``) ends it quietly, as in ``_run``."""
    try:
        if isinstance(result, dict):
            print(json.dumps(result, ensure_ascii=False), flush=True)
        elif isinstance(result, str | Path):
            print(result, flush=True)
    except BrokenPipeError:
        _reader_left()
        sys.exit(1)
