"""`seq2seq-average`: the element-wise mean of a run's last or best N kept checkpoints.

Averaging the weights of the last few validations is a cheap ensemble (as fairseq's
average_checkpoints); the result is an ordinary checkpoint that evaluate and translate load with
``checkpoint=averaged``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from omegaconf import OmegaConf

from seq2seq.commands.configs import AverageConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.config_choices import BestMetric, Selection
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.checkpoint import best_steps, kept_steps, load_checkpoint, save_checkpoint
from seq2seq.storage.rundir import AVERAGED, CONFIG_FILE, EVAL_DIR, kept_checkpoint, not_a_run

log = logging.getLogger("seq2seq.average")


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The mean of the ``model`` weights in ``paths`` (accumulated in float64)."""
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        weights = load_checkpoint(path)["model"]
        if total and weights.keys() != total.keys():
            raise Seq2SeqError(f"{path} holds another model than {paths[0]}")
        for name, tensor in weights.items():
            total[name] = total.get(name, 0) + tensor.double()
    first = load_checkpoint(paths[0])["model"]
    return {name: (value / len(paths)).to(first[name].dtype) for name, value in total.items()}


def average(cfg: AverageConfig) -> Path:
    """Average the selected kept checkpoints of ``cfg.run_dir``; return the written path."""
    run_dir = Path(cfg.run_dir)
    if not run_dir.is_dir():
        raise Seq2SeqError(f"run_dir={run_dir} is not a folder")
    steps = kept_steps(run_dir)
    if not steps and not (run_dir / CONFIG_FILE).is_file():  # runs/, not runs/<a run>
        raise Seq2SeqError(not_a_run(run_dir, str(run_dir)))
    if not steps:
        raise Seq2SeqError(
            f"{run_dir} keeps no checkpoints to average: train it with train.keep_checkpoints=N"
        )
    metric = _best_metric(run_dir)
    if Selection(cfg.select) == Selection.best:
        chosen = best_steps(steps, cfg.n, metric.higher_is_better)
    else:
        chosen = sorted(steps)[-cfg.n :]
    if len(chosen) < cfg.n:
        log.warning("%s keeps %d checkpoints; averaging those", run_dir, len(chosen))
    paths = [kept_checkpoint(run_dir, step) for step in sorted(chosen)]
    newest = load_checkpoint(paths[-1])
    state = {
        "model": average_checkpoints(paths),
        "step": newest["step"],
        "vocab": newest.get("vocab"),
        "tokenizers": newest.get("tokenizers"),
        "averaged": {str(step): steps[step] for step in sorted(chosen)},
    }
    out = Path(cfg.out) if cfg.out else run_dir / AVERAGED
    if out.is_file():  # the run's own averaged.pt (out= is never over a file: commands/rules.py)
        _say_replaced(out, sorted(chosen))
    save_checkpoint(out, state)
    log.info(
        "averaged steps %s (validation %s %s) into %s",
        sorted(chosen),
        metric.value,
        [round(steps[s], 2) for s in sorted(chosen)],
        out,
    )
    return out


def _say_replaced(out: Path, chosen: list[int]) -> None:
    """A warning where the run's averaged.pt is replaced by the average of other steps, naming
    the evaluations of the weights it held (they stay, and no longer describe it)."""
    before = sorted(int(step) for step in load_checkpoint(out).get("averaged", {}))
    if before == chosen:
        return
    scored = sorted(p.name for p in (out.parent / EVAL_DIR).glob(f"*.{out.stem}.*.json"))
    log.warning(
        "replacing %s, the average of steps %s, with that of steps %s%s",
        out,
        before,
        chosen,
        f"; {EVAL_DIR}/{scored[0]}{' ...' * (len(scored) > 1)} scored the old" if scored else "",
    )


def _best_metric(run_dir: Path) -> BestMetric:
    """What ranked the run's kept checkpoints: its train.best_metric (BLEU before the key)."""
    config = run_dir / CONFIG_FILE
    if not config.is_file():
        return BestMetric.bleu
    return BestMetric(OmegaConf.select(OmegaConf.load(config), "train.best_metric", default="bleu"))


main = hydra_command("average")(average)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
