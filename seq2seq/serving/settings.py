"""The server's settings: the run to serve and its search defaults (InferenceConfig), where it
listens, and the limits that keep one client from starving the others. `seq2seq-serve`'s schema
is this class."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from seq2seq.config import InferenceConfig
from seq2seq.config_choices import Backend, Precision

ONNX_VARIANTS = {Precision.fp32: "fp32", Precision.int8: "int8"}  # precision= -> graphs served


@dataclass
class ServeConfig(InferenceConfig):
    """`seq2seq-serve`: translations over HTTP (JSON API and a web page), batched across
    requests. The search keys are each request's defaults; a request may change beam_size and
    nbest within the limits below."""

    # keys of the commands that read a file of lines, and what a request sends instead
    ELSEWHERE: ClassVar[dict[str, str]] = {
        "prefix": 'each request sends its own "prefixes"',
        "constraints": 'each request sends its own "constraints"',
    }

    host: str = "127.0.0.1"  # 0.0.0.0 to listen on every interface
    port: int = 8000
    api_key: str | None = None  # when set, /translate, /model(s) need header X-API-Key
    max_body_bytes: int = 65536  # request body
    max_sentences: int = 64  # per request
    max_chars: int = 1000  # per sentence (and per sentence's prefix, and its constraints)
    max_constraints: int = 20  # phrases a request may ask one sentence to hold
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
    # a glossary (source phrase<TAB>target phrase a line): its hits in each request's sentences
    # become constraints, listed in the answer (docs/decoding.md)
    terms: str | None = None
