"""How a user steers one line's output, written once for every search: a prefix it starts
with, phrases it must hold (lexical constraints), and the glossary whose terms become such
phrases. Text in, target ids out, and the padded arrays a batch's search reads. Pure Python and
numpy, like rules.py: seq2seq's torch search and this package's numpy search both use it."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from seq2seq_lite.glossary import glossary_hits

NEED_BEAM = "{} need beam search: beam_size of 2 or more, no sampling"  # {}: whose phrases
CONSTRAINTS_NEED_BEAM = NEED_BEAM.format("constraints")


def constraints_problem(
    has_phrases: bool, beam_size: int, sampling: bool = False, what: str = "constraints"
) -> str | None:
    """Why phrases (constraints, a glossary's terms) cannot be met by this search; None when
    they can: beam search meets them, greedy search and sampling cannot. ``what``: where the
    phrases come from, as the user knows it (e.g. "the glossary's terms (terms=g.tsv)")."""
    if not has_phrases or (beam_size >= 2 and not sampling):
        return None
    return NEED_BEAM.format(what)


def glossary_terms(where: str) -> str:
    """The glossary named ``where`` (``terms=g.tsv``) as the source of phrases, in messages."""
    return f"the glossary's terms ({where})"


Encode = Callable[[list[str]], list[list[int]]]


@dataclass
class LineSteering:
    """One line's requests as text: its output starts with ``prefix`` ("": none) and holds each
    phrase of ``constraints``; ``terms`` are the glossary's hits on the line, (source phrase,
    target phrase): their target phrases are forced where the translation lacks one."""

    prefix: str = ""
    constraints: list[str] = field(default_factory=list)
    terms: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str):
            raise TypeError(f"prefix is one string, not {type(self.prefix).__name__}")
        if isinstance(self.constraints, str):  # its letters would each be a phrase
            raise TypeError(f"constraints is a list of phrases: [{self.constraints!r}]")


@dataclass
class SteeringIds:
    """A `LineSteering` in target ids: ``prefix`` forced first, each of ``phrases`` placed once;
    ``terms``: the glossary's target phrases, placed too where a translation without them lacks
    one (`decode_steered`); ``warnings``: what of the line's steering cannot be met as asked."""

    prefix: list[int] = field(default_factory=list)
    phrases: list[list[int]] = field(default_factory=list)
    terms: list[list[int]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list, compare=False)

    def forced(self) -> SteeringIds:
        """The glossary's terms as phrases too."""
        extra = [t for t in self.terms if t not in self.phrases]
        return SteeringIds(self.prefix, [*self.phrases, *extra])


def word_continuations(pieces: Sequence[str]) -> np.ndarray:
    """[V] bool: the target pieces that go on with the word before them (no word-start mark,
    a letter or digit first). None may follow a placed phrase: "cat" must not become "cate";
    punctuation and EOS may."""
    return np.array([p[:1].isalnum() for p in pieces], dtype=bool)


def clean(text: str) -> str:
    """``text`` stripped, undecodable characters as "?" (sentencepiece takes only UTF-8)."""
    return text.encode("utf-8", "replace").decode("utf-8").strip()


def encode_steering(
    encode: Encode,
    steer: Sequence[LineSteering | None] | None,
    unk: int | None = None,
    no_repeat_ngram: int = 0,
) -> list[SteeringIds] | None:
    """Each line's steering in target ids by ``encode``: the prefix and each constraint encoded
    alone, as the target is cut into pieces (pieces of "A dog" alone decode to "A dog"; a word alone
    begins a word, so "dog" matches " dog" inside a sentence); None where no line asks anything,
    so that the search does no work. Each line's warnings say what cannot be met as asked: a
    phrase with characters the target vocabulary lacks (``unk``, its unknown piece: they come
    out as ⁇), and a phrase the search's ``no_repeat_ngram`` makes impossible (left out); a
    glossary's term named by its entry's source phrase (its line in the file; one message whether
    or not the term opens the line, which capitalises it)."""
    if steer is None or not any(
        g and (g.prefix.strip() or g.constraints or g.terms) for g in steer
    ):
        return None
    texts: list[str] = []
    for g in steer:
        if g is not None:
            texts += [clean(g.prefix), *(clean(c) for c in g.constraints)]
            texts += [clean(t) for _, t in g.terms]
    ids = [list(i) for i in encode(texts)]
    lacking = _lacking(encode, texts, ids, unk) if unk is not None else {}
    pieces = iter(zip(texts, ids, strict=True))
    encoded = []
    for g in steer:
        if g is None:
            encoded.append(SteeringIds())
            continue
        prefix = next(pieces)
        asked = [_Asked(f"constraint '{c[0]}'", *c) for c in (next(pieces) for _ in g.constraints)]
        asked += [_Asked(f"glossary entry '{s}'", *next(pieces), True) for s, _ in g.terms]
        encoded.append(_line(prefix, asked, lacking, no_repeat_ngram))
    return encoded


class _Asked(NamedTuple):
    """A phrase a line asks for: ``name`` as its warnings say it, its text and target ids, and
    whether it is a glossary's term (else a constraint, or the prefix)."""

    name: str
    text: str
    ids: list[int]
    term: bool = False


def _line(
    prefix: tuple[str, list[int]], asked: list[_Asked], lacking: dict[str, str], n: int
) -> SteeringIds:
    """One line's `SteeringIds` from its prefix (text, ids) and phrases, with its warnings
    (``lacking``: `_lacking`; ``n``: the search's no_repeat_ngram)."""
    line = SteeringIds(prefix[1] if prefix[0] else [])
    asked = [a for a in asked if a.ids]  # a phrase of blanks: none
    clashes = _clashes(line.prefix, asked, n) if n else {}
    given = [_Asked(f"prefix '{prefix[0]}'", *prefix)]
    given += [a for at, a in enumerate(asked) if at not in clashes]
    notes = [_lacks(a.name, lacking[a.text]) for a in given if a.text in lacking]
    for at, a in enumerate(asked):
        if at in clashes:
            run = "a target piece" if n == 1 else f"a run of {n} target pieces"
            bans = f"no_repeat_ngram={n} bans"
            notes.append(f"{a.name} repeats {run} of {clashes[at]}, which {bans}: left out")
        else:
            (line.terms if a.term else line.phrases).append(a.ids)
    line.warnings = notes
    return line


def _lacks(name: str, chars: str) -> str:
    """The warning for the phrase ``name``, whose characters ``chars`` the target vocabulary
    lacks, each quoted ('Z', 'ü' or '€'): run together, they read as one substring."""
    quoted = [f"'{c}'" for c in chars]
    listed = f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
    verb = "come" if len(quoted) > 1 else "comes"
    return f"{name}: the target vocabulary has no {listed}, which {verb} out as ⁇"


def _lacking(encode: Encode, texts: list[str], ids: list[list[int]], unk: int) -> dict[str, str]:
    """Of ``texts`` whose ``ids`` hold ``unk``: the characters that encode to it, in order."""
    flagged = [t for t, i in zip(texts, ids, strict=True) if unk in i]
    chars = sorted({c for t in flagged for c in t if not c.isspace()})
    if not chars:
        return {}
    lacked = {c for c, i in zip(chars, encode(chars), strict=True) if unk in i}
    found = {t: "".join(c for c in dict.fromkeys(t) if c in lacked) for t in flagged}
    return {t: c for t, c in found.items() if c}


def _clashes(prefix: list[int], asked: list[_Asked], n: int) -> dict[int, str]:
    """The phrases (their indices in ``asked``) that a ban on repeated n-grams makes impossible,
    each with what it clashes with: itself, the prefix or an earlier phrase that is kept (the
    first of two wins; one inside the prefix, which places it, is met)."""

    def grams(ids: list[int]) -> list[tuple[int, ...]]:
        return [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]

    owners = dict.fromkeys(grams(prefix), "the prefix")
    found = {}
    for at, phrase in enumerate(asked):
        mine = grams(phrase.ids)
        if holds(prefix, phrase.ids):
            continue
        if len(set(mine)) < len(mine):
            found[at] = "itself"
        elif clash := next((g for g in mine if g in owners), None):
            found[at] = owners[clash]
        else:
            owners.update(dict.fromkeys(mine, phrase.name))
    return found


def holds(tokens: Sequence[int], phrase: Sequence[int], joins: np.ndarray | None = None) -> bool:
    """Whether ``phrase`` occurs in ``tokens`` (target ids) and, by ``joins``
    (`word_continuations`; None: any), ends a word there."""
    n, tokens = len(phrase), list(tokens)
    return any(
        tokens[i : i + n] == list(phrase)
        and (joins is None or i + n == len(tokens) or not joins[tokens[i + n]])
        for i in range(len(tokens) - n + 1)
    )


def decode_steered(
    decode: Callable[[list[int], Sequence[SteeringIds] | None], list[list[Any]]],
    lines: list[int],
    steer: Sequence[SteeringIds] | None,
    joins: np.ndarray | None = None,
) -> list[list[Any]]:
    """The n-best lists of ``lines`` (indices into ``steer``) by ``decode(lines, steer)``, each
    with its prefix and constraints; a glossary's terms are forced only on the lines whose
    best translation without them lacks one, as whole words by ``joins`` (a second search for
    those lines), so a line that already holds its terms keeps the translation it had."""
    if steer is None or not any(s.terms for s in steer):
        return decode(lines, steer)
    plain = [SteeringIds(s.prefix, s.phrases) for s in steer]
    found = decode(lines, plain if any(s.prefix or s.phrases for s in plain) else None)
    again = [
        (at, i)
        for at, (i, hyps) in enumerate(zip(lines, found, strict=True))
        if hyps and not all(holds(hyps[0].tokens, t, joins) for t in steer[i].terms)
    ]
    if again:
        forced = [s.forced() for s in steer]
        for (at, _), hyps in zip(again, decode([i for _, i in again], forced), strict=True):
            found[at] = hyps
    return found


def steering_arrays(
    steer: Sequence[SteeringIds] | None, chunk: Sequence[int], pad: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The steering of the lines ``chunk`` (their indices, in batch order) as arrays: prefixes
    [b, P] and phrases [b, C, L] (int64, ``pad`` after each; a line with fewer phrases has
    all-``pad`` ones); each None where no line of the chunk has one."""
    rows = [steer[i] for i in chunk] if steer is not None else []
    width = max((len(g.prefix) for g in rows), default=0)
    prefix = None
    if width:
        prefix = np.full((len(rows), width), pad, dtype=np.int64)
        for row, g in enumerate(rows):
            prefix[row, : len(g.prefix)] = g.prefix
    count = max((len(g.phrases) for g in rows), default=0)
    if not count:
        return prefix, None
    longest = max(len(p) for g in rows for p in g.phrases)
    phrases = np.full((len(rows), count, longest), pad, dtype=np.int64)
    for row, g in enumerate(rows):
        for c, ids in enumerate(g.phrases):
            phrases[row, c, : len(ids)] = ids
    return prefix, phrases


def forced_max_lengths(
    limits: np.ndarray, prefix: np.ndarray | None, phrases: np.ndarray | None, pad: int
) -> np.ndarray:
    """The length limits raised so that each line's prefix and phrases fit with one token more:
    max(limit, len(prefix) + tokens of the phrases + 1)."""
    forced = np.zeros_like(limits)
    if prefix is not None:
        forced = forced + (prefix != pad).sum(1)
    if phrases is not None:
        forced = forced + (phrases != pad).sum((1, 2))
    return np.where(forced > 0, np.maximum(limits, forced + 1), limits)


def with_glossary(
    steer: LineSteering | None, line: str, glossary: Sequence[tuple[str, str]]
) -> LineSteering:
    """``steer`` with the glossary's hits on ``line`` added as its terms."""
    steer = steer or LineSteering()
    hits = glossary_hits(line, glossary)
    return LineSteering(steer.prefix, list(steer.constraints), [*steer.terms, *hits])


def constraint_lines(lines: Sequence[str]) -> list[list[str]]:
    """The phrases of each line of a ``constraints=`` file: tab-separated, blanks dropped."""
    return [[p.strip() for p in line.split("\t") if p.strip()] for line in lines]


def steer_lines(
    lines: Sequence[str],
    prefixes: Sequence[str] | None,
    constraints: Sequence[Sequence[str]] | None,
    glossary: Sequence[tuple[str, str]],
    start: int = 0,
) -> list[LineSteering]:
    """The steering of input ``lines`` (the input's lines ``start`` on): each its line of
    ``prefixes`` and of ``constraints`` (None: not given), with the glossary's hits added."""
    found = []
    for i, line in enumerate(lines, start):
        prefix = prefixes[i] if prefixes is not None else ""
        phrases = list(constraints[i]) if constraints is not None else []
        found.append(with_glossary(LineSteering(prefix, phrases), line, glossary))
    return found


@dataclass
class SteeringLines:
    """What steers an input's lines: per-line prefixes and constraint lists (None: not given)
    and a glossary; ``names`` say each per-line file as its command takes it (``prefix=p.txt``,
    ``--prefix p.txt``)."""

    prefixes: list[str] | None
    constraints: list[list[str]] | None
    glossary: list[tuple[str, str]]
    names: dict[str, str]
    warn: Callable[[str], None] | None = None  # told of steering given for an empty line

    def count_problem(self, count: int, input_name: str, more: bool = False) -> str | None:
        """A per-line file of another line count than the input's ``count`` lines, or (``more``:
        the input goes on) of fewer; None: none."""
        for key, lines in (("prefix", self.prefixes), ("constraints", self.constraints)):
            if lines is not None and (len(lines) < count if more else len(lines) != count):
                said = f"more than {len(lines)}" if more else count
                return (
                    f"{self.names[key]} has {len(lines)} line{'s' * (len(lines) != 1)}, "
                    f"{input_name} has {said}: "
                    "give one line per input line (an empty line: none)"
                )
        return None

    def for_lines(self, lines: Sequence[str], start: int = 0) -> list[LineSteering]:
        """The steering of input ``lines``, the input's lines ``start`` on; a prefix or
        constraints given for an empty line (which is not translated) are warned of."""
        steer = steer_lines(lines, self.prefixes, self.constraints, self.glossary, start)
        for number, (line, given) in enumerate(zip(lines, steer, strict=True), start + 1):
            asked = {"prefix": given.prefix.strip(), "constraints": given.constraints}
            files = " and ".join(self.names[key] for key, value in asked.items() if value)
            if files and not line.strip() and self.warn is not None:
                self.warn(f"input line {number} is empty: {files} of that line is not used")
        return steer


@dataclass
class SteeringWarnings:
    """What of an input's steering its translations could not meet (`SteeringIds.warnings`),
    told to ``warn`` once a message, at its first line; `told` counts the other lines."""

    warn: Callable[[str], None] | None
    said: dict[str, int] = field(default_factory=dict)  # message: lines

    def tell(self, start: int, warnings: Sequence[Sequence[str]]) -> None:
        """The warnings of each of the input's lines ``start`` on."""
        for number, given in enumerate(warnings, start + 1):
            for message in given:
                if message not in self.said and self.warn is not None:
                    self.warn(f"input line {number}: {message}")
                self.said[message] = self.said.get(message, 0) + 1

    def told(self) -> None:
        """The messages met on more lines than the first, with their counts."""
        for message, lines in self.said.items():
            if lines > 1 and self.warn is not None:
                more = f"{lines - 1} more input line{'s' if lines > 2 else ''}"
                self.warn(f"{more} the same: {message}")


def as_words(phrase: str, text: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` with no letter or digit right before or after it."""
    return re.search(r"(?<![^\W_])" + re.escape(phrase) + r"(?![^\W_])", text) is not None


def steering_report(texts: Sequence[str], steer: Sequence[LineSteering]) -> dict[str, int]:
    """How far outputs ``texts`` (detokenised) kept their lines' steering: prefixes asked and
    kept (the output starts with the prefix's text), constraints asked and placed (the phrase's
    text occurs in the output as whole words: "man" is not in "woman"), glossary terms hit and
    placed, and the lines with a hit."""
    asked = [(t, s) for t, s in zip(texts, steer, strict=True)]
    prefixed = [(t, s.prefix.strip()) for t, s in asked if s.prefix.strip()]
    phrases = [(t, c.strip()) for t, s in asked for c in s.constraints if c.strip()]
    terms = [(t, target.strip()) for t, s in asked for _, target in s.terms]
    return {
        "prefixes": len(prefixed),
        "prefixes_kept": sum(t.startswith(p) for t, p in prefixed),
        "constraints": len(phrases),
        "constraints_placed": sum(as_words(c, t) for t, c in phrases),
        "terms": len(terms),
        "terms_placed": sum(as_words(target, t) for t, target in terms),
        "terms_lines": sum(bool(s.terms) for _, s in asked),
    }
