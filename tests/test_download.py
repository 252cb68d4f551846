"""Downloader: checksums verified, corrupt or partial files never kept, every source kind works."""

from __future__ import annotations

import functools
import hashlib
import http.server
import logging
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from seq2seq.data import download
from seq2seq.data.download import MULTI30K_SHA256, fetch
from seq2seq.errors import ChecksumError, DataError

GOOD = b"a small file standing in for a corpus\n" * 100


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class TruncatingHandler(QuietHandler):
    """Sends half of each file, then closes; announces the full length unless told not to."""

    announce_length = True

    def do_GET(self) -> None:
        data = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        if self.announce_length:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.close_connection = True


@contextmanager
def serve(directory: Path, handler: type = QuietHandler) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 in a thread; yield the base URL."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A source folder with tiny.txt, registered in the checksum table."""
    monkeypatch.setitem(MULTI30K_SHA256, "tiny.txt", hashlib.sha256(GOOD).hexdigest())
    source = tmp_path / "source"
    source.mkdir()
    (source / "tiny.txt").write_bytes(GOOD)
    return source


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_table_has_every_official_file(multi30k_dir: Path) -> None:
    for line in (multi30k_dir / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert MULTI30K_SHA256[name] == digest
    assert len(MULTI30K_SHA256) == 4 * 4 + 3 * 2  # 4 splits x 4 languages; test_2017 lacks cs
    assert "test_2017_flickr.cs.gz" not in MULTI30K_SHA256


def test_http_download_verifies_and_reuses(multi30k_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    names = ["val.de.gz", "val.en.gz"]
    with serve(multi30k_dir) as url:
        paths = fetch(url, root, names)
    assert paths == [root / n for n in names]
    for name in names:
        assert (root / name).read_bytes() == (multi30k_dir / name).read_bytes()
    assert leftovers(root) == names  # no temporary files
    assert fetch("http://127.0.0.1:9/unreachable", root, names) == paths  # cached: no download


@pytest.mark.parametrize("kind", ["directory", "file URL"])
def test_local_sources(multi30k_dir: Path, tmp_path: Path, kind: str) -> None:
    source = str(multi30k_dir) if kind == "directory" else multi30k_dir.as_uri()
    (path,) = fetch(source, tmp_path, ["test_2016_flickr.fr.gz"])
    assert path.read_bytes() == (multi30k_dir / "test_2016_flickr.fr.gz").read_bytes()


def test_corrupted_download_is_rejected(tiny: Path, tmp_path: Path) -> None:
    (tiny / "tiny.txt").write_bytes(GOOD.replace(b"small", b"SMALL", 1))
    root = tmp_path / "root"
    with serve(tiny) as url, pytest.raises(ChecksumError) as err:
        fetch(url, root, ["tiny.txt"])
    message = str(err.value)
    actual = hashlib.sha256((tiny / "tiny.txt").read_bytes()).hexdigest()
    assert "tiny.txt" in message and MULTI30K_SHA256["tiny.txt"] in message and actual in message
    assert leftovers(root) == []
    with pytest.raises(ChecksumError, match=f"nothing was kept in {root} .*tiny.txt itself is"):
        fetch(str(tiny), root, ["tiny.txt"])  # a folder of the user's: their file stays
    assert (tiny / "tiny.txt").is_file() and leftovers(root) == []


def test_corrupted_cached_file_is_removed_and_fetched_again(
    tiny: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "tiny.txt").write_bytes(GOOD[:-1])
    with caplog.at_level(logging.WARNING, logger=download.__name__):
        fetch(str(tiny), root, ["tiny.txt"])
    assert (root / "tiny.txt").read_bytes() == GOOD
    assert "removed" in caplog.text and MULTI30K_SHA256["tiny.txt"] in caplog.text
    (root / "tiny.txt").write_bytes(GOOD[:-1])
    with pytest.raises(DataError):  # source gone: the corrupt copy is removed all the same
        fetch(str(tmp_path / "nowhere"), root, ["tiny.txt"])
    assert leftovers(root) == []


@pytest.mark.parametrize("announce_length", [True, False])
def test_partial_download_never_passes(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, announce_length: bool
) -> None:
    monkeypatch.setattr(TruncatingHandler, "announce_length", announce_length)
    root = tmp_path / "root"
    # announced length: caught as incomplete; unannounced: caught by the checksum
    error = "incomplete download" if announce_length else "checksum mismatch"
    with serve(tiny, TruncatingHandler) as url, pytest.raises(DataError, match=error):
        fetch(url, root, ["tiny.txt"])
    assert leftovers(root) == []


def test_missing_or_unknown_files(tiny: Path, tmp_path: Path) -> None:
    (tiny / "tiny.txt").unlink()
    with serve(tiny) as url, pytest.raises(DataError, match="could not fetch .*tiny.txt.*404"):
        fetch(url, tmp_path / "a", ["tiny.txt"])
    with pytest.raises(DataError, match="could not fetch"):
        fetch(str(tiny), tmp_path / "b", ["tiny.txt"])
    with pytest.raises(DataError, match="not a Multi30k"):
        fetch(str(tiny), tmp_path / "c", ["train.xx.gz"])


def test_a_failed_fetch_removes_the_folders_it_made_only(tiny: Path, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError, match="could not fetch"):
        fetch(str(tmp_path / "nowhere"), tmp_path / "data" / "multi30k" / "raw", ["tiny.txt"])
    assert leftovers(tmp_path) == ["data", "source"] and leftovers(tmp_path / "data") == []


def test_an_unreachable_source_names_the_file_and_the_source(tiny: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    with pytest.raises(DataError, match=r"could not fetch http://127.0.0.1:9/tiny.txt") as err:
        fetch("http://127.0.0.1:9/", root, ["tiny.txt"])  # the discard port: nothing listens
    assert "data.source=<folder>" in str(err.value)  # the way out without internet access
    assert leftovers(root) == []


def test_downloaded_files_are_as_readable_as_the_umask_allows(tiny: Path, tmp_path: Path) -> None:
    """Not mkstemp's 0600: a corpus folder shared with another user must be readable."""
    mask = os.umask(0o022)
    try:
        (path,) = fetch(str(tiny), tmp_path / "root", ["tiny.txt"])
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
