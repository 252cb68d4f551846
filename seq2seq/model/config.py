"""The model's hyperparameters as plain dataclasses: what building a model needs, and nothing
of the commands that train or run it (seq2seq.config composes these into the app's config)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from omegaconf import MISSING


class LuongScore(str, Enum):
    dot = "dot"
    general = "general"
    concat = "concat"


class Normalizer(str, Enum):
    """What turns scores into weights (seq2seq.model.normalizers)."""

    softmax = "softmax"
    sparsemax = "sparsemax"  # exact zeros; pip install -e '.[sparse]'
    entmax15 = "entmax15"  # 1.5-entmax: sparse, smoother than sparsemax; the same extra


@dataclass
class AttentionConfig:
    """Base of the attention group; ``name`` is the key of ``seq2seq.model.registry.ATTENTIONS``,
    ``input_feed`` (Luong flow) and ``conditional`` (Bahdanau's) belong to the decoder step, and
    every other field is a keyword argument of that attention class."""

    name: str = MISSING
    size: int = 512  # hidden size of the score function / projections
    normalizer: Normalizer = Normalizer.softmax  # scores -> weights


@dataclass
class BahdanauConfig(AttentionConfig):
    """Additive attention; previous decoder state queries, context enters the GRU input."""

    name: str = "bahdanau"
    # Nematus's conditional GRU (Sennrich et al. 2017): a GRU step over the previous word makes
    # the query, a second one takes the context; without it s_{t-1} queries, as in the paper
    conditional: bool = False
    # the sum of the earlier steps' weights enters the score (Tu et al. 2016, See et al. 2017);
    # training adds train.coverage_weight x sum_t sum_j min(a_tj, coverage_tj)
    coverage: bool = False


@dataclass
class LuongConfig(AttentionConfig):
    """Global attention; current decoder state queries, attentional vector feeds the output."""

    name: str = "luong"
    score: LuongScore = LuongScore.general
    # divide dot and general scores by sqrt(decoder size), as scaled dot-product attention does:
    # unscaled, they saturate the softmax at the start and learn far slower (docs/attention.md)
    scale: bool = True
    input_feed: bool = True  # feed the previous attentional vector to the GRU


@dataclass
class MultiHeadConfig(AttentionConfig):
    """Scaled dot-product attention with several heads; Luong data flow."""

    name: str = "multihead"
    heads: int = 8
    input_feed: bool = True  # feed the previous attentional vector to the GRU


@dataclass
class LocalMConfig(LuongConfig):
    """Luong's local-m: a window of 2 x window + 1 source positions centred on the target
    position t (monotonic alignment); the Luong score inside it."""

    name: str = "local_m"
    window: int = 10  # D, the window's half-width (Luong et al. 2015 use 10)


@dataclass
class LocalPConfig(LocalMConfig):
    """Luong's local-p: the window's centre p_t predicted from the decoder state, and the weights
    multiplied by a Gaussian around p_t of standard deviation window / 2."""

    name: str = "local_p"


# The attention variants: each name's schema. seq2seq.model.registry adds each one's modules.
ATTENTION_CONFIGS: dict[str, type[AttentionConfig]] = {
    c.name: c for c in (BahdanauConfig, LuongConfig, MultiHeadConfig, LocalMConfig, LocalPConfig)
}


@dataclass
class ModelConfig:
    emb_size: int = 256
    hidden_size: int = 512  # the decoder GRU, and each encoder direction unless encoder_size
    encoder_size: Optional[int] = None  # per encoder direction; None: hidden_size
    encoder_layers: int = 1
    # stacked decoder GRUs (OpenNMT-py's dec_layers, 2 by default there); attention and the
    # output read the top one, and model.dropout applies between layers
    decoder_layers: int = 1
    dropout: float = 0.3
    tie_embeddings: bool = False  # share target embedding and output projection
    attention: AttentionConfig = MISSING
