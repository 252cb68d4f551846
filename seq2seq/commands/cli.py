"""The installed commands' entry points (pyproject's [project.scripts]). Each imports its command
only when run, so that the worker processes a command starts (which import the main script
again) stay light; a Ctrl-C before the command's own handling begins (while torch imports) is
one line and exit status 130, as after it, not a traceback of the import."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module


def _entry(command: str) -> Callable[[], None]:
    def start() -> None:
        try:
            import_module(f"seq2seq.commands.{command}").main()
        except KeyboardInterrupt:
            print(f"seq2seq-{command}: interrupted", file=sys.stderr)
            sys.exit(130)

    start.__name__ = start.__qualname__ = command
    return start


train = _entry("train")
evaluate = _entry("evaluate")
translate = _entry("translate")
average = _entry("average")
export = _entry("export")
serve = _entry("serve")
align = _entry("align")
score = _entry("score")
distill = _entry("distill")
backtranslate = _entry("backtranslate")
