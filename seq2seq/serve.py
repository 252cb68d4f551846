"""`seq2seq-serve`: translations over HTTP, batched across requests, and a web page.

The application (`seq2seq.serving.app`) answers ``POST /translate``, ``GET /health``,
``/ready``, ``/metrics``, ``/model`` and ``/`` (the page); every limit on user input answers 4xx
with ``{"error": ...}``, a full queue or a passed deadline 503 with ``Retry-After``. SIGTERM
stops accepting connections and finishes the requests already in (uvicorn's graceful shutdown).
"""

from __future__ import annotations

import logging
import sys

import hydra
import uvicorn

from seq2seq.config import ServeConfig
from seq2seq.decoding.inference import open_model
from seq2seq.errors import Seq2SeqError
from seq2seq.serving.app import create_app

log = logging.getLogger("seq2seq.serve")


def serve(cfg: ServeConfig) -> None:
    """Load the run or release and serve it until SIGINT/SIGTERM."""
    engine, run = open_model(cfg, "serve")
    log.info("serving %s (step %d) on %s at http://%s:%d/ (queue: %d sentences, deadline %g s)",
             run.run_dir, run.step, engine.describe(), cfg.host, cfg.port,
             cfg.max_queue_sentences, cfg.request_timeout_s)  # fmt: skip
    app = create_app(run, engine, cfg)
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning",
                timeout_graceful_shutdown=30)  # fmt: skip


@hydra.main(version_base=None, config_path="pkg://seq2seq.configs", config_name="serve")
def main(cfg: ServeConfig) -> None:
    """Serve; user errors exit 1 with one clear message."""
    try:
        serve(cfg)
    except Seq2SeqError as e:
        log.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
