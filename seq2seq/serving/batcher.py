"""Admission, batching and decoding: requests wait in one bounded queue, are decoded together in
batches by the executor that owns the models (`seq2seq.serving.owner`), and leave the queue
unanswered by the model when their deadline passes or their client hangs up. A server of several
models (``compare_with=``) has one queue for all; a batch is decoded by one model, never mixed.

The event loop only admits, collects and answers; the models run on one thread, never twice
at once, so ``/health`` and ``/ready`` are answered in milliseconds whatever the load.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import math
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field

from seq2seq_lite.steering import LineSteering

from seq2seq.config import DecodeConfig
from seq2seq.decoding.inference import Translation, TranslatorBase
from seq2seq.decoding.settings import SEARCH_KEYS
from seq2seq.serving.metrics import Metrics
from seq2seq.serving.models import ServedModel
from seq2seq.serving.settings import ServeConfig

log = logging.getLogger("seq2seq.serve")


class Overloaded(Exception):
    """The queue has no room for a request: try again after ``retry_after`` seconds."""

    def __init__(self, queued: int, retry_after: int) -> None:
        super().__init__(f"the server is busy ({queued} sentences waiting); retry later")
        self.retry_after = retry_after


@dataclass(eq=False)
class Job:
    """One request's sentences, the model and search options, its deadline (event-loop time)
    and where its answer goes."""

    sentences: list[str]
    model: str
    beam_size: int
    nbest: int
    deadline: float
    answer: asyncio.Future = field(repr=False)
    admitted: float = 0.0
    started: bool = False
    steer: list[LineSteering] | None = None  # each sentence's prefix and constraints


class Batcher:
    """The queue of waiting jobs and the one thread that decodes them, with the model each
    names (``models``: the models served, by name)."""

    def __init__(
        self,
        models: dict[str, ServedModel],
        cfg: ServeConfig,
        metrics: Metrics,
        executor: Executor,
    ) -> None:
        self.models, self.cfg, self.metrics = models, cfg, metrics
        self.executor = executor  # where the models run: one thread, one batch at a time
        self.waiting: collections.deque[Job] = collections.deque()
        self.queued = 0  # sentences in ``waiting``
        self.rate = 0.0  # sentences/s of the last batch: how soon the queue will drain
        self._arrived = asyncio.Event()

    def full(self) -> bool:
        """Whether the queue is at its bound (``/ready`` answers 503 then)."""
        return self.queued >= self.cfg.max_queue_sentences

    def check_room(self, sentences: int) -> None:
        """Raise Overloaded when ``sentences`` more would pass the queue's bound: called before a
        request's sentences are tokenized, so that a refusal costs the event loop next to
        nothing."""
        if self.queued + sentences > self.cfg.max_queue_sentences:
            drain = self.queued / self.rate if self.rate else 1.0
            raise Overloaded(self.queued, min(60, max(1, math.ceil(drain))))

    def submit(
        self,
        sentences: list[str],
        model: str,
        beam_size: int,
        nbest: int,
        steer: list[LineSteering] | None = None,
    ) -> Job:
        """Admit a request for ``model`` or raise Overloaded: the waiting sentences (of every
        model) stay within the bound."""
        self.check_room(len(sentences))
        loop = asyncio.get_running_loop()
        now = loop.time()
        job = Job(
            sentences,
            model,
            beam_size,
            nbest,
            now + self.cfg.request_timeout_s,
            loop.create_future(),
            admitted=now,
            steer=steer,
        )
        self.waiting.append(job)
        self.queued += len(sentences)
        self.metrics.queue_sentences.set(self.queued)
        self._arrived.set()
        return job

    def drop(self, job: Job, reason: str) -> bool:
        """Take a job that has not started out of the queue (its deadline passed, its client
        left); False when it is being decoded or done."""
        if job.started or job.answer.done():
            return False
        self.waiting.remove(job)
        self._left(job)
        job.answer.cancel()
        self.metrics.dropped.labels(reason).inc(len(job.sentences))
        return True

    def _left(self, job: Job) -> None:
        self.queued -= len(job.sentences)
        self.metrics.queue_sentences.set(self.queued)

    async def run_forever(self) -> None:
        """Collect a batch, decode it (one group per model and search setting), and again."""
        while True:
            jobs = await self._collect()
            groups: dict[tuple[str, int, int], list[Job]] = {}
            for job in jobs:
                groups.setdefault((job.model, job.beam_size, job.nbest), []).append(job)
            for (model, beam_size, nbest), group in groups.items():
                await self._decode(group, model, beam_size, nbest)

    async def _collect(self) -> list[Job]:
        """The next batch: the first waiting job, and what else arrives within
        ``batch_wait_ms``, up to ``batch_sentences`` sentences."""
        while not self.waiting:
            self._arrived.clear()
            await self._arrived.wait()
        loop = asyncio.get_running_loop()
        until = loop.time() + self.cfg.batch_wait_ms / 1000
        while self.queued < self.cfg.batch_sentences and loop.time() < until:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), until - loop.time())
            except asyncio.TimeoutError:
                break
        jobs, size = [], 0
        while self.waiting and (
            not jobs or size + len(self.waiting[0].sentences) <= self.cfg.batch_sentences
        ):
            job = self.waiting.popleft()
            self._left(job)
            job.started = True  # in a batch now: decoded, even if its group waits a moment
            jobs.append(job)
            size += len(job.sentences)
        return jobs

    async def _decode(self, jobs: list[Job], model: str, beam_size: int, nbest: int) -> None:
        """Decode the jobs together by ``model`` on the decoding thread and hand each its
        translations."""
        loop = asyncio.get_running_loop()
        for job in jobs:
            self.metrics.queue_seconds.observe(loop.time() - job.admitted)
        lines = [s for job in jobs for s in job.sentences]
        steer = None  # each line's, where a job of the group has any
        if any(job.steer for job in jobs):
            steer = [s for job in jobs for s in (job.steer or [None] * len(job.sentences))]
        start = time.perf_counter()
        try:
            translator, translations = await loop.run_in_executor(
                self.executor, self._translate, lines, model, beam_size, nbest, steer
            )
        except Exception as e:  # a fault of the server, not of the input: 500 for these jobs
            log.exception("decoding failed")
            for job in jobs:
                if not job.answer.done():
                    job.answer.set_exception(e)
            return
        self.rate = len(lines) / max(time.perf_counter() - start, 1e-6)
        self.metrics.decoded(len(lines), model)
        start = 0
        for job in jobs:
            mine = translations[start : start + len(job.sentences)]
            start += len(job.sentences)
            if not job.answer.done():
                job.answer.set_result((translator, mine))

    def _translate(
        self,
        lines: list[str],
        model: str,
        beam_size: int,
        nbest: int,
        steer: list[LineSteering | None] | None,
    ) -> tuple[TranslatorBase, list[Translation]]:
        """On the decoding thread: the translations of ``lines`` by ``model``, steered."""
        translator = self.translator(model, beam_size, nbest)
        return translator, translator.translate(lines, steer=steer)

    @functools.lru_cache(maxsize=256)  # noqa: B019 (one batcher per server, kept to the end)
    def translator(self, model: str, beam_size: int, nbest: int) -> TranslatorBase:
        """The translator of one model and search setting (built once, on the decoding
        thread)."""
        # every search key of the server's config; a request changes beam_size and nbest alone
        defaults = {key: getattr(self.cfg, key) for key in SEARCH_KEYS}
        search = DecodeConfig(**{**defaults, "beam_size": beam_size, "nbest": nbest})
        return self.models[model].make_translator(search)

    def close(self) -> None:
        """Let the decoding thread finish its batch and end."""
        self.executor.shutdown()
