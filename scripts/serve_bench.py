"""Load on a running seq2seq-serve: N clients on 127.0.0.1, each sending one sentence at a time
for a bounded time; reports sentences/s and latency percentiles. From the checkout root::

    python scripts/serve_bench.py http://127.0.0.1:8000 --clients 8 --seconds 60 \\
        --input test.de --beam-size 1

prints a summary, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence


def client(url: str, sentences: list[str], beam: int, until: float, start: int, out: dict) -> None:
    """Send one sentence per request until ``until``; record latencies and errors."""
    i = start
    while time.monotonic() < until:
        body = json.dumps({"sentences": [sentences[i % len(sentences)]], "beam_size": beam})
        request = urllib.request.Request(
            f"{url}/translate", body.encode(), {"Content-Type": "application/json"}
        )
        began = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                json.loads(response.read())
            out["latencies"].append(time.perf_counter() - began)
        except (urllib.error.URLError, OSError, ValueError) as e:
            out["errors"].append(repr(e))
        i += 1


def percentile(values: Sequence[float], q: int) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the server's base URL")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--input", required=True, help="source sentences, one per line")
    parser.add_argument("--beam-size", type=int, default=1)
    args = parser.parse_args(argv)
    with open(args.input, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    results = [{"latencies": [], "errors": []} for _ in range(args.clients)]
    until = time.monotonic() + args.seconds
    began = time.perf_counter()
    threads = [
        threading.Thread(
            target=client,
            args=(args.url, sentences, args.beam_size, until, i * 97, results[i]),
        )
        for i in range(args.clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    latencies = sorted(x * 1000 for r in results for x in r["latencies"])
    errors = [e for r in results for e in r["errors"]]
    report = {
        "clients": args.clients,
        "seconds": round(elapsed, 2),
        "beam_size": args.beam_size,
        "sentences": len(latencies),
        "sentences_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
        "p95_ms": round(percentile(latencies, 95), 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 99), 1) if latencies else None,
        "errors": len(errors),
        "first_errors": errors[:3],
    }
    print(
        f"{report['sentences']} sentences in {elapsed:.1f} s from {args.clients} clients: "
        f"{report['sentences_per_s']} sentences/s; latency p50 {report['p50_ms']} ms, "
        f"p95 {report['p95_ms']} ms, p99 {report['p99_ms']} ms; {len(errors)} errors"
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
