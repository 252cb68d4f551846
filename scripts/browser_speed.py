"""Time per sentence of a release's browser folder (``seq2seq-export ... onnx=true browser=true``)
in headless Chromium: the folder on a static file server, the sentences translated one at a time
in the page, greedy and beam 5; each figure is the median over the repeats. From the checkout
root, with chromium, chromedriver and selenium installed::

    python scripts/browser_speed.py releases/de-en/browser --source test.de --sentences 100

prints one line per search, then one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import shutil
import statistics
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

# milliseconds of each sentence, translated one at a time in the page
TIMED = """
const [lines, options, done] = arguments;
(async () => {
  const t = await window.seq2seq;
  const times = [];
  for (const line of lines) {
    const start = performance.now();
    await t.translate([line], options);
    times.push(performance.now() - start);
  }
  return times;
})().then(done, (e) => done({error: String(e)}));
"""


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per file served
        pass


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    opener = gzip.open if args.source.suffix == ".gz" else open
    with opener(args.source, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f][: args.sentences]
    handler = functools.partial(Quiet, directory=str(args.folder))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    driver = browser()
    results = {}
    try:
        driver.set_script_timeout(3600)
        driver.get(f"http://127.0.0.1:{httpd.server_address[1]}/")
        driver.execute_async_script(TIMED, lines[:5], {"beam_size": 5})  # warm-up
        for beam in (1, 5):
            means = []
            for _ in range(args.repeats):
                times = driver.execute_async_script(TIMED, lines, {"beam_size": beam})
                if isinstance(times, dict):
                    raise SystemExit(times["error"])
                means.append(statistics.mean(times))
            results[f"beam{beam}"] = {"ms_per_sentence": statistics.median(means), "runs": means}
            print(f"beam {beam}: {statistics.median(means):.1f} ms/sentence (runs {means})")
        results["chromium"] = driver.capabilities.get("browserVersion")
    finally:
        driver.quit()
        httpd.shutdown()
    print(json.dumps({"sentences": len(lines), "repeats": args.repeats, **results}))


if __name__ == "__main__":
    main()
