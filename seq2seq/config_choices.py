"""The config's closed choices, each an Enum that Hydra checks when a value is given: subword
model, schedule, matrix-product path, int8 engine, serving backend, precision, the metric of
the best checkpoint, checkpoint selection and alignment methods."""

from __future__ import annotations

from enum import Enum


class SubwordModel(str, Enum):
    unigram = "unigram"
    bpe = "bpe"


class ScheduleName(str, Enum):
    plateau = "plateau"  # reduce on a plateau of the validation score (train.best_metric)
    inverse_sqrt = "inverse_sqrt"  # lr * sqrt(warmup / update) after the warm-up


class Products(str, Enum):
    """fp32 matrix products on the CPU: oneDNN's or PyTorch's BLAS (which is faster depends on
    the CPU), or ``auto``: the faster of the two, timed on the model's shapes at start-up."""

    auto = "auto"
    onednn = "onednn"
    pytorch = "pytorch"


class Int8Engine(str, Enum):
    """PyTorch's quantized engine for ``precision=int8`` on the CPU, or ``auto``: the fastest
    on a decoding probe of the model, timed at load (which one is fastest depends on the CPU)."""

    auto = "auto"
    x86 = "x86"
    fbgemm = "fbgemm"
    onednn = "onednn"


class Backend(str, Enum):
    """What runs the served models: PyTorch on the run's weights, or onnxruntime on a release's
    ONNX graphs (seq2seq-export onnx=true) through the torch-free translator in ``lite/``."""

    torch = "torch"
    onnx = "onnx"


class Precision(str, Enum):
    auto = "auto"  # training: bf16 where this CPU trains the model faster in it, else fp32
    fp32 = "fp32"
    bf16 = "bf16"  # autocast; CUDA, or CPUs with native bf16
    fp16 = "fp16"  # autocast with loss scaling; CUDA only
    int8 = "int8"  # inference on the CPU: dynamic quantization (evaluate, translate, serve)


class BestMetric(str, Enum):
    """The validation score that chooses best.pt, stops training early, drives the plateau
    schedule and ranks kept checkpoints (as Joey NMT's early_stopping_metric and fairseq's
    --best-checkpoint-metric)."""

    bleu = "bleu"
    chrf = "chrf"
    loss = "loss"  # validation cross-entropy: lower is better

    @property
    def higher_is_better(self) -> bool:
        return self is not BestMetric.loss


class Selection(str, Enum):
    last = "last"
    best = "best"


class Pick(str, Enum):
    """Which of the teacher's hypotheses a distilled corpus keeps for each source."""

    best = "best"  # the search's best: sequence-level distillation (Kim & Rush 2016)
    closest = "closest"  # of the nbest, the nearest to the reference by sentence BLEU (Seq-Inter)


class AlignMethod(str, Enum):
    """How a target word's attention over the source words becomes links."""

    argmax = "argmax"  # the source word with the most weight (none where that is the EOS)
    threshold = "threshold"  # every source word with at least `threshold` of the weight


class Symmetrize(str, Enum):
    """How the links of two directions are combined (Koehn et al. 2003)."""

    intersection = "intersection"
    union = "union"
    grow_diag_final = "grow_diag_final"
    grow_diag_final_and = "grow_diag_final_and"
