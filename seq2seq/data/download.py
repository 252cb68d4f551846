"""Fetch Multi30k files into a local folder; only files matching their published SHA-256 stay."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO

from seq2seq.errors import ChecksumError, DataError
from seq2seq.storage.manifest import sha256_file
from seq2seq.storage.permissions import as_umask_allows

log = logging.getLogger(__name__)

# SHA-256 of every official task-1 raw file (train, val, test_2016 and the 2017/2018 test sets).
MULTI30K_SHA256: dict[str, str] = {
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "test_2018_flickr.cs.gz": "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.fr.gz": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
}

_CHUNK = 1 << 20
# what an unreachable URL's message adds: the way out without internet access
_OFFLINE = (
    "; without internet access, point to a local copy of the corpus (a folder of the "
    "<split>.<lang>.gz files): data.source=<folder> (seq2seq-evaluate, -distill: data_source=)"
)


def is_url(source: str) -> bool:
    """Whether a corpus source is a URL base (http, https, file) rather than a local folder."""
    return "://" in source


def fetch(source: str, root: Path, names: list[str]) -> list[Path]:
    """Make sure ``root/<name>`` exists and matches its SHA-256 for each name; return the paths.

    ``source`` is a URL base (http, https, file) or a local directory holding the same file names.
    """
    root = Path(root)
    made = next((p for p in (*reversed(root.parents), root) if not p.exists()), None)
    root.mkdir(parents=True, exist_ok=True)
    try:
        return [_fetched(source, root, name) for name in names]
    except DataError:
        if made is not None:  # the folders made for a download that failed go too, if empty
            for folder in sorted((made, *made.rglob("*")), reverse=True):
                with contextlib.suppress(OSError):
                    folder.rmdir()
        raise


def _fetched(source: str, root: Path, name: str) -> Path:
    """``root/name``, fetched from ``source`` unless it is there with its SHA-256."""
    expected = MULTI30K_SHA256.get(name)
    if expected is None:
        raise DataError(f"{name!r} is not a Multi30k task-1 file with a published SHA-256")
    path = root / name
    if path.exists():
        actual = sha256_file(path)
        if actual == expected:
            return path
        path.unlink()
        log.warning(
            "removed %s: expected SHA-256 %s, got %s; downloading it again",
            path,
            expected,
            actual,
        )
    _download(source, name, path, expected)
    return path


def _download(source: str, name: str, dest: Path, expected: str) -> None:
    """Copy ``source/name`` to a temporary file beside ``dest``, verify it, then rename it."""
    url = is_url(source)
    where = f"{source.rstrip('/')}/{name}" if url else str(Path(source) / name)
    log.info("%s %s", "downloading" if url else "copying", where)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{name}.", suffix=".part")
    try:
        digest = hashlib.sha256()
        received = 0
        with os.fdopen(fd, "wb") as out:
            try:
                stream, size = _open(where, url)
                with stream:
                    for chunk in iter(lambda: stream.read(_CHUNK), b""):
                        digest.update(chunk)
                        out.write(chunk)
                        received += len(chunk)
            except (OSError, http.client.HTTPException) as e:
                hint = _OFFLINE if url and not isinstance(e, urllib.error.HTTPError) else ""
                raise DataError(f"could not fetch {where}: {e}{hint}") from e
        if size is not None and received != size:
            raise DataError(f"incomplete download of {where}: {received} of {size} bytes")
        actual = digest.hexdigest()
        if actual != expected:
            raise ChecksumError(
                f"checksum mismatch for {name} from {where}: expected SHA-256 {expected}, "
                f"got {actual}; nothing was kept in {dest.parent}"
                + ("" if url else f" ({where} itself is untouched)")
            )
        as_umask_allows(tmp)  # mkstemp made it 0600
        os.replace(tmp, dest)
        log.info("saved %s (%d bytes, SHA-256 verified)", dest, received)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _open(where: str, url: bool) -> tuple[BinaryIO, int | None]:
    """Open a URL or local file for reading; also return the announced size when there is one."""
    if not url:
        return open(where, "rb"), None
    response = urllib.request.urlopen(where, timeout=60)
    length = response.headers.get("Content-Length")
    return response, int(length) if length else None
