"""The typed configs of the commands after training (evaluate, translate, align, score, average,
distill, back-translate, export; serve's is the server's own, serving/settings.py), registered
with the training schema when a command starts, so that importing the library registers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar, Optional

from hydra.core.config_store import ConfigStore

from seq2seq.config import (
    CheckpointConfig,
    Config,
    InferenceConfig,
    LoadConfig,
    needed,
    register_configs,
)
from seq2seq.config_choices import (
    AlignMethod,
    Pick,
    Selection,
    Symmetrize,
)
from seq2seq.serving.settings import ServeConfig

CONFIGS = "pkg://seq2seq.configs"  # the top-level configs/, installed inside the package


@dataclass
class SteeringKeys:
    """The files that steer each input line's output (docs/decoding.md), for the commands that
    read a file of lines: evaluate and piped translate."""

    prefix: Optional[str] = None  # one target prefix per input line ("": none): output starts so
    constraints: Optional[str] = None  # per input line, tab-separated phrases the output holds
    terms: Optional[str] = None  # a glossary: source phrase<TAB>target phrase, a line each


STEERING_FILES = tuple(f.name for f in fields(SteeringKeys))  # prefix, constraints, terms


@dataclass
class EvaluateConfig(SteeringKeys, InferenceConfig):
    """`seq2seq-evaluate`: decode a split of the run's corpus (or two files) and score it."""

    split: str = "test"  # a split name of the run's corpus, or train/valid/test = the run's own
    data_source: Optional[str] = None  # where Multi30k is, for split= (default: data.source's)
    input: Optional[str] = None  # source file to translate instead of a split (needs reference)
    reference: Optional[str] = None  # its reference translations, one per line
    bleu_tokenize: Optional[str] = None  # sacreBLEU's tokenizer; None: the run's (by language)
    log_attention: int = 0  # heatmaps of the first K sentences into the run's TensorBoard
    out: Optional[str] = None  # folder of the outputs and events; None: the run's eval/


@dataclass
class TranslateConfig(SteeringKeys, InferenceConfig):
    """`seq2seq-translate`: a prompt on a terminal, or one translation per line of piped input."""

    # what users of other tools look for: files are the shell's redirections
    ELSEWHERE: ClassVar[dict[str, str]] = dict.fromkeys(
        ("input", "src", "source", "output", "out"),
        "it reads standard input and writes standard output: "
        "seq2seq-translate run_dir=... < source.txt > translations.txt",
    )

    show_alignment: bool = False  # draw which source subwords each target subword attended to


@dataclass
class AverageConfig:
    """`seq2seq-average`: one checkpoint from the mean of a run's kept checkpoints."""

    run_dir: str = needed("<a run trained with train.keep_checkpoints=N>")
    n: int = 5  # how many kept checkpoints to average
    select: Selection = Selection.last  # the n latest validations, or the n best (by the
    # run's train.best_metric: BLEU by default)
    out: Optional[str] = None  # default: <run_dir>/averaged.pt (evaluate with checkpoint=averaged)


@dataclass
class AlignConfig(LoadConfig):
    """`seq2seq-align`: word links of given sentence pairs, from the attention of a run reading
    them (forced decoding), optionally with a run of the reverse direction, scored against gold."""

    # run_dir: a run (or release) translating the input's source into its target
    input: Optional[str] = None  # "source ||| target" lines, words separated by spaces
    src_file: Optional[str] = None  # or two parallel files, one sentence per line
    tgt_file: Optional[str] = None
    swap: bool = False  # the input's sides are the other way round: run_dir reads its target
    output: Optional[str] = None  # Pharaoh links "i-j" (0-based), a line per pair; None: stdout
    weights: Optional[str] = None  # the word attention of each pair as JSON lines
    method: AlignMethod = AlignMethod.argmax
    threshold: float = 0.3  # method=threshold: the least weight of a link
    shift: int = 0  # target word t takes the attention of step t + shift
    reverse_run_dir: Optional[str] = None  # a run of the other direction: both are symmetrised
    reverse_checkpoint: str = "best"
    reverse_shift: int = 0
    # how the two runs' links are combined (with reverse_run_dir only): grow_diag_final if not given
    symmetrize: Optional[Symmetrize] = None
    gold: Optional[str] = None  # human links, "i-j" sure and "ipj" possible: prints AER
    gold_one_based: bool = True  # positions in gold count from 1 (the talp files do)
    batch_size: int = 64  # pairs read together


@dataclass
class ScoreConfig(LoadConfig):
    """`seq2seq-score`: how likely a run finds given translations (forced decoding): log P(target |
    source) of each pair, and the perplexity of them all."""

    src_file: str = needed("<sources, one sentence a line>")
    tgt_file: str = needed("<their translations, line by line>")
    # the scores, a line per pair; None: stdout (and the perplexity in the log, not on stdout)
    output: Optional[str] = None
    normalize: bool = False  # each pair's score per target piece (EOS counted), not its sum
    batch_tokens: int = 4000  # pairs read together: at most this many x their longest side
    # more run folders: each pair's score is the mean of theirs and run_dir's, the score an
    # ensemble search (which averages their log-probabilities at every step) gives it
    ensemble: list[str] = field(default_factory=list)


@dataclass
class DistillConfig(InferenceConfig):
    """`seq2seq-distill`: a teacher's beam output for every source of a split of its corpus
    (sequence-level knowledge distillation), written as a corpus for data=custom."""

    # the folder of the distilled corpus (and its chunks, for resuming, until it is written)
    out: str = needed("<a folder for the distilled corpus>")
    split: str = "train"  # a split of the teacher's corpus
    data_source: Optional[str] = None  # where Multi30k is, if not where the teacher trained
    chunk_sentences: int = 2000  # sentences decoded and saved at a time
    # best: the teacher's best translation; closest: of its nbest, the one nearest the reference
    pick: Pick = Pick.best


@dataclass
class BacktranslateConfig(InferenceConfig):
    """`seq2seq-backtranslate`: a run of the reverse direction translates monolingual text of
    its source language into synthetic sources (back-translation), mixed with real pairs."""

    # the folder of the synthetic and mixed corpora (and chunks, for resuming)
    out: str = needed("<a folder for the synthetic corpus>")
    # monolingual text in the run's source language, one sentence a line
    mono: str = needed("<a file of text, one sentence a line>")
    # real pairs of the direction to train, <prefix>.<lang>[.gz]: mixed_<ratio>.* are written
    parallel: Optional[str] = None
    ratios: list[float] = field(default_factory=lambda: [1.0])  # synthetic pairs per real pair
    tag: Optional[str] = None  # put before every synthetic source, e.g. "@bt@" (tagged BT)
    chunk_sentences: int = 2000  # sentences decoded and saved at a time


@dataclass
class ExportConfig(CheckpointConfig):
    """`seq2seq-export`: a release folder (safetensors weights, tokenizers, config, model card)."""

    run_dir: str = needed("<a training run folder>")
    out: str = needed("<a new folder for the release>")
    # ONNX graphs of the encoder and one decoder step (fp32 and int8) in onnx/, for runtimes
    # without torch (lite/, the browser, seq2seq-serve backend=onnx): pip install -e '.[onnx]'
    onnx: bool = False
    # with onnx=true: browser/, a static folder that translates in the browser (needs npm)
    browser: bool = False


# each command's schema, by its primary config's name (configs/<name>.yaml)
SCHEMAS: dict[str, type] = {
    "config": Config,
    "evaluate": EvaluateConfig,
    "translate": TranslateConfig,
    "average": AverageConfig,
    "export": ExportConfig,
    "distill": DistillConfig,
    "backtranslate": BacktranslateConfig,
    "serve": ServeConfig,
    "align": AlignConfig,
    "score": ScoreConfig,
}


def register_command_configs() -> None:
    """Register each command's schema with Hydra's ConfigStore (configs/<command>.yaml use them
    as ``<command>_config``; training's is seq2seq.config's ``base_config``)."""
    cs = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        if schema is not Config:
            cs.store(name=f"{name}_config", node=schema)


def register_schemas() -> None:
    """Every schema a command composes, registered with Hydra; calling it again is harmless."""
    register_configs()
    register_command_configs()
