"""Invalid UTF-8 answered one way by every command that reads text: exit 1 and one line,
``<file or standard input>, line N: invalid UTF-8 (<reason>)``, from one function
(seq2seq_lite.rules.decode_text, which lite/ reads too)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import subprocess
from pathlib import Path

import pytest
from run_helpers import cli
from seq2seq_lite.rules import InputError
from seq2seq_lite.text import decode_lines

from seq2seq.data.stream import decode_text, line_blocks, open_binary
from seq2seq.errors import DataError

GOOD = ["Ein Hund läuft.", "Zwei Männer spielen Fußball."]
BAD = b"\xff\xfe kaputt"  # line 3 of every input below
MESSAGE = "line 3: invalid UTF-8 (invalid start byte)"


@pytest.mark.parametrize(
    "data",
    [
        b"a\nb\n\xff\n",
        b"a\r\nb\r\n\xe2\x98\n",
        b"\n\n\xc3\x28",
        "é\nü\n".encode() + b"\xed\xa0\x80",  # a surrogate
    ],
)
def test_lite_words_invalid_utf8_as_the_library_does(data: bytes) -> None:
    with pytest.raises(DataError) as ours:
        decode_text(data, "x.de")
    with pytest.raises(InputError) as lite:
        decode_lines(data, "x.de")
    assert str(lite.value) == str(ours.value) and str(ours.value).startswith("x.de, line 3: ")
    assert decode_lines(b"a\r\n\nb", "-") == ["a", "", "b"]  # as seq2seq-translate splits


TEXT = "".join(f"{line}\n" for line in GOOD)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (lzma.compress(TEXT.encode()), "is xz-compressed, not text: decompress it first (xz -d)"),
        (bz2.compress(TEXT.encode()), "is bzip2-compressed, not text: decompress it first"),
        (gzip.compress(TEXT.encode()), "is gzip-compressed, not text: decompress it first"),
        (
            TEXT.encode("utf-16-le").join([b"\xff\xfe", b""]),
            "is UTF-16 text (byte-order mark FF FE)",
        ),
        (
            TEXT.encode("utf-16-be").join([b"\xfe\xff", b""]),
            "is UTF-16 text (byte-order mark FE FF)",
        ),
    ],
    ids=["xz", "bzip2", "gzip", "utf-16-le", "utf-16-be"],
)
def test_a_compressed_or_utf16_file_is_named_as_such(data: bytes, said: str) -> None:
    """All of these were 'line 1: invalid UTF-8', which says nothing of what to do."""
    with pytest.raises(DataError) as ours:
        decode_text(data, "x.de")
    with pytest.raises(InputError) as lite:
        decode_lines(data, "x.de")
    assert str(lite.value) == str(ours.value) and str(ours.value).startswith(f"x.de {said}")
    with pytest.raises(DataError, match="x.de, line 2: invalid UTF-8"):
        decode_text(b"a\n" + data, "x.de")  # a line of binary inside text: as before


@pytest.mark.parametrize(
    ("lines", "said"), [(100, ""), (200_000, r" \(after [\d,]+ whole lines\)")]
)
def test_a_cut_gz_file_says_so(tmp_path: Path, lines: int, said: str) -> None:
    """It said 'cannot read x.de.gz after line 0: Compressed file ended before the
    end-of-stream marker was reached'."""
    whole = gzip.compress("".join(f"Zeile {i} von vielen.\n" for i in range(lines)).encode())
    path = tmp_path / "x.de.gz"
    path.write_bytes(whole[: len(whole) * 3 // 4])
    with pytest.raises(DataError, match=f"^{path} is cut short{said}: copy or download it again$"):
        for _ in line_blocks(open_binary(path), str(path)):
            pass


def lines_file(path: Path, bad: bytes = BAD) -> Path:
    path.write_bytes("".join(f"{line}\n" for line in GOOD).encode() + bad + b"\n")
    return path


def refusal(module: str, *args: str, stdin: bytes = b"") -> tuple[str, str]:
    """(stdout, the one error line) of a command that must stop on its input."""
    proc = subprocess.run(
        [*cli(module), *args],
        input=stdin,
        capture_output=True,
        timeout=300,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if "ERROR" in line]
    assert len(errors) == 1, err
    return proc.stdout.decode(), errors[0]


@pytest.mark.slow
def test_every_command_names_the_file_and_line(smoke_run: Path, tmp_path: Path) -> None:
    src, ref = lines_file(tmp_path / "in.de"), tmp_path / "ref.en"
    ref.write_text("A dog.\nTwo men.\nBroken.\n", encoding="utf-8")
    pairs = tmp_path / "pairs.txt"
    pairs.write_bytes(b"ein Hund ||| a dog\nzwei ||| two\n" + BAD + b" ||| x\n")
    run = f"run_dir={smoke_run}"
    out, error = refusal("evaluate", run, f"input={src}", f"reference={ref}")
    assert error.endswith(f"{src}, {MESSAGE}")
    out, error = refusal("align", run, f"input={pairs}")
    assert error.endswith(f"{pairs}, {MESSAGE}")
    mono = f"mono={src}"
    out, error = refusal("backtranslate", run, mono, f"out={tmp_path / 'bt'}")
    assert error.endswith(f"{src}, {MESSAGE}")
    # a filter: the lines before the bad one are translated and written, then it stops
    out, error = refusal("translate", run, "beam_size=1", stdin=src.read_bytes())
    assert error.endswith(f"standard input, {MESSAGE}")
    assert len(out.splitlines()) == 2 and all(out.splitlines())
