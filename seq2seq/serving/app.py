"""The Starlette application: routes, the access log and request metrics, and the lifespan that
starts and stops the batcher.

- ``POST /translate``: sentences in, translations out, by the model the request names or the
  default (see `seq2seq.serving.api`); 503 with ``Retry-After`` when the queue is full or the
  request's deadline passes before decoding.
- ``GET /health`` (liveness), ``GET /ready`` (the queue has room), ``GET /metrics``
  (Prometheus), ``GET /model`` (the default model's card), ``GET /models`` (every model's card),
  ``GET /`` (the page: every model's answer side by side).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Executor
from importlib import resources
from typing import Any

from omegaconf import DictConfig, OmegaConf
from seq2seq_lite.rules import beam_problem
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seq2seq.data.steering import SteeringFiles
from seq2seq.decoding.inference import InputTooLong, encode_sources
from seq2seq.serving.api import (
    BadRequest,
    Query,
    answer,
    authorised,
    error,
    no_query,
    parse,
    read_body,
)
from seq2seq.serving.batcher import Batcher, Job, Overloaded
from seq2seq.serving.metrics import MISSING, Metrics
from seq2seq.serving.models import ServedModel
from seq2seq.serving.settings import ServeConfig

log = logging.getLogger("seq2seq.serve")
access_log = logging.getLogger("seq2seq.serve.access")
CLOSED = 499  # the client hung up before its answer (as nginx counts it)


class AccessLog:
    """ASGI middleware: one log line and the request metrics for every HTTP request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - start
            self.metrics.request(scope["path"], status, seconds)
            sentences = scope.get("state", {}).get("sentences", 0)
            access_log.info(
                "%s %s %d %d %s %.1f ms",
                scope["method"],
                scope["path"],
                status,
                sentences,
                "sentence" if sentences == 1 else "sentences",
                seconds * 1000,
            )


async def _hung_up(request: Request) -> None:
    """Return when the client disconnects (the body is read, so the next message says so)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _outcome(batcher: Batcher, job: Job, request: Request) -> Any:
    """The job's translations; raises TimeoutError when its deadline passed before decoding and
    ConnectionAbortedError when its client left first (either way it is dropped, undecoded)."""
    watch = asyncio.ensure_future(_hung_up(request))
    try:
        timeout = max(0.0, job.deadline - asyncio.get_running_loop().time())
        done, _ = await asyncio.wait(
            {job.answer, watch}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if job.answer in done:
            return job.answer.result()
        if watch in done:
            batcher.drop(job, "disconnected")
            raise ConnectionAbortedError
        if batcher.drop(job, "deadline"):
            raise TimeoutError
        return await job.answer  # being decoded: its answer is a batch away
    finally:
        watch.cancel()


class Service:
    """The routes' handlers, around the models (the first the default), one batcher and its
    metrics."""

    def __init__(
        self,
        models: Sequence[ServedModel],
        cfg: ServeConfig,
        executor: Executor,
        glossary: list[tuple[str, str]] | None = None,
    ) -> None:
        self.cfg, self.metrics = _plain(cfg), Metrics()
        self.models = {model.name: model for model in models}
        self.names = list(self.models)
        self.glossary = read_served_glossary(cfg) if glossary is None else glossary
        self.batcher = Batcher(self.models, self.cfg, self.metrics, executor)
        self.page = resources.files("seq2seq").joinpath("static/index.html").read_text("utf-8")
        for model in models:
            self.metrics.describe_model(model.name, {**model.card, "device": model.device})
        if not self.metrics.available:
            log.warning("%s", MISSING)

    async def translate(self, request: Request) -> Response:
        if not authorised(request, self.cfg.api_key):
            return error(401, "missing or wrong X-API-Key header")
        try:
            no_query(request.query_params)
            body = await read_body(request, self.cfg.max_body_bytes)
            query = parse(body, self.cfg, self.names, self.glossary)
            request.state.sentences = len(query.sentences)
            if problem := beam_problem(query.beam_size, self.models[query.model].tgt_vocab):
                raise BadRequest(422, f"model {query.model!r}: {problem}")
            self.batcher.check_room(len(query.sentences))  # a full queue refuses before tokenizing
            self._check_lengths(query)
            job = self.batcher.submit(
                query.sentences, query.model, query.beam_size, query.nbest, query.steer
            )
            translator, translations = await _outcome(self.batcher, job, request)
        except BadRequest as e:
            return error(e.status, str(e))
        except Overloaded as e:
            return error(503, str(e), {"Retry-After": str(e.retry_after)})
        except TimeoutError:
            limit = f"request_timeout_s={self.cfg.request_timeout_s:g}"
            return error(503, f"not decoded within {limit}; retry later", {"Retry-After": "1"})
        except ConnectionAbortedError:
            return error(CLOSED, "the client closed the connection")
        steer = query.steer or [None] * len(translations)
        items = [
            answer(translator, t, query.nbest, query.alignment, s)
            for t, s in zip(translations, steer, strict=True)
        ]
        return JSONResponse({"model": query.model, "translations": items})

    def _check_lengths(self, query: Query) -> None:
        """413 for a sentence over max_source_len subwords, before it joins a shared batch. On one
        thread: sentencepiece holds the GIL while its pool of threads waits for busy cores."""
        tokenizer = self.models[query.model].src_tok
        try:
            encode_sources(tokenizer, query.sentences, self.cfg.max_source_len, threads=1)
        except InputTooLong as e:
            raise BadRequest(413, e.describe(f"sentence {e.index}")) from None

    async def health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> JSONResponse:
        queued = self.batcher.queued
        if self.batcher.full():
            return JSONResponse({"status": "busy", "queued": queued}, status_code=503)
        return JSONResponse({"status": "ready", "queued": queued})

    async def metrics_text(self, request: Request) -> Response:
        if not self.metrics.available:
            return error(501, MISSING)
        return Response(self.metrics.text(), media_type=self.metrics.content_type)

    async def model(self, request: Request) -> JSONResponse:
        if not authorised(request, self.cfg.api_key):
            return error(401, "missing or wrong X-API-Key header")
        return JSONResponse(next(iter(self.models.values())).card)

    async def model_list(self, request: Request) -> JSONResponse:
        if not authorised(request, self.cfg.api_key):
            return error(401, "missing or wrong X-API-Key header")
        cards = [model.card for model in self.models.values()]
        return JSONResponse({"default": cards[0]["name"], "models": cards})

    async def index(self, request: Request) -> HTMLResponse:
        return HTMLResponse(self.page)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """The batcher runs while the application does; at shutdown its thread ends."""
        task = asyncio.create_task(self.batcher.run_forever())
        yield
        task.cancel()
        self.batcher.close()


def _plain(cfg: ServeConfig) -> ServeConfig:
    """The settings as a plain dataclass: the event loop reads the limits for every sentence of
    every request, and a DictConfig lookup is two orders of magnitude slower than an attribute."""
    return OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg  # type: ignore[return-value]


def read_served_glossary(cfg: ServeConfig) -> list[tuple[str, str]]:
    """The glossary of ``terms=`` ([]: none), read once; a bad one, or a phrase over
    ``max_chars`` characters (a request's limit), is one line."""
    files = SteeringFiles.read(None, None, cfg.terms, cfg.max_chars)
    return files.glossary if files is not None else []


def create_app(
    models: Sequence[ServedModel],
    cfg: ServeConfig,
    executor: Executor,
    glossary: list[tuple[str, str]] | None = None,
) -> Starlette:
    """The ASGI application serving ``models`` (the first the default), decoding through
    ``executor`` (one thread); ``glossary``: terms='s, read already (None: read here)."""
    service = Service(models, cfg, executor, glossary)
    routes = [
        Route("/", service.index),
        Route("/health", service.health),
        Route("/ready", service.ready),
        Route("/metrics", service.metrics_text),
        Route("/model", service.model),
        Route("/models", service.model_list),
        Route("/translate", service.translate, methods=["POST"]),
    ]
    handlers = {404: _not_found, 405: _not_allowed}
    app = Starlette(routes=routes, lifespan=service.lifespan, exception_handlers=handlers)
    app.add_middleware(AccessLog, metrics=service.metrics)
    return app


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    """404 as JSON, naming the routes there are."""
    return error(
        404,
        f"no {request.url.path} here: POST /translate, GET /health, GET /ready, "
        "GET /metrics, GET /model, GET /models",
    )


async def _not_allowed(request: Request, exc: Exception) -> JSONResponse:
    """405 as JSON (e.g. GET /translate)."""
    return error(405, f"{request.method} is not allowed on {request.url.path}")
