"""A command line in the shape Hydra reads, checked before it reads it: every setting is
``key=value``. A flag of another tool (``--beam 3``, ``-src in.txt``), a bare folder
(``runs/x``), a key without its value, or a value Hydra's grammar cannot read is answered in one
line showing the override meant, instead of argparse's usage or Hydra's parser error."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_module
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from seq2seq.commands.keys import CONFIG_MODULE, key_paths, schema_hint
from seq2seq.errors import Seq2SeqError

LISTED = "(--help lists them)"


def check_arguments(config_name: str, argv: Sequence[str]) -> None:
    """Refuse, in one line (Seq2SeqError), the first word of ``argv`` that is neither one of
    Hydra's flags nor an override its grammar reads; help and reruns are left to Hydra."""
    args, unknown = get_args_parser().parse_known_args(list(argv))
    if args.help or args.hydra_help or args.info or args.shell_completion:
        return
    flags = [word for word in unknown if word.startswith("-")]
    if flags:
        raise Seq2SeqError(_flag(config_name, list(argv), flags[0]))
    words = [word for word in args.overrides if word not in unknown]
    for at, word in enumerate(words):
        if "=" not in word and not word.startswith("~"):
            raise Seq2SeqError(_bare(config_name, word, words[at + 1 : at + 2]))
        _readable(word)


def for_hydra_help(argv: Sequence[str]) -> list[str]:
    """``argv`` less the task's overrides where it asks for ``--hydra-help`` (Hydra's own
    settings): Hydra composes that help from its own config and the overrides, and a task's
    (``experiment=smoke``) ended in its traceback."""
    if "--hydra-help" not in argv:
        return list(argv)
    overrides = get_args_parser().parse_known_args(list(argv))[0].overrides
    task = {o for o in overrides if not o.lstrip("+~").startswith("hydra")}
    return [word for word in argv if word not in task]


def _flag(config_name: str, argv: list[str], flag: str) -> str:
    """``--beam 3``: the key it meant, with its value where one follows."""
    name, _, value = flag.lstrip("-").partition("=")
    at = argv.index(flag)
    after = argv[at + 1 : at + 2]
    if not value and after and not after[0].startswith("-") and "=" not in after[0]:
        value = after[0]
    shown = f"{flag} {value}" if value and "=" not in flag else flag
    cfg = _config(config_name)
    if cfg is None:
        return f"{shown}: settings are key=value {LISTED}"
    hint = _elsewhere(cfg, name) or _meant(cfg, name.replace("-", "_"), value or "...")
    return f"{shown}: settings are key=value{hint}"


def _bare(config_name: str, word: str, following: list[str]) -> str:
    """A word without ``=``: a key whose value came apart, or a run folder named alone."""
    cfg = _config(config_name)
    keys = list(key_paths(cfg)) if cfg is not None else []
    if word in keys and not isinstance(OmegaConf.select(cfg, word), DictConfig):
        if following and "=" not in following[0]:
            return f"{word} {following[0]}: give it as {word}={following[0]}"
        return f"{word}: give it a value, {word}=..."
    if "run_dir" in keys and Path(word).is_dir():
        return f"{word}: give the folder as run_dir={word}"
    return f"{word}: settings are key=value{_elsewhere(cfg, word) or ' ' + LISTED}"


def _readable(word: str) -> None:
    """An override Hydra's grammar cannot read (a file name with brackets, a URL with a query):
    what it says, and the quoted form that it reads."""
    if (reason := _unreadable(word)) is None:
        return
    key, _, value = word.partition("=")
    if value.startswith("[") and value.count("[") != value.count("]"):  # a list left open
        raise Seq2SeqError(f"{word}: the list's brackets do not pair up: {key}=[a,b]")
    quoted = f'{key}="{value}"'
    fix = f"; quote the value: '{quoted}'" if _unreadable(quoted) is None else ""
    raise Seq2SeqError(f"{word}: Hydra cannot read it ({reason}){fix}")


def _unreadable(word: str) -> str | None:
    """Why Hydra's override grammar cannot read ``word``; None where it can."""
    try:
        OverridesParser.create().parse_overrides([word])
    except Exception as e:  # the grammar's errors are of several classes
        lines = [line for line in str(e).splitlines() if not line.startswith(("Error", "See "))]
        return lines[0] if lines else "not an override"
    return None


def _config(config_name: str) -> DictConfig | None:
    """The command's config as it starts, to name keys from; None if it does not compose."""
    try:
        with initialize_config_module(CONFIG_MODULE, version_base=None):
            return compose(config_name)
    except Exception:  # a broken config file: Hydra says what and where when it starts
        return None


def _elsewhere(cfg: DictConfig | None, name: str) -> str:
    hint = schema_hint(cfg, name) if cfg is not None else ""
    return f"; {hint}" if hint else ""


def _meant(cfg: DictConfig, name: str, value: str) -> str:
    """``; did you mean beam_size=3?`` for ``beam``: the key whose full or last name is
    closest."""
    keys = list(key_paths(cfg))
    by_last = {key.rpartition(".")[2]: key for key in keys}
    close = difflib.get_close_matches(name, [*keys, *by_last], n=1, cutoff=0.6)
    if not close:
        return f" {LISTED}"
    return f"; did you mean {by_last.get(close[0], close[0])}={value}?"
