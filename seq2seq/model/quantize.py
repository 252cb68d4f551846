"""int8 inference on the CPU: PyTorch's dynamic quantization (``quantize_dynamic``) of the
model's linear layers and the encoder's GRU: weights in int8 once, at load; activations
quantized per product as they come.

The decoder's GRU stays fp32: its recurrence calls the ``nn.GRU`` parameters directly
(`seq2seq.model.recurrence`), which a quantized GRU module does not have.

PyTorch has several quantized engines for x86 (fbgemm; oneDNN, which reaches Intel's AMX int8
units; ``x86``, which picks between the two per product); the weights are packed for the engine
in force, which the runtime chooses (`seq2seq.runtime.kernels`).
"""

from __future__ import annotations

import warnings

from torch import nn
from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

from seq2seq.model.linear import Linear


def quantize_int8(model: nn.Module) -> nn.Module:
    """``model`` (on the CPU, for inference) with its linear layers and the encoders' GRUs in
    int8, converted in place; embeddings, attention scores and softmax stay fp32."""
    _plain_linears(model)  # the quantized Linear converts nn.Linear only, not a subclass
    with warnings.catch_warnings():  # torch announces the move of quantization to torchao
        warnings.filterwarnings("ignore", message=".*quantiz.* deprecated")
        quantize_dynamic(model, {nn.Linear: default_dynamic_qconfig}, inplace=True)
        for name, module in model.named_modules():
            if name.split(".")[-1] == "encoder":  # the model's, or each ensemble member's
                quantize_dynamic(module, {nn.GRU: default_dynamic_qconfig}, inplace=True)
    return model


def _plain_linears(model: nn.Module) -> None:
    """Each ``Linear`` module replaced by an ``nn.Linear`` holding the same parameters."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is Linear:
                plain = nn.Linear(child.in_features, child.out_features, child.bias is not None)
                plain.weight, plain.bias = child.weight, child.bias
                setattr(parent, name, plain)
