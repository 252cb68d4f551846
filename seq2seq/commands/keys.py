"""Every command's overrides checked against its schema before Hydra runs: an unknown key (``+``
overrides included: on a typed config they would add a key nothing reads), a key the chosen
attention does not have, an option no group holds, a value of the wrong type, each answered in
one line with the closest valid key, before any work starts.

The config is composed once with the group choices of the command line (``data=tsv``,
``model/attention=luong``, ``experiment=...``; each choice of a swept group), and each
``key=value`` is looked up in it.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Iterator, Sequence
from copy import deepcopy
from enum import Enum
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override, OverrideType
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException
from omegaconf.nodes import BooleanNode, EnumNode, FloatNode, IntegerNode, StringNode

from seq2seq.config import CustomDataConfig, HfDataConfig, Multi30kConfig, TsvDataConfig
from seq2seq.errors import Seq2SeqError
from seq2seq.model.config import ATTENTION_CONFIGS, Normalizer

CONFIG_MODULE = "seq2seq.configs"
# keys taken out or renamed, and what to use instead: refused in one line where given (a saved
# run's config is read in today's keys by runtime/migrate.py)
REMOVED = {
    "train.precision": "it is the top-level precision=..., one key for every command",
    "log.alignment_gold": "it is log.alignment_pairs=...",
    "source": "evaluate's is data_source=..., align's src_file=...",
    "target": "align's is tgt_file=...",
    "train.compile": "it trained slower than without on a GPU and no faster on the CPU "
    "(docs/gpu.md); delete it: on a GPU, train.cuda_graphs=auto (the default) is the fast path",
}
# groups whose options have keys of their own: (section, {option: schema}, the key naming it)
_GROUP_SCHEMAS = (
    ("model.attention", ATTENTION_CONFIGS, "name"),
    (
        "data",
        {
            "multi30k": Multi30kConfig,
            "custom": CustomDataConfig,
            "tsv": TsvDataConfig,
            "hf": HfDataConfig,
        },
        "kind",
    ),
)
_MAX_COMBINATIONS = 64  # swept groups: the configs composed to look keys up in, at most
_SKIP_FLAGS = ("shell_completion", "config_path", "config_dir")  # help composes too: checked


def check_command_line(config_name: str, argv: Sequence[str]) -> None:
    """Refuse, in one line (Seq2SeqError), the first override of ``argv`` (a command's
    arguments) that names no key or option of ``configs/<config_name>.yaml``'s composed config,
    or gives a key a value of the wrong type. Help and Hydra's own keys are left alone."""
    if (parsed := _parsed(argv)) is None:
        return
    args, overrides = parsed
    for override in overrides:
        if override.key_or_group in ("hydra.run.dir", "hydra.sweep.dir"):
            _check_folder(override.key_or_group, override.value())
    overrides = [o for o in overrides if not o.key_or_group.startswith("hydra")]
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        repository = GlobalHydra.instance().config_loader().repository
        groups = [o for o in overrides if repository.group_exists(o.key_or_group)]
        for override in groups:
            _check_option(override, GlobalHydra.instance().config_loader().get_group_options)
        configs = list(_composed(args.config_name or config_name, groups))
    if not configs:
        return
    for override in overrides:
        if override not in groups:
            _check_value(configs, override)


def sweep_jobs(config_name: str, argv: Sequence[str]) -> Iterator[tuple[str, DictConfig]]:
    """Under ``-m``, each job's config (at most _MAX_COMBINATIONS), named by its swept values,
    so that all are checked before the first starts; nothing without a sweep."""
    parsed = _parsed(argv)
    if parsed is None or not parsed[0].multirun or parsed[0].config_name:
        return
    overrides = [o for o in parsed[1] if not o.key_or_group.startswith("hydra")]
    fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
    swept = [o for o in overrides if o.is_sweep_override()]
    values = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] for o in swept]
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        for job in itertools.islice(itertools.product(*values), _MAX_COMBINATIONS if swept else 0):
            try:
                cfg = compose(config_name, [*fixed, *job], return_hydra_config=True)
            except Exception:  # Hydra says it when the job starts
                return
            if OmegaConf.select(cfg, "hydra.sweeper.params"):  # an experiment's own sweep:
                return  # its jobs are not these, and Hydra checks each as it starts
            with open_dict(cfg):
                del cfg["hydra"]  # the job's own config, as the command gets it
            yield " ".join(job), cfg


def _parsed(argv: Sequence[str]) -> tuple[Any, list[Override]] | None:
    """Hydra's reading of a command's arguments and overrides; None where the checks leave it
    to Hydra (help, a rerun, a syntax error: Hydra's own message says where)."""
    args = get_args_parser().parse_args(list(argv))
    if any(getattr(args, flag, None) for flag in _SKIP_FLAGS) or args.experimental_rerun:
        return None
    try:
        return args, OverridesParser.create().parse_overrides(args.overrides)
    except Exception:
        return None


def _check_folder(key: str, value: Any) -> None:
    """The run folder can be made: what of it exists already is a folder, not a file (Hydra
    would end in FileExistsError's traceback); ${...} is left to Hydra."""
    if not isinstance(value, str) or "${" in value:
        return
    path = Path(value)
    while not path.exists() and path != path.parent:
        path = path.parent
    if path.exists() and not path.is_dir():
        raise Seq2SeqError(f"{key}={value}: {path} is a file, not a folder")


def _check_option(override: Override, options_of: Any) -> None:
    """A group's option must exist: ``experiment=smok`` names ``smoke``."""
    if override.is_delete():
        return
    group = override.key_or_group
    options = options_of(group)
    value = override.value()
    chosen = value.list if isinstance(value, ChoiceSweep) else [value]
    for option in chosen:
        if isinstance(option, str) and option not in options:
            raise Seq2SeqError(
                f"{group}={option}: no such option{_did_you_mean(option, options)} "
                f"(options: {', '.join(options)}){_named_elsewhere(group, option, options_of)}"
            )


def _named_elsewhere(group: str, option: str, options_of: Any) -> str:
    """Where the docs' other attention names are chosen: a comparison row (``luong_concat``,
    configs/compare/) or a normalizer (``sparsemax``) given as ``model/attention=<name>``."""
    if group != "model/attention":
        return ""
    hints = []
    if option in options_of("compare"):
        hints.append(
            f"a row of the attention comparison: +compare={option} experiment=attention_comparison"
        )
    if option in Normalizer.__members__:
        hints.append(f"a normalizer of every attention: model.attention.normalizer={option}")
    return f"; {option} is " + ", and ".join(hints) if hints else ""


def _composed(config_name: str, groups: list[Override]) -> Iterator[DictConfig]:
    """The config composed with each combination of the group choices (one without sweeps)."""
    choices = []
    for override in groups:
        value = override.value()
        if override.is_sweep_override() and not isinstance(value, ChoiceSweep):
            return  # a range or glob of options: Hydra checks each job
        items = value.list if isinstance(value, ChoiceSweep) else [value]
        choices.append([_as_override(override, item) for item in items])
    for combination in itertools.islice(itertools.product(*choices), _MAX_COMBINATIONS):
        try:
            yield compose(config_name, overrides=list(combination))
        except Exception as e:  # a broken config file: Hydra's own message says what and where
            if problem := _clash(e, combination):
                raise Seq2SeqError(problem) from None
            return


def _clash(error: Exception, choices: Sequence[str]) -> str | None:
    """Two choices that do not fit (``experiment=tatoeba_de_en_cpu data=custom``: the recipe
    sets data.file, which custom data has not), in one line; None for other errors."""
    where = re.match(r"In '(\w+)/([^']+)'", str(error))
    key_error = error.__context__
    if where is None or not isinstance(key_error, ConfigKeyError):
        return None
    option = f"{where.group(1)}={where.group(2)}"
    others = " ".join(c for c in choices if c != option) or "the defaults"
    return f"{option} sets {key_error.full_key}, a key {others} does not have"


def _as_override(override: Override, item: Any) -> str:
    prefix = {OverrideType.ADD: "+", OverrideType.FORCE_ADD: "++", OverrideType.DEL: "~"}
    key = override.key_or_group + (f"@{override.package}" if override.package else "")
    if override.is_delete():
        return f"~{key}" + ("" if item is None else f"={item}")
    return f"{prefix.get(override.type, '')}{key}={item}"


def _check_value(configs: list[DictConfig], override: Override) -> None:
    """The key must be in every composed config (each job of a sweep), and take the value."""
    key = override.key_or_group
    lacking = [cfg for cfg in configs if not _has_key(cfg, key)]
    if lacking:
        raise Seq2SeqError(_unknown(lacking[0], key))
    if override.is_delete():
        return
    cfg = configs[0]
    node = OmegaConf.select(cfg, key, throw_on_missing=False)
    value = override.value()
    values = value.list if isinstance(value, ChoiceSweep) else [value]
    if override.is_sweep_override() and not isinstance(value, ChoiceSweep):
        return  # a range or interval: Hydra checks each job's value
    for item in values:
        if isinstance(node, DictConfig) and not isinstance(item, dict):
            raise Seq2SeqError(_not_a_value(key, item))
        copy = deepcopy(cfg)
        try:
            with open_dict(copy):
                OmegaConf.update(copy, key, item, merge=True)
        except (OmegaConfBaseException, ValueError, TypeError) as e:
            given = item if len(values) > 1 else override.get_value_element_as_str()
            raise Seq2SeqError(f"{key}={given}: expected {_expected(cfg, key)}") from e


def _has_key(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` (dotted) names a node of ``cfg``; below a plain dict or a list any key
    does (``versions.torch``, ``data.columns.0``)."""
    node: Any = cfg
    for part in key.split("."):
        if isinstance(node, ListConfig) or (
            isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict
        ):
            return True
        if not isinstance(node, DictConfig) or part not in node.keys():  # noqa: SIM118 (MISSING ones too)
            return False
        node = node._get_node(part)
    return True


def key_paths(node: DictConfig, prefix: str = "") -> Iterator[str]:
    """Every dotted key of a composed config, sections included."""
    for name in node:
        path = f"{prefix}{name}"
        yield path
        child = node._get_node(name)
        if isinstance(child, DictConfig) and OmegaConf.get_type(child) is not dict:
            yield from key_paths(child, f"{path}.")


def schema_hint(cfg: DictConfig, key: str) -> str:
    """The schema's own word on a key it does not have (serve's ``prefix``, translate's
    ``input``); "" where it has none."""
    return getattr(OmegaConf.get_type(cfg), "ELSEWHERE", {}).get(key, "")


def _did_you_mean(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _unknown(cfg: DictConfig, key: str) -> str:
    """``train.max_step: no such key; did you mean train.max_steps?``; a key of another
    attention than the chosen one says which attentions have it."""
    if hint := schema_hint(cfg, key):
        return f"{key}: no such key; {hint}"
    if key in REMOVED:
        return f"{key} was removed: {REMOVED[key]}"
    paths = [p for p in key_paths(cfg) if not key.startswith(f"{p}.")]  # not its own sections
    message = f"{key}: no such key{_did_you_mean(key, paths)}"
    for section, options, chosen in _GROUP_SCHEMAS:
        name = key.removeprefix(f"{section}.")
        current = OmegaConf.select(cfg, f"{section}.{chosen}", default=None)
        if name == key or "." in name or current is None:
            continue
        having = [o for o, schema in options.items() if name in schema.__dataclass_fields__]
        if having:
            group = section.replace(".", "/")
            choices = " or ".join(f"{group}={o}" for o in having)
            return f"{key}: no such key with {group}={current}; {name} is a key of {choices}"
    return message


def _not_a_value(key: str, item: Any) -> str:
    group = key.replace(".", "/")
    with initialize_config_module(CONFIG_MODULE, version_base=None):
        is_group = GlobalHydra.instance().config_loader().repository.group_exists(group)
    if is_group:
        return f"{key}={item}: {key} is a group, chosen with {group}={item}"
    return f"{key}={item}: {key} is a section of keys, not a value: give {key}.<key>=..."


def _expected(cfg: DictConfig, key: str) -> str:
    """What a key's type takes, in words."""
    parent, _, name = key.rpartition(".")
    container = OmegaConf.select(cfg, parent) if parent else cfg
    node = container._get_node(name)
    if isinstance(node, EnumNode):
        kinds: type[Enum] = node.enum_type
        what = "one of " + ", ".join(kinds.__members__)
    elif isinstance(node, ListConfig):
        what = "a list, e.g. [a,b]"
    else:
        types = {
            BooleanNode: "true or false",
            IntegerNode: "an integer",
            FloatNode: "a number",
            StringNode: "a string",
        }
        what = next((text for kind, text in types.items() if isinstance(node, kind)), "a value")
    return what + (" or null" if node._is_optional() else "")
