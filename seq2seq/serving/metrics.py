"""The server's metrics in the Prometheus text format, through ``prometheus-client``: requests
by route and status, latency and queueing histograms, sentences and batches decoded by model,
the batch size, the queue's depth, dropped sentences, the process (memory, CPU) and each model's
facts.

``prometheus-client`` is an optional extra (``pip install -e '.[serve]'``); without it the
server runs the same and ``/metrics`` says how to install it.
"""

from __future__ import annotations

from typing import Any

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        Info,
        ProcessCollector,
        generate_latest,
    )
except ImportError:  # the extra is not installed
    CollectorRegistry = None

# The routes a label may name; anything else is "other", so a scan of random paths cannot grow
# the number of series without bound.
ROUTES = ("/", "/health", "/ready", "/metrics", "/model", "/models", "/translate")
LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


MISSING = (
    "no metrics: pip install -e '.[serve]' in the seq2seq checkout (prometheus-client) and "
    "restart the server"
)


class _Unmeasured:
    """Stands in for every metric when prometheus-client is not installed: counts nothing."""

    def labels(self, *values: str) -> _Unmeasured:
        return self

    def __getattr__(self, name: str) -> Any:  # inc, observe, set, info
        return lambda *args, **kwargs: None


class Metrics:
    """One registry per application, so that two servers in one process do not share counts."""

    def __init__(self) -> None:
        self.available = CollectorRegistry is not None
        if not self.available:
            unmeasured = _Unmeasured()
            self.requests = self.latency = self.queue_seconds = self.sentences = unmeasured
            self.batches = self.batch_sentences = self.queue_sentences = self.dropped = unmeasured
            self.model = unmeasured
            return
        self.content_type = CONTENT_TYPE_LATEST
        self.registry = reg = CollectorRegistry()
        ProcessCollector(registry=reg)  # process_resident_memory_bytes, CPU seconds, open fds
        self.requests = Counter(
            "seq2seq_requests",
            "HTTP requests answered, by route and status",
            ["route", "status"],
            registry=reg,
        )
        self.latency = Histogram(
            "seq2seq_request_seconds",
            "Time from request to answer",
            ["route"],
            buckets=LATENCY,
            registry=reg,
        )
        self.queue_seconds = Histogram(
            "seq2seq_queue_seconds",
            "Time a request waited to be decoded",
            buckets=LATENCY,
            registry=reg,
        )
        self.sentences = Counter(
            "seq2seq_sentences_decoded", "Sentences decoded, by model", ["model"], registry=reg
        )
        self.batches = Counter(
            "seq2seq_batches_decoded", "Batches decoded, by model", ["model"], registry=reg
        )
        self.batch_sentences = Histogram(
            "seq2seq_batch_sentences", "Sentences per decoded batch", buckets=SIZES, registry=reg
        )
        self.queue_sentences = Gauge(
            "seq2seq_queue_sentences", "Sentences waiting to be decoded", registry=reg
        )
        self.dropped = Counter(
            "seq2seq_dropped_sentences",
            "Sentences taken out of the queue undecoded, by reason",
            ["reason"],
            registry=reg,
        )
        self.model = Info("seq2seq_model", "The models served", ["model"], registry=reg)

    def request(self, path: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        route = path if path in ROUTES else "other"
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def decoded(self, sentences: int, model: str) -> None:
        """Count one batch of ``sentences`` decoded by ``model``."""
        self.sentences.labels(model).inc(sentences)
        self.batches.labels(model).inc()
        self.batch_sentences.observe(sentences)

    def describe_model(self, name: str, card: dict[str, Any]) -> None:
        """A model's facts as an info metric labelled with its name (strings only)."""
        facts = {k: str(v) for k, v in card.items() if isinstance(v, str | int | float)}
        facts.pop("name", None)
        self.model.labels(name).info(facts)

    def text(self) -> bytes:
        """Every metric in the Prometheus text format (``available`` only)."""
        return generate_latest(self.registry)
