"""A trained model as ONNX graphs: the encoder and one decoder step
(`seq2seq.model.onnx_graphs`), in fp32 and with int8 weights, and ``graphs.json``, which says what
a runtime without torch needs: each graph's inputs and outputs, the special ids, and the search's
defaults.

torch's ONNX exporter (``torch.onnx.export``, the torch.export path) traces each graph once with
the batch and source length as dynamic axes; onnxruntime's dynamic quantization writes the int8
variant (weights int8, activations quantized per call).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import DecodeConfig
from seq2seq.errors import Seq2SeqError
from seq2seq.model.linear import pytorch_products
from seq2seq.model.onnx_graphs import EncoderGraph, StepGraph
from seq2seq.model.seq2seq import Seq2Seq
from seq2seq.storage.rundir import GRAPHS_FACTS
from seq2seq.vocab import BOS, EOS, PAD, UNK

log = logging.getLogger(__name__)
CHATTY_LOGGERS = ("onnxscript", "onnx_ir", "torch.onnx")  # quiet while graphs are written

FILES = {
    "fp32": {"encoder": "encoder.onnx", "step": "step.onnx"},
    "int8": {"encoder": "encoder.int8.onnx", "step": "step.int8.onnx"},
}
OPSET = 18
# the axis of each field that runs over the source positions (axis 0 is always the batch)
SOURCE_AXIS = {
    "src": 1,
    "keys": -2,
    "values": -2,
    "gates": -2,
    "mask": 1,
    "coverage": 1,
    "weights": -1,
}
# the sentences traced: two of them, of different lengths, so that padding is in the trace
SAMPLE = ((4, 5, 6, 7, 4, EOS), (5, 6, EOS))


def require_exporter() -> None:
    """One line naming the extra where the exporter's packages are missing."""
    for package in ("onnx", "onnxscript", "onnxruntime"):
        try:
            __import__(package)
        except ImportError:
            raise Seq2SeqError(
                f"onnx=true needs the {package} package: pip install -e '.[onnx]' in the "
                "seq2seq checkout"
            ) from None


def _axes(name: str, x: torch.Tensor, batch: Any, source: Any) -> dict[int, Any]:
    """The dynamic axes of one traced tensor: the batch, and the source where it has one."""
    if x.dim() == 0:  # the target position: one for the whole batch
        return {}
    axes = {0: batch}
    if name in SOURCE_AXIS:
        axes[SOURCE_AXIS[name] % x.dim()] = source
    return axes


def _export(graph: torch.nn.Module, args: tuple, names: tuple, outputs: tuple, path: Path) -> None:
    """One graph to ``path``, its exporter's chatter kept out of the command's output."""
    batch, source = torch.export.Dim("batch"), torch.export.Dim("source")
    head, *rest = (_axes(n, x, batch, source) for n, x in zip(names, args, strict=True))
    shapes = (head,) if not rest else (head, tuple(rest))
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with quiet[0], quiet[1], _quiet_loggers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and axis-naming notes
        torch.onnx.export(
            graph,
            args,
            str(path),
            input_names=list(names),
            output_names=list(outputs),
            dynamic_shapes=shapes,
            opset_version=OPSET,
            external_data=False,
            dynamo=True,
        )


@contextlib.contextmanager
def _quiet_loggers() -> Iterator[None]:
    """The exporter's libraries log through Python's logging, past the redirected streams:
    onnxscript and onnx_ir an INFO line per optimisation pass, torch a warning per torchvision
    operator it skips. Only their errors get through while a graph is written."""
    loggers = [logging.getLogger(name) for name in CHATTY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _name_axes(path: Path) -> None:
    """Declare the batch and source axes of the graph's outputs by name, and drop the shapes
    recorded for the tensors inside: the exporter leaves some at the traced sizes, which
    onnxruntime then warns about at every call."""
    import onnx

    graph = onnx.load(str(path))
    del graph.graph.value_info[:]  # the intermediate shapes, some at the traced sizes too
    for output in graph.graph.output:
        dims = output.type.tensor_type.shape.dim
        field = output.name.removeprefix("next_")
        if not dims:
            continue
        dims[0].dim_param = "batch"
        if field in SOURCE_AXIS:
            dims[SOURCE_AXIS[field] % len(dims)].dim_param = "source"
    onnx.save(graph, str(path))


def _quantize(source: Path, target: Path) -> None:
    """int8 weights for the matrix products and the GRUs' gates (onnxruntime's dynamic
    quantization); activations stay fp32 between the quantized products."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # its INFO lines name every tensor it leaves in fp32, and a warning (on the root logger)
    # advises pre-processing meant for image models; the caller's own setting comes back after
    previous = logging.root.manager.disable
    logging.disable(max(previous, logging.WARNING))
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    finally:
        logging.disable(previous)


def export_graphs(model: Seq2Seq, folder: Path, search: DecodeConfig, facts: dict) -> list[Path]:
    """Write the fp32 and int8 graphs of ``model`` (on the host, eval mode) and graphs.json into
    ``folder``; check each graph (``onnx.checker``); return the files written."""
    require_exporter()
    import onnx

    log.info(
        "writing the ONNX graphs of %s (encoder, decoder step; fp32, int8)", facts.get("attention")
    )
    folder.mkdir(parents=True, exist_ok=True)
    longest = max(map(len, SAMPLE))
    src = torch.tensor([list(s) + [PAD] * (longest - len(s)) for s in SAMPLE])
    encoder, step = EncoderGraph(model).eval(), StepGraph(model).eval()
    names = encoder.names  # which fields this model's graphs have (traced once per graph)
    with torch.no_grad(), pytorch_products():
        fields = dict(zip(names.encoder_outputs, encoder(src), strict=True))
        prev = torch.full((len(SAMPLE),), BOS)
        step_args = (prev, *(fields[n] for n in names.state + names.memory))
        paths = {kind: {g: folder / f for g, f in files.items()} for kind, files in FILES.items()}
        _export(encoder, (src,), ("src",), names.encoder_outputs, paths["fp32"]["encoder"])
        _export(step, step_args, names.step_inputs, names.step_outputs, paths["fp32"]["step"])
    for graph in paths["fp32"].values():
        _name_axes(graph)
    for graph in ("encoder", "step"):
        onnx.checker.check_model(str(paths["fp32"][graph]), full_check=True)
        _quantize(paths["fp32"][graph], paths["int8"][graph])
        onnx.checker.check_model(str(paths["int8"][graph]), full_check=True)
    spec = {
        "opset": OPSET,
        "files": FILES,
        "encoder": {"inputs": ["src"], "outputs": list(names.encoder_outputs)},
        "step": {"inputs": list(names.step_inputs), "outputs": list(names.step_outputs)},
        "state": list(names.state),
        "memory": list(names.memory),
        "heads": model.decoder.heads,
        "ids": {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS},
        "search": asdict(search),
        **facts,
    }
    (folder / GRAPHS_FACTS).write_text(json.dumps(spec, indent=1, ensure_ascii=False))
    log.info("wrote the ONNX graphs (fp32, int8) of %s into %s", facts.get("attention"), folder)
    return [folder / GRAPHS_FACTS, *(p for kind in paths.values() for p in kind.values())]
