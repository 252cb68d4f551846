"""Resident memory of running seq2seq-serve processes under a steady, paced load: each server gets
one request a second (1 to 32 test sentences, greedy or beam 5, drawn the same way for every
server), and its resident set size is read from /proc every 30 s. From the checkout root, with
two servers started beside each other (Linux)::

    seq2seq-serve run_dir=releases/de-en port=8101 &  echo $! > a.pid
    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647 \\
        seq2seq-serve run_dir=releases/de-en port=8102 &  echo $! > b.pid
    python scripts/serve_memory.py --seconds 3600 --input test.de \\
        defaults=http://127.0.0.1:8101:$(cat a.pid) kept=http://127.0.0.1:8102:$(cat b.pid)

prints one JSON line per sample ({"t": seconds, name: MB, ...}), then each server's requests.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import urllib.request
from pathlib import Path

# No proxy: a measurement on 127.0.0.1 must not go through an http_proxy from the environment.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
SAMPLE_EVERY_S = 30


def resident_mb(pid: int) -> int:
    """VmRSS of a process, MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise ValueError(f"no VmRSS for process {pid}")


def client(name: str, url: str, lines: list[str], end: float, seed: int) -> None:
    """One request a second to ``url`` until ``end``; the count on stdout at the end."""
    rnd, sent, answered = random.Random(seed), 0, 0
    while time.time() < end:
        count = rnd.choice([1, 1, 2, 4, 8, 16, 32])
        body = {"sentences": rnd.sample(lines, count), "beam_size": rnd.choice([1, 5])}
        request = urllib.request.Request(
            url + "/translate", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        try:
            with OPENER.open(request, timeout=60) as response:
                response.read()
                answered += 1
        except OSError as e:
            print(json.dumps({"server": name, "error": str(e)}), flush=True)
        sent += 1
        time.sleep(1.0)
    print(json.dumps({"server": name, "requests": sent, "answered": answered}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("servers", nargs="+", help="name=URL:PID of each server")
    parser.add_argument("--input", required=True, help="source sentences, one per line")
    parser.add_argument("--seconds", type=float, default=3600.0)
    args = parser.parse_args()
    lines = [s for s in Path(args.input).read_text(encoding="utf-8").splitlines() if s.strip()]
    servers = {}
    for item in args.servers:
        name, rest = item.split("=", 1)
        url, pid = rest.rsplit(":", 1)
        servers[name] = (url, int(pid))
    end = time.time() + args.seconds
    threads = [
        threading.Thread(target=client, args=(name, url, lines, end, 7))  # the same draws
        for name, (url, _) in servers.items()
    ]
    for thread in threads:
        thread.start()
    start = time.time()
    while True:
        sample = {name: resident_mb(pid) for name, (_, pid) in servers.items()}
        print(json.dumps({"t": round(time.time() - start), **sample}), flush=True)
        if time.time() >= end:
            break
        time.sleep(min(SAMPLE_EVERY_S, max(0.0, end - time.time())))
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
