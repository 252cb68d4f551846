"""`seq2seq-serve`: translations over HTTP, batched across requests, and a web page.

- ``POST /translate``: a JSON list of sentences, or ``{"sentences": [...], "beam_size": k,
  "nbest": n, "alignment": true}``; answers ``{"translations": [{"translation", "nbest"?,
  "alignment"?}, ...]}`` in the order asked.
- ``GET /health``, ``GET /model`` (the model card's facts), ``GET /`` (the page).

Requests that arrive together are decoded together: a batcher collects them for at most
``batch_wait_ms`` or ``batch_sentences`` sentences and decodes them on the event loop's thread,
so the model never runs twice at once. Every limit on user input answers 4xx with
``{"error": ...}``. SIGTERM stops accepting connections and finishes the requests already in
(uvicorn's graceful shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import hydra
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from seq2seq.config import DecodeConfig, ServeConfig
from seq2seq.decoding.alignment import alignment_record
from seq2seq.decoding.inference import (
    TrainedRun,
    Translation,
    Translator,
    open_model,
    release_facts,
)
from seq2seq.decoding.nbest import json_candidates
from seq2seq.errors import Seq2SeqError
from seq2seq.runtime.engine import Engine

log = logging.getLogger("seq2seq.serve")


class BadRequest(Exception):
    """User input the API refuses: the HTTP status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Job:
    """One request's sentences and search options, and where its answer goes."""

    sentences: list[str]
    beam_size: int
    nbest: int
    answer: asyncio.Future = field(repr=False)


def parse(body: bytes, cfg: ServeConfig) -> tuple[list[str], int, int, bool]:
    """(sentences, beam_size, nbest, alignment) of a request body, or BadRequest."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(400, f"the body is not JSON: {e}") from None
    options: dict[str, Any] = {}
    if isinstance(data, dict):
        unknown = set(data) - {"sentences", "beam_size", "nbest", "alignment"}
        if unknown:
            raise BadRequest(422, f"unknown fields: {', '.join(sorted(unknown))}")
        options, data = data, data.get("sentences")
    if not isinstance(data, list) or not all(isinstance(s, str) for s in data):
        raise BadRequest(422, 'send a JSON list of sentences (strings), or {"sentences": [...]}')
    if not data:
        raise BadRequest(422, "no sentences")
    if len(data) > cfg.max_sentences:
        raise BadRequest(413, f"{len(data)} sentences; at most {cfg.max_sentences} per request")
    for i, sentence in enumerate(data):
        if len(sentence) > cfg.max_chars:
            raise BadRequest(
                413, f"sentence {i} has {len(sentence)} characters; at most {cfg.max_chars}"
            )
        if "\n" in sentence or "\r" in sentence:
            raise BadRequest(422, f"sentence {i} has a line break: send one sentence per item")
    beam, nbest, alignment = (options.get(k, d) for k, d in (
        ("beam_size", cfg.beam_size), ("nbest", 1), ("alignment", False)))  # fmt: skip
    for name, value, top in (("beam_size", beam, cfg.max_beam), ("nbest", nbest, beam)):
        if type(value) is not int or not 1 <= value <= top:
            raise BadRequest(422, f"{name} must be a whole number from 1 to {top}")
    if type(alignment) is not bool:
        raise BadRequest(422, "alignment must be true or false")
    return data, beam, nbest, alignment


def answer(translator: Translator, translation: Translation, nbest: int, alignment: bool) -> dict:
    """The JSON object of one translated sentence."""
    best = translation.hypotheses[0] if translation.hypotheses else None
    item: dict[str, Any] = {"translation": translator.text(best) if best else ""}
    if nbest > 1:
        item["nbest"] = json_candidates(translator, translation)
    if alignment:  # as documented: source, target, weights (the mean over heads)
        item["alignment"] = alignment_record(translator, translation, head_weights=False)
    return item


class Batcher:
    """Collects concurrent requests into batches and decodes them on one worker thread."""

    def __init__(self, run: TrainedRun, engine: Engine, cfg: ServeConfig) -> None:
        self.run, self.engine, self.cfg = run, engine, cfg
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.max_len = int(run.cfg.data.max_len)

    @functools.lru_cache(maxsize=64)  # noqa: B019 (one batcher per server, kept to the end)
    def translator(self, beam_size: int, nbest: int) -> Translator:
        search = DecodeConfig(
            beam_size=beam_size,
            nbest=nbest,
            alpha=self.cfg.alpha,
            max_len_a=self.cfg.max_len_a,
            max_len_b=self.cfg.max_len_b,
            batch_size=self.cfg.batch_size,
        )
        return Translator.from_run(self.run, search, self.max_len, self.engine)

    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        waiting: list[Job] = []
        while True:
            jobs = waiting or [await self.queue.get()]
            waiting = []
            deadline = loop.time() + self.cfg.batch_wait_ms / 1000
            size = sum(len(j.sentences) for j in jobs)
            while size < self.cfg.batch_sentences:
                try:
                    job = await asyncio.wait_for(self.queue.get(), deadline - loop.time())
                except asyncio.TimeoutError:
                    break
                if size + len(job.sentences) > self.cfg.batch_sentences:
                    waiting.append(job)  # the next batch's first
                    break
                jobs.append(job)
                size += len(job.sentences)
            groups: dict[tuple[int, int], list[Job]] = {}
            for job in jobs:
                groups.setdefault((job.beam_size, job.nbest), []).append(job)
            for (beam_size, nbest), group in groups.items():
                await self.decode(group, beam_size, nbest)

    async def decode(self, jobs: list[Job], beam_size: int, nbest: int) -> None:
        """Decode on the event loop's own thread: the model never runs twice at once anyway,
        and from a worker thread torch ran ~1.5x slower here (132 vs 194 sentences/s); new
        connections wait in the backlog meanwhile (a batch takes tens of milliseconds)."""
        translator = self.translator(beam_size, nbest)
        lines = [s for job in jobs for s in job.sentences]
        try:
            translations = translator.translate(lines)
        except Exception as e:  # a fault of the server, not of the input: 500 for these jobs
            log.exception("decoding failed")
            for job in jobs:
                if not job.answer.done():
                    job.answer.set_exception(e)
            return
        start = 0
        for job in jobs:
            mine = translations[start : start + len(job.sentences)]
            start += len(job.sentences)
            if not job.answer.done():
                job.answer.set_result((translator, mine))


def error(status: int, message: str) -> JSONResponse:
    """The JSON answer to a refused request: ``{"error": message}`` with its status."""
    return JSONResponse({"error": message}, status_code=status)


def authorised(request: Request, api_key: str | None) -> bool:
    """Whether the request carries the server's API key (any request, when it has none)."""
    if api_key is None:
        return True
    given = request.headers.get("x-api-key", "")
    return hmac.compare_digest(given.encode(), api_key.encode())


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, or BadRequest when its declared or actual size is over ``limit``
    bytes (read in chunks, so an oversized body is refused before it is all in memory)."""
    declared = request.headers.get("content-length") or "0"
    if not declared.isdigit():
        raise BadRequest(400, f"Content-Length {declared!r} is not a number")
    length = int(declared)
    if length > limit:
        raise BadRequest(413, f"the body has {length} bytes; at most {limit}")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BadRequest(413, f"the body is over {limit} bytes")
    return body


def model_card(run: TrainedRun) -> dict[str, Any]:
    """What ``GET /model`` answers: the languages, the attention, the step, the release's facts."""
    return {"src_lang": run.cfg.data.src_lang, "tgt_lang": run.cfg.data.tgt_lang,
            "attention": run.cfg.model.attention.name, "step": run.step,
            **release_facts(run.run_dir)}  # fmt: skip


async def not_found(request: Request, exc: Exception) -> JSONResponse:
    """404 as JSON, naming the routes there are."""
    return error(404, f"no {request.url.path} here: POST /translate, GET /health, GET /model")


async def not_allowed(request: Request, exc: Exception) -> JSONResponse:
    """405 as JSON (e.g. GET /translate)."""
    return error(405, f"{request.method} is not allowed on {request.url.path}")


def create_app(run: TrainedRun, engine: Engine, cfg: ServeConfig) -> Starlette:
    """The ASGI application serving ``run``."""
    batcher = Batcher(run, engine, cfg)
    page = resources.files("seq2seq").joinpath("static/index.html").read_text(encoding="utf-8")
    card = model_card(run)

    async def translate(request: Request) -> JSONResponse:
        if not authorised(request, cfg.api_key):
            return error(401, "missing or wrong X-API-Key header")
        try:
            body = await read_body(request, cfg.max_body_bytes)
            sentences, beam_size, nbest, alignment = parse(body, cfg)
        except BadRequest as e:
            return error(e.status, str(e))
        future = asyncio.get_running_loop().create_future()
        await batcher.queue.put(Job(sentences, beam_size, nbest, future))
        translator, translations = await future
        items = [answer(translator, t, nbest, alignment) for t in translations]
        return JSONResponse({"translations": items})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def model(request: Request) -> JSONResponse:
        if not authorised(request, cfg.api_key):
            return error(401, "missing or wrong X-API-Key header")
        return JSONResponse(card)

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(page)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(batcher.run_forever())
        yield
        task.cancel()

    routes = [
        Route("/", index),
        Route("/health", health),
        Route("/model", model),
        Route("/translate", translate, methods=["POST"]),
    ]
    return Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_allowed}
    )


def serve(cfg: ServeConfig) -> None:
    """Load the run or release and serve it until SIGINT/SIGTERM."""
    engine, run = open_model(cfg, "serve")
    log.info("serving %s (step %d) on %s at http://%s:%d/", run.run_dir, run.step,
             engine.describe(), cfg.host, cfg.port)  # fmt: skip
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
