"""The host-side rules of every seq2seq search, written once: seq2seq's torch search and
commands, and this package's numpy search, read them here; the browser's search.js repeats the
search rules in JavaScript, held to these by tests/test_rules.py. Pure Python and numpy: no
torch, no onnxruntime (seq2seq imports this module on machines without onnxruntime)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# -- the search --------------------------------------------------------------------------------


def length_penalty(length: Any, alpha: float) -> Any:
    """GNMT's ((5 + length) / 6) ** alpha, which divides a hypothesis's log-prob sum so that
    long ones can win; ``length`` counts the EOS: an int, a float, a numpy array or a tensor."""
    return ((5.0 + length) / 6.0) ** alpha


def settled(kept: Any, best_live: Any, best_penalty: Any) -> Any:
    """Where a sentence's n-best can no longer change: its nbest-th finished score (-inf: not
    yet) at least its best live score over the largest length penalty that beam can still get
    (EOS at the length limit); numbers, numpy arrays or tensors."""
    return (kept > -np.inf) & (kept >= best_live / best_penalty)


def max_lengths(src_lengths: Sequence[int] | np.ndarray, a: float, b: int) -> np.ndarray:
    """Target tokens before EOS is forced, floor(a * src_len + b) and at least 0 (src_len counts
    the source EOS): an output as long as its input allows, and no search without an end."""
    lengths = np.asarray(src_lengths, dtype=np.float64)
    return np.maximum(np.floor(lengths * a + b), 0).astype(np.int64)


def min_lengths(
    src_lengths: Sequence[int] | np.ndarray, a: float, b: int, max_lengths: np.ndarray
) -> np.ndarray:
    """Target tokens before EOS is allowed, floor(a * src_len + b) (src_len as `max_lengths`
    counts it), at least 0 and at most ``max_lengths``: where they meet, the maximum wins."""
    lengths = np.asarray(src_lengths, dtype=np.float64)
    return np.clip(np.floor(lengths * a + b), 0, max_lengths).astype(np.int64)


def ngram_bans(tokens: Sequence[int], n: int) -> set[int]:
    """The tokens that would complete an n-gram already in ``tokens`` (a hypothesis's target
    pieces so far, no BOS): each is -inf at the next step, so no n-gram occurs twice (fairseq's
    no_repeat_ngram_size, OpenNMT-py's block_ngram_repeat); ``n`` 0: none."""
    if n <= 0 or len(tokens) < n:
        return set()
    tokens = list(tokens)
    prefix = tokens[len(tokens) - n + 1 :]  # the n - 1 last tokens
    starts = range(len(tokens) - n + 1)
    return {tokens[i + n - 1] for i in starts if tokens[i : i + n - 1] == prefix}


def repeated_ngrams(tokens: Sequence[Any], n: int) -> int:
    """How many of the n-grams of ``tokens`` occurred earlier in them (0: none repeats)."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams))


def follow_back(
    parents: Sequence[np.ndarray] | np.ndarray,
    fed: Sequence[np.ndarray] | np.ndarray,
    ends: np.ndarray,
    rows: np.ndarray,
    pad: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Beam search's back-pointers followed from each hypothesis's EOS (row ``rows[h]`` of step
    ``ends[h]``) to step 0, all hypotheses at once; step t's ``parents[t]`` and ``fed[t]`` give
    each row of step t + 1 its row of step t and the token it was fed. Returns the tokens
    [H, longest] (``pad`` after each hypothesis's end) and each one's row at every step
    [H, longest + 1] (0 after its end)."""
    ends = np.asarray(ends, dtype=np.int64)
    longest = int(ends.max(initial=0))
    tokens = np.full((len(ends), longest), pad, dtype=np.int64)
    at = np.zeros((len(ends), longest + 1), dtype=np.int64)
    row = np.asarray(rows, dtype=np.int64).copy()
    at[np.arange(len(ends)), ends] = row
    for t in range(longest - 1, -1, -1):
        back = t < ends  # hypotheses longer than t: their row of step t + 1 is row
        here = np.where(back, row, 0)
        tokens[:, t] = np.where(back, np.asarray(fed[t])[here], pad)
        row = np.where(back, np.asarray(parents[t])[here], row)
        at[:, t] = np.where(back, row, at[:, t])
    return tokens, at


def eos_banned(first: bool, at_limit: Any) -> Any | None:
    """Rows whose EOS is forbidden (a numpy or torch bool mask like ``at_limit``; None: none):
    at the ``first`` step every row not at its length limit, so no translation is empty."""
    return ~at_limit if first else None


# the search settings that must not be negative (0 is allowed: no penalty, no ban, no minimum)
NOT_NEGATIVE = ("alpha", "max_len_a", "max_len_b", "no_repeat_ngram", "min_len_a", "min_len_b")


def largest_beam(vocab_size: int) -> int:
    """The largest beam a target vocabulary of ``vocab_size`` subwords allows: each step keeps
    2 * beam_size candidates out of it."""
    return max(1, vocab_size // 2)


def beam_problem(beam_size: int, vocab_size: int) -> str | None:
    """Why ``beam_size`` is too large for the vocabulary, in one line (None: it is not)."""
    top = largest_beam(vocab_size)
    if beam_size <= top:
        return None
    return (
        f"beam_size={beam_size} is more than a target vocabulary of {vocab_size} subwords allows: "
        f"the largest beam is {top} (each step keeps 2 x beam_size candidates)"
    )


def finite_problem(key: str, value: Any) -> str | None:
    """A number that is NaN or infinite, in one line (None: finite, or not a float)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{key}={value} must be a finite number"
    return None


def search_problem(
    beam_size: int,
    nbest: int,
    batch_size: int,
    max_source_len: int,
    sampling: bool = False,
    vocab_size: int | None = None,
    **others: float,
) -> str | None:
    """What makes search settings unusable, in one line (None: nothing): a count below 1, a
    NaN or infinite or negative one of ``others`` (NOT_NEGATIVE's), more translations than
    beams (sampling draws its ``nbest``, beams or not), a beam the target vocabulary of
    ``vocab_size`` subwords cannot fill (None: not checked)."""
    counts = dict(
        beam_size=beam_size, nbest=nbest, batch_size=batch_size, max_source_len=max_source_len
    )
    for key, value in counts.items():
        if value < 1:
            return f"{key} must be at least 1, not {value}"
    for key, value in others.items():
        if problem := finite_problem(key, value):
            return problem
        if value < 0:
            return f"{key} must not be negative, not {value}"
    if nbest > beam_size and not sampling:
        return f"nbest={nbest} needs at least as many beams: add beam_size={nbest}"
    if vocab_size is not None and not sampling:
        return beam_problem(beam_size, vocab_size)
    return None


def one_line(text: str) -> str:
    """A detokenized translation as it is written: one line, words one space apart (a line
    break or tab the tokenizer gave back becomes a space)."""
    return " ".join(text.split())


# -- the input ---------------------------------------------------------------------------------


class InputError(ValueError):
    """Input that is not text: one line for the user."""


def decode_text(block: bytes, where: str, before: int = 0) -> str:
    """``block`` (whole lines of ``where``, after ``before`` lines) as text; invalid UTF-8 is
    InputError naming ``where`` and the line (a compressed or UTF-16 file: what it is and what to
    do), the one answer of every command that reads text."""
    try:
        return block.decode("utf-8")
    except UnicodeDecodeError as e:
        kind = next((k for magic, k in _NOT_UTF8 if block.startswith(magic)), None)
        if before == 0 and kind is not None:  # a whole file of another kind, said as such
            raise InputError(f"{where} is {kind}") from None
        line = before + block.count(b"\n", 0, e.start) + 1
        raise InputError(f"{where}, line {line}: invalid UTF-8 ({e.reason})") from None


# What a text reader may be given instead of UTF-8, by its first bytes, and what to do.
_NOT_UTF8 = [
    (b"\xfd7zXZ\x00", "xz-compressed, not text: decompress it first (xz -d)"),
    *[
        (b"BZh%d" % n, "bzip2-compressed, not text: decompress it first (bunzip2)")
        for n in range(1, 10)
    ],
    (b"\x1f\x8b", "gzip-compressed, not text: decompress it first (gunzip), or name it .gz"),
    (b"PK\x03\x04", "a zip archive, not text: unzip it first"),
    (b"\xff\xfe", "UTF-16 text (byte-order mark FF FE): convert it (iconv -f UTF-16 -t UTF-8)"),
    (b"\xfe\xff", "UTF-16 text (byte-order mark FE FF): convert it (iconv -f UTF-16 -t UTF-8)"),
]


class InputTooLong(Exception):
    """A line over max_source_len subwords: refused, never cut (``index``: 0-based). A
    subclass names the setting as its users give it (``option``) and adds its error base."""

    option = "max_source_len=..."

    def __init__(self, index: int, length: int, limit: int) -> None:
        self.index, self.length, self.limit = index, length, limit
        super().__init__(self.describe(f"input line {index + 1}"))

    def describe(self, where: str) -> str:
        """The one-line refusal, naming the line as the caller knows it."""
        return (
            f"{where} has {self.length:,} subwords; at most {self.limit:,} are translated "
            f"({self.option})"
        )


def encode_lines(
    encode: Callable[[list[str]], list[list[int]]],
    lines: Sequence[str],
    limit: int,
    too_long: type[InputTooLong] = InputTooLong,
) -> list[list[int]]:
    """Subword ids of each line by ``encode`` ([] for a blank one), stripped, lone surrogates and
    undecodable bytes as "?" (sentencepiece takes only UTF-8); ``too_long`` for the first line
    over ``limit`` subwords: a line is refused, never cut."""
    text = [line.encode("utf-8", "replace").decode("utf-8").strip() for line in lines]
    encoded = encode(text)
    for index, ids in enumerate(encoded):
        if len(ids) > limit:
            raise too_long(index, len(ids), limit)
    return [ids if line else [] for ids, line in zip(encoded, text, strict=True)]


# -- the folders -------------------------------------------------------------------------------

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def damage(path: Path) -> list[str]:
    """What is wrong with the files that the manifest ``path`` lists ({name: {"size", "sha256"}},
    names relative to its folder); empty: nothing. A missing or unreadable manifest is itself
    reported: a damaged or tampered folder is refused, whoever reads it."""
    try:
        expected = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return [f"{path.name} cannot be read ({e})"]
    problems = []
    for name, facts in expected.items():
        file = path.parent / name
        if not file.is_file():
            problems.append(f"{name} is missing")
        elif file.stat().st_size != facts.get("size"):
            problems.append(f"{name} has {file.stat().st_size} bytes, not {facts.get('size')}")
        elif sha256_file(file) != facts.get("sha256"):
            problems.append(f"{name} does not match its SHA-256")
    return problems
