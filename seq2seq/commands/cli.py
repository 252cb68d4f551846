"""The installed commands' entry points (pyproject's [project.scripts]). Each imports its command
only when run, so that the worker processes a command starts (which import the main script
again) stay light; a Ctrl-C before the command's own handling begins (while torch imports) is
one line and exit status 130, as after it, not a traceback of the import."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from importlib import import_module


def _entry(command: str) -> Callable[[], None]:
    def start() -> None:
        hold_ctrl_c()
        try:
            import_module(f"seq2seq.commands.{command}").main()
        except KeyboardInterrupt:
            print(f"seq2seq-{command}: interrupted", file=sys.stderr)
            sys.exit(130)

    start.__name__ = start.__qualname__ = command
    return start


class _Held:
    """SIGINT's handler from a command's start to its own handling: a Ctrl-C is noted, to be
    raised there (`release_ctrl_c`). Raised inside torch's import or Hydra's composing, it may
    meet C++ code that aborts the process (pybind11's error_already_set, exit status -6) or
    leave Hydra's config half made (an AttributeError said as the config's)."""

    def __init__(self) -> None:
        self.heard = False

    def __call__(self, number: int, frame: object) -> None:
        self.heard = True


def hold_ctrl_c() -> None:
    """Ctrl-C noted, not raised, until `release_ctrl_c` (where SIGINT raises KeyboardInterrupt,
    as Python starts it; not where it is ignored, as in a background job)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _Held())


def release_ctrl_c() -> None:
    """Where a command's own handling of Ctrl-C begins: SIGINT raises KeyboardInterrupt again,
    at once where one was noted while held (`hold_ctrl_c`)."""
    held = signal.getsignal(signal.SIGINT)
    if isinstance(held, _Held):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if held.heard:
            raise KeyboardInterrupt


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
