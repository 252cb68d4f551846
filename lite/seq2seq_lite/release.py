"""A release folder of seq2seq read without torch: its manifest checked, its two ONNX graphs
(``onnx/graphs.json`` names their inputs and outputs) in onnxruntime, its sentencepiece models."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

MANIFEST = "manifest.json"
GRAPHS = Path("onnx") / "graphs.json"


class ReleaseError(Exception):
    """A release that cannot be used, in one line."""


def check_manifest(folder: Path) -> None:
    """Every file the manifest lists is there with its size and SHA-256 (a damaged or tampered
    release is refused, as seq2seq's own loaders refuse it)."""
    try:
        expected = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise ReleaseError(f"{folder} has no readable {MANIFEST} ({e})") from None
    for name, facts in expected.items():
        path = folder / name
        if not path.is_file():
            raise ReleaseError(f"{folder} is damaged: {name} is missing")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if path.stat().st_size != facts.get("size") or digest != facts.get("sha256"):
            raise ReleaseError(f"{folder} is damaged: {name} does not match {MANIFEST}")


class Graphs:
    """The encoder and step graphs as two calls on numpy arrays, fields by name."""

    def __init__(self, folder: Path, spec: dict, variant: str, threads: int | None) -> None:
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
