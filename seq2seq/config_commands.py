"""The typed configs of the commands that load a trained run (evaluate, translate, serve,
align, average, distill, back-translate, export), and the Hydra entry every command starts by:
it registers these and the training schema of seq2seq.config when the command runs, so that
importing the library registers nothing.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from seq2seq.commands.keys import check_command_line
from seq2seq.config import DecodeConfig, register_configs
from seq2seq.config_choices import (
    AlignMethod,
    Backend,
    Int8Engine,
    Pick,
    Precision,
    Products,
    Selection,
    Symmetrize,
)
from seq2seq.errors import Seq2SeqError

CONFIGS = "pkg://seq2seq.configs"  # the top-level configs/, installed inside the package


@dataclass
class InferenceConfig(DecodeConfig):
    """What every command that loads a trained run shares: which run, which checkpoint, where.

    The search keys (``beam_size``, ``alpha``, ``nbest``, ...) are inherited from DecodeConfig, so
    they are typed at the top level: ``seq2seq-evaluate run_dir=runs/x beam_size=1``.
    """

    run_dir: str = MISSING  # a training run folder
    ensemble: list[str] = field(default_factory=list)  # more run folders, decoding with run_dir
    checkpoint: str = "best"  # "best", "last", "averaged", or a path to a checkpoint file
    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:N or mps
    precision: Precision = Precision.fp32  # autocast while decoding, as in training
    products: Products = Products.auto  # fp32 products on the CPU
    int8_engine: Int8Engine = Int8Engine.auto  # quantized engine under precision=int8
    compile: bool = False  # torch.compile the decoder's search step


@dataclass
class EvaluateConfig(InferenceConfig):
    """`seq2seq-evaluate`: decode a split of the run's corpus (or two files) and score it."""

    split: str = "test"  # a split name of the run's corpus, or train/valid/test = the run's own
    data_source: Optional[str] = None  # where Multi30k is, for split= (default: data.source's)
    source: Optional[str] = None  # deprecated spelling of data_source (one release)
    input: Optional[str] = None  # source file to translate instead of a split (needs reference)
    reference: Optional[str] = None  # its reference translations, one per line
    bleu_tokenize: Optional[str] = None  # sacreBLEU's tokenizer; None: the run's (by language)
    log_attention: int = 0  # heatmaps of the first K sentences into the run's TensorBoard
    out: Optional[str] = None  # folder of the outputs and events; None: the run's eval/


@dataclass
class TranslateConfig(InferenceConfig):
    """`seq2seq-translate`: a prompt on a terminal, or one translation per line of piped input."""

    show_alignment: bool = False  # draw which source subwords each target subword attended to


@dataclass
class AverageConfig:
    """`seq2seq-average`: one checkpoint from the mean of a run's kept checkpoints."""

    run_dir: str = MISSING  # a training run folder trained with train.keep_checkpoints=N
    n: int = 5  # how many kept checkpoints to average
    select: Selection = Selection.last  # the n latest validations, or the n best by BLEU
    out: Optional[str] = None  # default: <run_dir>/averaged.pt (evaluate with checkpoint=averaged)


@dataclass
class ServeConfig(InferenceConfig):
    """`seq2seq-serve`: translations over HTTP (JSON API and a web page), batched across
    requests. The search keys are each request's defaults; a request may change beam_size and
    nbest within the limits below."""

    host: str = "127.0.0.1"  # 0.0.0.0 to listen on every interface
    port: int = 8000
    api_key: Optional[str] = None  # when set, /translate, /model(s) need header X-API-Key
    max_body_bytes: int = 65536  # request body
    max_sentences: int = 64  # per request
    max_chars: int = 1000  # per sentence
    max_beam: int = 10  # largest beam_size a request may ask for
    batch_sentences: int = 64  # sentences of concurrent requests decoded together
    batch_wait_ms: float = 5.0  # how long a request may wait for others to share its batch
    max_queue_sentences: int = 256  # sentences waiting to be decoded; past it, 503 + Retry-After
    request_timeout_s: float = 30.0  # a request not decoded by then is answered 503, undecoded
    # more run or release folders served beside run_dir, each under its own name (its folder's
    # name; requests pick one with "model"); the page shows every model's answer side by side.
    # Not "compare": that name is the Hydra group of the attention comparison's rows
    compare_with: list[str] = field(default_factory=list)
    # onnx: release folders' graphs on onnxruntime (precision=fp32, or int8 for the int8 graphs)
    backend: Backend = Backend.torch


@dataclass
class AlignConfig:
    """`seq2seq-align`: word links of given sentence pairs, from the attention of a run reading
    them (forced decoding), optionally with a run of the reverse direction, scored against gold."""

    run_dir: str = MISSING  # a run (or release) translating the input's source into its target
    checkpoint: str = "best"
    input: Optional[str] = None  # "source ||| target" lines, words separated by spaces
    src_file: Optional[str] = None  # or two parallel files, one sentence per line
    tgt_file: Optional[str] = None
    source: Optional[str] = None  # deprecated spellings of src_file and tgt_file (one release)
    target: Optional[str] = None
    swap: bool = False  # the input's sides are the other way round: run_dir reads its target
    output: Optional[str] = None  # Pharaoh links "i-j" (0-based), a line per pair; None: stdout
    weights: Optional[str] = None  # the word attention of each pair as JSON lines
    method: AlignMethod = AlignMethod.argmax
    threshold: float = 0.3  # method=threshold: the least weight of a link
    shift: int = 0  # target word t takes the attention of step t + shift
    reverse_run_dir: Optional[str] = None  # a run of the other direction: both are symmetrised
    reverse_checkpoint: str = "best"
    reverse_shift: int = 0
    symmetrize: Symmetrize = Symmetrize.grow_diag_final
    gold: Optional[str] = None  # human links, "i-j" sure and "ipj" possible: prints AER
    gold_one_based: bool = True  # positions in gold count from 1 (the talp files do)
    batch_size: int = 64  # pairs read together
    device: str = "auto"
    precision: Precision = Precision.fp32
    products: Products = Products.auto


@dataclass
class DistillConfig(InferenceConfig):
    """`seq2seq-distill`: a teacher's beam output for every source of a split of its corpus
    (sequence-level knowledge distillation), written as a corpus for data=custom."""

    out: str = MISSING  # the folder of the distilled corpus (and its chunks, for resuming)
    split: str = "train"  # a split of the teacher's corpus
    data_source: Optional[str] = None  # where Multi30k is, if not where the teacher trained
    chunk_sentences: int = 2000  # sentences decoded and saved at a time
    # best: the teacher's best translation; closest: of its nbest, the one nearest the reference
    pick: Pick = Pick.best


@dataclass
class BacktranslateConfig(InferenceConfig):
    """`seq2seq-backtranslate`: a run of the reverse direction translates monolingual text of
    its source language into synthetic sources (back-translation), mixed with real pairs."""

    out: str = MISSING  # the folder of the synthetic and mixed corpora (and chunks, for resuming)
    mono: str = MISSING  # monolingual text in the run's source language, one sentence a line
    # real pairs of the direction to train, <prefix>.<lang>[.gz]: mixed_<ratio>.* are written
    parallel: Optional[str] = None
    ratios: list[float] = field(default_factory=lambda: [1.0])  # synthetic pairs per real pair
    tag: Optional[str] = None  # put before every synthetic source, e.g. "@bt@" (tagged BT)
    chunk_sentences: int = 2000  # sentences decoded and saved at a time


@dataclass
class ExportConfig:
    """`seq2seq-export`: a release folder (safetensors weights, tokenizers, config, model card)."""

    run_dir: str = MISSING  # a training run folder
    out: str = MISSING  # the release folder to write (must not exist, or be empty)
    checkpoint: str = "best"  # "best", "last", "averaged", or a path to a checkpoint file
    # ONNX graphs of the encoder and one decoder step (fp32 and int8) in onnx/, for runtimes
    # without torch (lite/, the browser, seq2seq-serve backend=onnx): pip install 'seq2seq[onnx]'
    onnx: bool = False
    # with onnx=true: browser/, a static folder that translates in the browser (needs npm)
    browser: bool = False


def register_command_configs() -> None:
    """Register each command's schema with Hydra's ConfigStore (configs/<command>.yaml use them)."""
    cs = ConfigStore.instance()
    cs.store(name="evaluate_config", node=EvaluateConfig)
    cs.store(name="translate_config", node=TranslateConfig)
    cs.store(name="average_config", node=AverageConfig)
    cs.store(name="export_config", node=ExportConfig)
    cs.store(name="distill_config", node=DistillConfig)
    cs.store(name="backtranslate_config", node=BacktranslateConfig)
    cs.store(name="serve_config", node=ServeConfig)
    cs.store(name="align_config", node=AlignConfig)


def register_schemas() -> None:
    """Every schema a command composes, registered with Hydra; calling it again is harmless."""
    register_configs()
    register_command_configs()


def hydra_command(config_name: str) -> Callable[[Callable[[Any], None]], Callable[[], None]]:
    """``hydra.main`` of a command that reads ``configs/<config_name>.yaml`` (shipped inside the
    package), with the schemas registered when the command starts and its overrides checked
    against them first: an unknown key or a wrong type is one line, exit 1, before any work.
    ``-v`` (``--verbose``) is ``hydra.verbose=seq2seq``: the debug lines too."""

    def decorate(task: Callable[[Any], None]) -> Callable[[], None]:
        run = hydra.main(version_base=None, config_path=CONFIGS, config_name=config_name)(task)
        name = "seq2seq-train" if config_name == "config" else f"seq2seq-{config_name}"

        @functools.wraps(task)
        def command() -> None:
            register_schemas()
            verbose = "hydra.verbose=seq2seq"
            sys.argv[1:] = [verbose if a in ("-v", "--verbose") else a for a in sys.argv[1:]]
            try:
                check_command_line(config_name, sys.argv[1:])
            except Seq2SeqError as e:
                sys.exit(f"{name}: {e}")
            run()

        return command

    return decorate
