"""Load on a running seq2seq-serve: a ramp of closed-loop clients, then open-loop overload at a
multiple of the capacity the ramp found, with /health and /metrics probed throughout. From the
checkout root::

    python scripts/serve_bench.py http://127.0.0.1:8000 --input test.de \\
        --clients 1,8,32 --seconds 20 --overload-seconds 60 --overload-factor 2

``--no-backoff`` makes the ramp's clients send again at once after a 503 (issue 52's overload:
24 clients of 64 sentences at beam 10, nearly every answer a 503), which measures what a refused
request costs the server.

prints one line per phase, a markdown table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

# No proxy: a load test on 127.0.0.1 must not go through an http_proxy from the environment.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PROBE_EVERY_S = 0.1
METRICS_EVERY_S = 2.0
PROBE_TIMEOUT_S = 5.0
RSS_METRIC = "process_resident_memory_bytes"
QUEUE_METRIC = "seq2seq_queue_sentences"


@dataclass(frozen=True)
class Result:
    """One /translate request: ``outcome`` is "200", "503", "other" or "lost"."""

    outcome: str
    latency_s: float
    error: str | None = None
    retry_after_s: float = 0.0  # a 503's Retry-After


def translate(url: str, sentences: list[str], beam: int, timeout: float) -> Result:
    """POST one request; a non-2xx answer is a result to count, not an error of the client."""
    body = json.dumps({"sentences": sentences, "beam_size": beam}).encode()
    request = urllib.request.Request(f"{url}/translate", body, {"Content-Type": "application/json"})
    began = time.perf_counter()
    try:
        with OPENER.open(request, timeout=timeout) as response:
            json.loads(response.read())
            return Result("200", time.perf_counter() - began)
    except urllib.error.HTTPError as e:  # before URLError: HTTPError is a subclass
        retry = e.headers.get("Retry-After", "0") if e.headers else "0"
        e.close()
        outcome = "503" if e.code == 503 else "other"
        wait_s = float(retry) if retry.isdigit() else 0.0
        return Result(outcome, time.perf_counter() - began, f"HTTP {e.code}", wait_s)
    except (urllib.error.URLError, OSError, ValueError) as e:  # refused, reset, timed out
        return Result("lost", time.perf_counter() - began, repr(e))


def get(url: str, timeout: float) -> bytes:
    with OPENER.open(url, timeout=timeout) as response:
        return response.read()


def parse_metric(text: str, name: str) -> float | None:
    """The value of an unlabelled sample ``name <float>`` in Prometheus text, else None."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == name:
            try:
                return float(parts[1])
            except ValueError:
                return None
    return None


class Probe(threading.Thread):
    """GET /health every 100 ms and /metrics every 2 s, timestamped, so that each phase can
    report how liveness and memory fared under its load."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.health: list[tuple[float, float, bool]] = []  # (time, latency s, answered 200)
        self.metrics: list[tuple[float, float | None, float | None]] = []  # (time, rss, queue)

    def run(self) -> None:
        next_metrics = time.monotonic()
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                get(f"{self.url}/health", PROBE_TIMEOUT_S)
                ok = True
            except (urllib.error.URLError, OSError):
                ok = False
            self.health.append((began, time.monotonic() - began, ok))
            if time.monotonic() >= next_metrics:
                next_metrics += METRICS_EVERY_S
                self.sample_metrics()
            self.stop.wait(max(0.0, began + PROBE_EVERY_S - time.monotonic()))

    def sample_metrics(self) -> None:
        try:
            text = get(f"{self.url}/metrics", PROBE_TIMEOUT_S).decode("utf-8", "replace")
        except (urllib.error.URLError, OSError):
            return
        rss, queue = parse_metric(text, RSS_METRIC), parse_metric(text, QUEUE_METRIC)
        self.metrics.append((time.monotonic(), rss, queue))

    def window(self, start: float, end: float) -> dict:
        """/health and /metrics figures for the samples taken in ``[start, end]``."""
        health = [(lat * 1000, ok) for t, lat, ok in list(self.health) if start <= t <= end]
        latencies = [x for x, _ in health]
        rss = [r / 2**20 for t, r, _ in list(self.metrics) if start <= t <= end and r is not None]
        queue = [q for t, _, q in list(self.metrics) if start <= t <= end and q is not None]
        return {
            "health_probes": len(health),
            "health_failures": sum(not ok for _, ok in health),
            "health_p50_ms": rounded(percentile(latencies, 50)),
            "health_p99_ms": rounded(percentile(latencies, 99)),
            "health_max_ms": rounded(max(latencies, default=None)),
            "rss_mb_first": rounded(rss[0] if rss else None),
            "rss_mb_last": rounded(rss[-1] if rss else None),
            "rss_mb_max": rounded(max(rss, default=None)),
            "queue_max": max(queue, default=None),
        }


def percentile(values: Sequence[float], q: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def request_sentences(sentences: list[str], start: int, n: int) -> list[str]:
    """``n`` consecutive sentences from ``start``, wrapping around."""
    return [sentences[(start + k) % len(sentences)] for k in range(n)]


def choose_beam(rng: random.Random, args: argparse.Namespace) -> int:
    return args.beam_size if rng.random() < args.beam_share else 1


def closed_client(
    index: int, args: argparse.Namespace, sentences: list[str], until: float, out: list[Result]
) -> None:
    """One request at a time, back to back, until ``until``; after a 503 it waits as the
    answer's Retry-After says, as a well-behaved client does (not with ``--no-backoff``). The
    beam choice is seeded by ``index`` so that runs repeat."""
    rng = random.Random(index)
    i = index * 97
    while time.monotonic() < until:
        batch = request_sentences(sentences, i, args.per_request)
        result = translate(args.url, batch, choose_beam(rng, args), args.timeout)
        out.append(result)
        i += 1
        if args.backoff:
            time.sleep(min(result.retry_after_s, max(0.0, until - time.monotonic())))


def run_ramp(clients: int, args: argparse.Namespace, sentences: list[str]) -> list[Result]:
    """``clients`` closed-loop clients for ``args.seconds``."""
    out: list[Result] = []  # list.append is atomic under the GIL
    until = time.monotonic() + args.seconds
    threads = [
        threading.Thread(target=closed_client, args=(i, args, sentences, until, out))
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def run_overload(
    rate: float, args: argparse.Namespace, sentences: list[str]
) -> tuple[list[Result], float]:
    """Open loop: request ``i`` is submitted at ``start + i / rate`` whatever the answers to
    the ones before, so that a slow server meets more load, not less. Returns the results and
    the largest lag between a request's scheduled and actual send, in ms (a large lag means
    this client, not the server, was the limit: raise ``--workers``)."""
    rng = random.Random(10_000)
    lags: list[float] = []

    def send(scheduled: float, batch: list[str], beam: int) -> Result:
        lags.append(time.monotonic() - scheduled)
        return translate(args.url, batch, beam, args.timeout)

    futures = []
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        start = time.monotonic()
        n = int(rate * args.overload_seconds)
        for i in range(n):
            scheduled = start + i / rate
            delay = scheduled - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            beam = choose_beam(rng, args)
            batch = request_sentences(sentences, i * args.per_request, args.per_request)
            futures.append(pool.submit(send, scheduled, batch, beam))
        wait(futures)
    return [f.result() for f in futures], round(max(lags, default=0.0) * 1000, 1)


def summarize(results: list[Result], elapsed: float, args: argparse.Namespace) -> dict:
    """Counts, throughput and latency percentiles of the 200 answers of one phase."""
    ok = sorted(r.latency_s * 1000 for r in results if r.outcome == "200")
    answered = [r for r in results if r.outcome != "lost"]
    n = len(results)
    return {
        "seconds": round(elapsed, 2),
        "requests": n,
        "answered_200": len(ok),
        "sentences_per_s": round(len(ok) * args.per_request / elapsed, 1) if elapsed else 0.0,
        "p50_ms": rounded(percentile(ok, 50)),
        "p95_ms": rounded(percentile(ok, 95)),
        "p99_ms": rounded(percentile(ok, 99)),
        "answered_503": sum(r.outcome == "503" for r in results),
        "share_503": round(sum(r.outcome == "503" for r in results) / n, 4) if n else 0.0,
        "other_status": sum(r.outcome == "other" for r in results),
        "lost": n - len(answered),
        "answered_in_deadline": sum(r.latency_s <= args.deadline for r in answered),
        "ok_in_deadline": sum(x <= args.deadline * 1000 for x in ok),
        "first_errors": sorted({r.error for r in results if r.error})[:3],
    }


def phase_line(report: dict) -> str:
    who = (
        f"{report['clients']} clients"
        if report["phase"] == "ramp"
        else f"{report['offered_per_s']} requests/s offered"
    )
    return (
        f"{report['phase']} {who}: {report['requests']} requests in {report['seconds']} s, "
        f"{report['answered_200']} answered 200 ({report['sentences_per_s']} sentences/s), "
        f"{report['answered_503']} answered 503; "
        f"latency p50 {report['p50_ms']} p95 {report['p95_ms']} p99 {report['p99_ms']} ms; "
        f"503 {report['share_503']:.1%}, other {report['other_status']}, "
        f"lost {report['lost']}; {report['answered_in_deadline']} answered in deadline; "
        f"/health p50 {report['health_p50_ms']} p99 {report['health_p99_ms']} "
        f"max {report['health_max_ms']} ms "
        f"({report['health_failures']} failed); RSS {report['rss_mb_first']} -> "
        f"{report['rss_mb_last']} MB (max {report['rss_mb_max']})"
    )


def table(reports: list[dict]) -> str:
    """The phases as a markdown table."""
    lines = [
        "| phase | clients | sentences/s | p50 ms | p95 ms | p99 ms | 503 share | lost "
        "| /health p99 ms |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in reports:
        who = r["clients"] if r["phase"] == "ramp" else f"{r['offered_per_s']}/s"
        lines.append(
            f"| {r['phase']} | {who} | {r['sentences_per_s']} | {r['p50_ms']} | {r['p95_ms']} "
            f"| {r['p99_ms']} | {r['share_503']:.1%} | {r['lost']} | {r['health_p99_ms']} |"
        )
    return "\n".join(lines)


def client_counts(text: str) -> list[int]:
    counts = [int(x) for x in text.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, e.g. 1,8,32")
    return counts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the server's base URL")
    parser.add_argument("--input", required=True, help="source sentences, one per line")
    parser.add_argument(
        "--clients",
        type=client_counts,
        default=[1, 8, 32],
        help="closed-loop client counts of the ramp, comma-separated",
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of a ramp phase")
    parser.add_argument("--beam-size", type=int, default=5, help="beam of the beam requests")
    parser.add_argument("--per-request", type=int, default=1, help="sentences in each request")
    parser.add_argument(
        "--beam-share",
        type=float,
        default=0.25,
        help="share of the requests that use --beam-size; the rest are greedy",
    )
    parser.add_argument(
        "--backoff",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ramp clients wait as a 503's Retry-After says (--no-backoff: send again at once)",
    )
    parser.add_argument("--overload-seconds", type=float, default=60.0, help="0 skips it")
    parser.add_argument(
        "--overload-factor",
        type=float,
        default=2.0,
        help="offered requests/s as a multiple of the ramp's best sentences/s",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout, seconds")
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="count answers within this many seconds (default: --timeout)",
    )
    parser.add_argument("--workers", type=int, default=512, help="overload sender threads")
    parser.add_argument("--json-out", default=None, help="also write the JSON to this file")
    args = parser.parse_args(argv)
    args.url = args.url.rstrip("/")
    if args.deadline is None:
        args.deadline = args.timeout
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with open(args.input, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    if not sentences:
        print(f"no sentences in {args.input}", file=sys.stderr)
        return 2
    try:
        get(f"{args.url}/health", PROBE_TIMEOUT_S)
    except (urllib.error.URLError, OSError) as e:
        print(f"cannot reach {args.url}/health: {e}", file=sys.stderr)
        return 2
    probe = Probe(args.url)
    probe.start()
    reports = []
    for clients in args.clients:
        start = time.monotonic()
        results = run_ramp(clients, args, sentences)
        end = time.monotonic()
        report = {"phase": "ramp", "clients": clients, "offered_per_s": None}
        # /health while the clients send: not the tail where the last requests are decoded
        window = probe.window(start, min(end, start + args.seconds))
        report |= summarize(results, end - start, args) | window
        reports.append(report)
        print(phase_line(report), flush=True)
    capacity = max(r["sentences_per_s"] for r in reports)
    if args.overload_seconds > 0 and capacity > 0:
        rate = round(args.overload_factor * capacity / args.per_request, 1)  # requests/s
        start = time.monotonic()
        results, lag_ms = run_overload(rate, args, sentences)
        end = time.monotonic()
        report = {"phase": "overload", "clients": None, "offered_per_s": rate}
        report |= summarize(results, end - start, args) | probe.window(start, end)
        report["send_lag_max_ms"] = lag_ms
        reports.append(report)
        print(phase_line(report) + f"; sends up to {lag_ms} ms late", flush=True)
    elif args.overload_seconds > 0:
        print("overload skipped: no request answered 200 in the ramp", flush=True)
    probe.stop.set()
    probe.join(PROBE_TIMEOUT_S + 1)
    summary = {"phases": reports, "capacity": capacity, "args": vars(args)}
    print(table(reports))
    print(json.dumps(summary))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
