"""`seq2seq-serve`: translations over HTTP, batched across requests, and a web page.

The application (`seq2seq.serving.app`) answers ``POST /translate``, ``GET /health``,
``/ready``, ``/metrics``, ``/model``, ``/models`` and ``/`` (the page); ``compare_with=``
serves more run or release folders beside run_dir, each under its folder's name, decoded by the
same thread, and the page shows every model's answer side by side. Every limit on user input
answers 4xx with ``{"error": ...}``, a full queue or a passed deadline 503 with ``Retry-After``.
SIGTERM stops accepting connections and finishes the requests already in (uvicorn's graceful
shutdown).
"""

from __future__ import annotations

import logging
import signal
import socket
import threading

import uvicorn

from seq2seq.commands.configs import ServeConfig
from seq2seq.commands.wrapper import hydra_command
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import inference_engine
from seq2seq.serving.app import create_app, read_served_glossary
from seq2seq.serving.backends import open_models
from seq2seq.serving.owner import MainThreadExecutor

log = logging.getLogger("seq2seq.serve")


def serve(cfg: ServeConfig) -> None:
    """Load the runs or releases and serve them until SIGINT/SIGTERM."""
    glossary = read_served_glossary(cfg)  # the user's files, before the port and the models
    sock = _bind(cfg.host, cfg.port)  # a taken port is refused before the models load
    try:
        where, models = open_models(cfg, lambda: inference_engine(cfg))  # process settings
    except BaseException:
        sock.close()
        raise
    folders = [cfg.run_dir, *cfg.compare_with]
    for model, folder in zip(models, folders, strict=True):
        log.info(
            "model %r: %s (%s attention, step %d)",
            model.name,
            folder,
            model.card["attention_label"],
            model.card["step"],
        )
    log.info(
        "serving on %s at http://%s:%d/ (queue: %d sentences, deadline %g s)",
        where,
        cfg.host,
        sock.getsockname()[1],
        cfg.max_queue_sentences,
        cfg.request_timeout_s,
    )
    if cfg.api_key is not None:
        log.info("api_key= is set: requests need header X-API-Key; the page at / asks for it")
    owner = MainThreadExecutor()
    app = create_app(models, cfg, owner, glossary)
    config = uvicorn.Config(
        app, host=cfg.host, port=cfg.port, log_level="warning", timeout_graceful_shutdown=30
    )
    server = uvicorn.Server(config)
    http = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="http")
    heard = _stop_on_signals(server)
    http.start()
    owner.run_until(http)  # this thread decodes until the server has shut down
    http.join()
    if not server.started:
        raise Seq2SeqError(f"could not serve on {cfg.host}:{cfg.port} (see the line above)")
    if heard:  # a server's stop on request: exit status 0, as uvicorn's and gunicorn's
        log.info("stopped by %s: the requests already in were answered", heard[0].name)


def _bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound (uvicorn listens on it), or the reason it cannot be."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise Seq2SeqError(f"cannot serve on {host}:{port}: {e.strerror or e}") from e
    return sock


def _stop_on_signals(server: uvicorn.Server) -> list[signal.Signals]:
    """SIGTERM or Ctrl-C: stop accepting connections and finish the requests already in (a
    second Ctrl-C: at once), as uvicorn does when it runs on the main thread; the signals heard
    are listed in what it returns."""
    heard: list[signal.Signals] = []

    def stop(signum: int, frame: object) -> None:
        heard.append(signal.Signals(signum))
        if server.should_exit and signum == signal.SIGINT:
            server.force_exit = True
        server.should_exit = True

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    return heard


main = hydra_command("serve")(serve)  # the command: errors and output in wrapper.py

if __name__ == "__main__":
    main()
