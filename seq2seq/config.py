"""Typed configuration of training (the data, model and train groups) and of decoding a trained
run (InferenceConfig): where their defaults live; each command's own keys are in
commands/configs.py.

Each dataclass is registered in Hydra's ConfigStore when a command starts (register_configs), and
every override is looked up in the composed config first (commands/keys.py): a misspelled key or a
wrong type on the command line stops in one line before anything runs. YAML files under
``configs/`` only choose group options and override values (``experiment=smoke``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from seq2seq.config_choices import (
    BestMetric,
    Int8Engine,
    Precision,
    Products,
    ScheduleName,
    SubwordModel,
)
from seq2seq.model.config import ATTENTION_CONFIGS, ModelConfig

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"


def needed(hint: str) -> Any:
    """A key without a default: a command without it refuses to start, in one line that says
    ``key=<hint>`` (commands/rules.py)."""
    return field(default=MISSING, metadata={"give": hint})


@dataclass
class TokenizerConfig:
    """Sentencepiece subword models, trained once on the training split."""

    model_type: SubwordModel = SubwordModel.unigram
    vocab_size: int = 8000
    joint: bool = False  # one model shared by both languages
    # characters the model covers; None: 0.9995 for Chinese, Japanese, Korean, else 1.0
    character_coverage: Optional[float] = None
    # sentences sampled (seeded) to train each model: sentencepiece takes ~1.5 GB per million;
    # raise it for vocabularies of 32k pieces and more
    input_sentence_size: int = 300_000
    # words kept as one piece each, never split (a tag such as back-translation's @bt@)
    user_symbols: list[str] = field(default_factory=list)
    # a run or release folder whose two models to take instead of training them (a student
    # with its teacher's pieces, a model trained on another corpus with the same vocabulary);
    # taken as they are: the other data.tokenizer keys set otherwise are warned of as unused
    from_folder: Optional[str] = None


@dataclass
class DataConfig:
    """Fields shared by every corpus; ``kind`` picks the reader (the ``data`` group's option)."""

    kind: str = MISSING
    src_lang: str = "de"
    tgt_lang: str = "en"
    max_len: int = 100  # subword tokens per side; longer training pairs are dropped
    # subword regularisation: each training batch segmented anew by sampling (0: off; unigram:
    # smoothness, lower = more pieces, e.g. 0.2; bpe: BPE-dropout's probability, e.g. 0.1)
    sampling_alpha: float = 0.0
    train_limit: Optional[int] = None  # use only the first N training pairs (smoke tests)
    valid_limit: Optional[int] = None
    cache_dir: str = "data/cache"  # tokenizer models and encoded token ids, keyed by content
    workers: int = 0  # processes encoding the training split; 0: one per core this process has
    # sacreBLEU's tokenizer; None: zh, ja-mecab or ko-mecab for those targets, else 13a
    bleu_tokenize: Optional[str] = None
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)


@dataclass
class Multi30kConfig(DataConfig):
    """Multi30k task 1; ``train``/``valid``/``test`` are official split names."""

    kind: str = "multi30k"
    train: str = "train"
    valid: str = "val"
    test: Optional[str] = "test_2016_flickr"
    source: str = MULTI30K_URL  # base URL or a local directory with the same file names
    root: str = "data/multi30k"  # download cache


@dataclass
class CustomDataConfig(DataConfig):
    """User files; ``train``/``valid``/``test`` are prefixes: ``<prefix>.<lang>[.gz]``."""

    kind: str = "custom"
    train: str = needed("<prefix: files <prefix>.<src_lang> and <prefix>.<tgt_lang>>")
    valid: str = needed("<prefix of the validation files>")
    test: Optional[str] = None
    # the command that writes these files (a recipe whose data a script makes): a missing split's
    # one-line error ends with it where the split's folder is one it names
    prepare: Optional[str] = None


@dataclass
class CarvedSplits:
    """Where ``valid``/``test`` are null, that many pairs are carved out of the training data
    (seeded, whole groups of one source sentence, so no source sentence is in two splits)."""

    valid_size: int = 2000
    test_size: int = 2000  # 0: no test split
    split_seed: int = 1


@dataclass
class TsvDataConfig(CarvedSplits, DataConfig):
    """One tab-separated file (plain, .gz, or a .zip holding one text file besides notes)."""

    kind: str = "tsv"
    file: str = needed("<a tab-separated file: .tsv, .gz or .zip>")
    # the language of each column, in order, e.g. [en, de]
    columns: list[str] = needed("[<language of column 1>,<of column 2>,...]")
    valid: Optional[str] = None  # a tab-separated file of its own (same columns), or carved
    test: Optional[str] = None
    sha256: Optional[str] = None  # refuse any other file than this one (recipes pin their data)
    # the command that puts data.file where the recipe reads it: its refusal ends with it (as
    # custom files' data.prepare)
    prepare: Optional[str] = None


@dataclass
class HfDataConfig(CarvedSplits, DataConfig):
    """A Hugging Face dataset: ``load_dataset(path, name)``, or ``load_from_disk(path)``."""

    kind: str = "hf"
    # a dataset on the hub (e.g. wmt14), or a save_to_disk folder
    path: str = needed("<a dataset on the hub, or a save_to_disk folder>")
    name: Optional[str] = None  # the dataset's configuration, e.g. de-en
    column: str = "translation"  # {src_lang: ..., tgt_lang: ...} per row
    src_column: Optional[str] = None  # or two string columns
    tgt_column: Optional[str] = None
    train: str = "train"
    valid: Optional[str] = "validation"  # a split of the dataset, or null: carved out of train
    test: Optional[str] = "test"


@dataclass
class SchedulerConfig:
    """Learning rate: a linear warm-up over ``warmup`` updates (0: none), then reduce-on-plateau
    of validation BLEU or inverse square-root decay."""

    name: ScheduleName = ScheduleName.plateau
    warmup: int = 0  # updates; inverse_sqrt needs some
    factor: float = 0.5  # plateau: the rate is multiplied by this
    patience: int = 2  # plateau: validations without improvement before the rate is cut
    min_lr: float = 1e-5  # plateau


@dataclass
class TrainConfig:
    seed: int = 1234
    max_epochs: int = 50
    max_steps: Optional[int] = None  # stop after this many updates (benchmarks, smoke tests)
    max_minutes: Optional[float] = None  # stop (validated) after this much training time
    batch_tokens: int = 2000  # budget per batch and process: sentences x longest side, padded
    accumulate: int = 1  # batches per update; the update sees batch_tokens x this x processes
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    clip_grad_norm: float = 1.0
    label_smoothing: float = 0.1
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    validate_every: Optional[int] = None  # updates between validations; None = every epoch
    best_metric: BestMetric = BestMetric.bleu  # what chooses best.pt, stopping and the plateau
    patience: int = 5  # validations without a better best_metric before early stopping
    keep_checkpoints: int = 0  # keep the weights of the N latest and N best validations
    val_beam_size: int = 1  # validation BLEU decodes greedily unless raised
    val_batch_size: int = 64  # sentences per validation decoding batch; GPUs take more
    resume: bool = False  # continue from last.pt in the run folder
    # a new run from a trained run or release folder: its model config, tokenizers and weights,
    # with a fresh optimizer, schedule and early stopping
    init_from: Optional[str] = None
    init_checkpoint: str = "best"  # with init_from: "best", "last", "averaged" or a file's path
    init_optimizer: bool = False  # with init_from: its last.pt's optimizer and learning rate
    # fixed-shape updates replayed from CUDA graphs (docs/gpu.md): auto (where CUDA is and the
    # update allows), true or false; config.yaml records what ran
    cuda_graphs: str = "auto"
    threads: int = 0  # torch threads; 0 = $OMP_NUM_THREADS, else this process's share of cores
    keep_freed_memory: bool = True  # glibc keeps freed blocks for the next batch (faster steps)
    log_every: int = 50  # updates between training-loss scalars
    # guided alignment: a statistical aligner's word links of the training lines (Pharaoh, one
    # line per training line; scripts/statistical_align.py --train-links) pull the attention
    # toward them, with this weight on the attention's cross-entropy (per guided target piece)
    guided_alignment: Optional[str] = None
    guided_weight: float = 0.5
    # an attention with coverage (model.attention.coverage=true): the weight of See et al.'s
    # coverage loss, sum over steps and source positions of min(weight, coverage so far); 0: the
    # coverage vector in the score alone (docs/attention.md says when the loss helps)
    coverage_weight: float = 0.0


@dataclass
class DecodeConfig:
    """Search settings shared by validation, evaluation and translation."""

    beam_size: int = 5
    alpha: float = 0.6  # GNMT length penalty ((5 + len) / 6) ** alpha
    nbest: int = 1
    max_len_a: float = 1.5  # hypotheses stop at a * source_length + b tokens
    max_len_b: int = 5
    # beam search: Wu et al.'s coverage penalty beta x sum_j log(min(attention on j, 1)) added
    # to each finished hypothesis's score (0: none); greedy search has nothing to rerank
    coverage_penalty: float = 0.0
    no_repeat_ngram: int = 0  # no n-gram of target pieces twice in a hypothesis (0: off)
    min_len_a: float = 0.0  # EOS banned before a * source_length + b tokens (capped by max_len)
    min_len_b: int = 0
    batch_size: int = 64  # sentences decoded together
    max_source_len: int = 1000  # subwords per input line at most: longer is refused, never cut
    # sampling instead of search: nbest translations drawn per sentence from the model's
    # distribution at this temperature, among the top_k most probable (0: all) and the top_p of
    # the probability mass (1: all); the same seed and input draw the same translations
    sampling: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0


@dataclass
class CheckpointConfig:
    """A trained run and which of its checkpoints: what a command reads its weights from."""

    run_dir: str = needed("<a run or release folder>")
    checkpoint: str = "best"  # "best", "last", "averaged", or a path to a checkpoint file


@dataclass
class LoadConfig(CheckpointConfig):
    """A run's checkpoint loaded to search with, and where it runs."""

    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:N or mps
    precision: Precision = Precision.fp32  # autocast while decoding, as in training
    products: Products = Products.auto  # fp32 products on the CPU
    int8_engine: Int8Engine = Int8Engine.auto  # quantized engine under precision=int8


@dataclass
class InferenceConfig(DecodeConfig, LoadConfig):
    """What every command that loads a trained run and searches with it shares.

    The search keys (``beam_size``, ``alpha``, ``nbest``, ...) are inherited from DecodeConfig, so
    they are typed at the top level: ``seq2seq-evaluate run_dir=runs/x beam_size=1``.
    """

    ensemble: list[str] = field(default_factory=list)  # more run folders, decoding with run_dir
    compile: bool = False  # torch.compile the decoder's search step


@dataclass
class LogConfig:
    attention_samples: int = 4  # fixed validation sentences whose heatmaps are logged
    progress: bool = True  # tqdm progress bar
    # word alignment at every validation: "source ||| target" pairs and their gold links
    # ("i-j" sure, "ipj" possible, 1-based) -> valid/aer, valid/alignment_precision and _recall
    alignment_pairs: Optional[str] = None
    alignment_links: Optional[str] = None


@dataclass
class Config:
    # a decoding command's search keys, as users of other tools give them to training
    ELSEWHERE: ClassVar[dict[str, str]] = dict.fromkeys(
        ("beam", "beam_size", "beam-size", "nbest", "n_best", "alpha", "length_penalty"),
        "validation searches with train.val_beam_size=... (1, greedy, by default); a trained "
        "run's search is set by seq2seq-evaluate or seq2seq-translate (beam_size=, nbest=, alpha=)",
    )

    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:N or mps
    # the same key as the other commands'; auto is timed at start-up, a resumed run keeps it
    precision: Precision = Precision.auto
    products: Products = Products.auto  # fp32 products on the CPU; a resumed run keeps its own
    data: DataConfig = MISSING
    model: ModelConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)
    # the libraries a run trained with, recorded by training with its concrete choices
    versions: dict[str, str] = field(default_factory=dict)


def register_configs() -> None:
    """Register the schema and every group option with Hydra's ConfigStore."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="data", name="multi30k", node=Multi30kConfig)
    cs.store(group="data", name="custom", node=CustomDataConfig)
    cs.store(group="data", name="tsv", node=TsvDataConfig)
    cs.store(group="data", name="hf", node=HfDataConfig)
    cs.store(group="model", name="default", node=ModelConfig)
    for node in ATTENTION_CONFIGS.values():
        cs.store(group="model/attention", name=node.name, node=node)
    # Sweep folders are named after the overrides; "/" (model/attention=luong, a path) would nest
    # folders, so configs/config.yaml passes the name through this.
    if not OmegaConf.has_resolver("path_safe"):
        OmegaConf.register_new_resolver("path_safe", lambda text: str(text).replace("/", "."))
