"""A release folder of seq2seq read without torch: its manifest checked, its two ONNX graphs
(``onnx/graphs.json`` names their inputs and outputs) in onnxruntime, its sentencepiece models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from seq2seq_lite.rules import damage

MANIFEST = "manifest.json"
GRAPHS = Path("onnx") / "graphs.json"


class ReleaseError(Exception):
    """A release that cannot be used, in one line."""


def check_manifest(folder: Path) -> None:
    """Every file the manifest lists is there with its size and SHA-256 (a damaged or tampered
    release is refused, by the rule seq2seq's own loaders follow: rules.damage)."""
    if not folder.is_dir():
        raise ReleaseError(
            f"{folder} does not exist" if not folder.exists() else f"{folder} is not a folder"
        )
    if not (folder / MANIFEST).is_file():
        raise ReleaseError(f"{folder} has no {MANIFEST}: not a release folder")
    if problems := damage(folder / MANIFEST):
        raise ReleaseError(f"{folder} is damaged: {'; '.join(problems)} (see {MANIFEST})")


class Graphs:
    """The encoder and step graphs as two calls on numpy arrays, fields by name."""

    def __init__(self, folder: Path, spec: dict, variant: str, threads: int | None) -> None:
        import onnxruntime as ort  # here: seq2seq imports this package without onnxruntime

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        files, base = spec["files"][variant], folder / GRAPHS.parent  # names beside graphs.json
        self.encoder = ort.InferenceSession(str(base / files["encoder"]), options)
        self.decoder = ort.InferenceSession(str(base / files["step"]), options)
        self.spec, self.ids = spec, spec["ids"]
        self.memory, self.state = spec["memory"], spec["state"]

    def encode(self, src: np.ndarray) -> tuple[dict, dict]:
        """src [B, S] int64 (PAD after each sentence) -> (memory fields, first state fields)."""
        out = self.encoder.run(None, {"src": src})
        fields = dict(zip(self.spec["encoder"]["outputs"], out, strict=True))
        return {n: fields[n] for n in self.memory}, {n: fields[n] for n in self.state}

    def step(self, prev: np.ndarray, state: dict, memory: dict) -> tuple:
        """One decoder step -> (log_probs [B, V], next state fields, weights [B, heads, S])."""
        feed = {"prev_tokens": prev, **state, **memory}
        out = self.decoder.run(None, feed)
        return out[0], dict(zip(self.state, out[1:-1], strict=True)), out[-1]


def read_spec(folder: Path) -> dict:
    """``onnx/graphs.json`` of a release exported with ``onnx=true``."""
    path = folder / GRAPHS
    if not path.is_file():
        raise ReleaseError(
            f"{folder} has no {GRAPHS.as_posix()}: export it with "
            "seq2seq-export run_dir=<run> out=<release> onnx=true"
        )
    return json.loads(path.read_text())
