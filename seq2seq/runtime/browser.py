"""A release as a static folder that translates in the browser with no server behind it
(``seq2seq-export onnx=true browser=true``): the served page, whose POST ``translate`` is
answered in the page by the release's fp32 ONNX graphs on onnxruntime-web and its sentencepiece
models on @sctg/sentencepiece-js (Google's sentencepiece compiled to WebAssembly, so the pieces
are the Python package's), with the greedy and beam search of ``static/browser/search.js``. The
two JavaScript libraries are taken from the npm registry at export time, at pinned versions."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.errors import Seq2SeqError
from seq2seq.storage.rundir import GRAPHS_DIR, GRAPHS_FACTS, SRC_TOKENIZER, TGT_TOKENIZER

BROWSER_DIR = "browser"
# npm package -> {file in its tarball: name in the folder}
NPM_FILES = {
    "onnxruntime-web@1.30.0": {
        "package/dist/ort.wasm.min.mjs": "ort.wasm.min.mjs",
        "package/dist/ort-wasm-simd-threaded.mjs": "ort-wasm-simd-threaded.mjs",
        "package/dist/ort-wasm-simd-threaded.wasm": "ort-wasm-simd-threaded.wasm",
    },
    "@sctg/sentencepiece-js@1.3.3": {"package/dist/index.js": "sentencepiece.js"},
}
OWN_FILES = ("search.js", "translator.js", "node-stub.js")
GRAPH_FILES = (GRAPHS_FACTS, "encoder.onnx", "step.onnx")
# before the page's own script: Node's modules for sentencepiece, the model's module, and the
# page's fetch("translate") answered by it
PAGE_HEAD = """<script type="importmap">
{"imports": {"fs": "./node-stub.js", "buffer": "./node-stub.js"}}
</script>
<script>
"use strict";
window.seq2seq = new Promise((resolve, reject) => { window.seq2seqLoaded = {resolve, reject}; });
const serverFetch = window.fetch.bind(window);
window.fetch = async (url, options) => url === "translate"
  ? (await window.seq2seq).answer(options.body) : serverFetch(url, options);
</script>
<script type="module" src="translator.js"></script>
"""


def require_npm() -> str:
    """npm's path, or one line saying why the export needs it (checked before writing)."""
    npm = shutil.which("npm")
    if npm is None:
        raise Seq2SeqError(
            "browser=true takes onnxruntime-web and sentencepiece-js from the npm registry, and "
            "npm was not found: install Node.js (npm), or leave out browser=true"
        )
    return npm


def write_browser(release: Path, card: dict[str, Any]) -> list[Path]:
    """``release/browser/``: the page, the model's scripts, the libraries, the fp32 graphs, the
    tokenizers and their vocabularies; the files written."""
    folder = release / BROWSER_DIR
    (folder / GRAPHS_DIR).mkdir(parents=True)
    written = _npm_files(folder)
    static = resources.files("seq2seq").joinpath("static")
    for name in OWN_FILES:
        (folder / name).write_text(static.joinpath("browser", name).read_text("utf-8"), "utf-8")
    page = static.joinpath("index.html").read_text("utf-8")
    (folder / "index.html").write_text(page.replace("<script>", PAGE_HEAD + "<script>", 1), "utf-8")
    (folder / "models").write_text(json.dumps({"default": card["name"], "models": [card]}))
    for name in GRAPH_FILES:
        shutil.copyfile(release / GRAPHS_DIR / name, folder / GRAPHS_DIR / name)
    vocab = {}
    for side, name in (("src", SRC_TOKENIZER), ("tgt", TGT_TOKENIZER)):
        shutil.copyfile(release / name, folder / name)
        tok = Tokenizer.load(release / name)
        vocab[side] = tok.pieces(range(tok.vocab_size))
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    names = [*OWN_FILES, "index.html", "models", "vocab.json", SRC_TOKENIZER, TGT_TOKENIZER]
    written += [folder / name for name in names]
    return written + [folder / GRAPHS_DIR / name for name in GRAPH_FILES]


def _npm_files(folder: Path) -> list[Path]:
    """The libraries' files, from ``npm pack`` of their pinned versions."""
    npm, written = require_npm(), []
    with tempfile.TemporaryDirectory() as tmp:
        for package, files in NPM_FILES.items():
            done = subprocess.run(
                [npm, "pack", package, "--pack-destination", tmp, "--silent"],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                raise Seq2SeqError(f"npm pack {package} failed: {last}")
            with tarfile.open(Path(tmp) / done.stdout.strip().splitlines()[-1]) as tar:
                for member, name in files.items():
                    source = tar.extractfile(member)
                    if source is None:
                        raise Seq2SeqError(f"npm's {package} has no {member}")
                    (folder / name).write_bytes(source.read())
                    written.append(folder / name)
    return written
