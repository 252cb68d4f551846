"""A glossary (terminology file): ``source phrase<TAB>target phrase`` a line, read once, and
its hits on an input line, whose target phrases then steer that line's output
(`steering.with_glossary`). Pure Python, shared by seq2seq's commands, its server and lite."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

OPENING = " \t\"'([{¿¡-–—„“”‚‘’«»‹›"  # what may come before a line's first word


def matchable(text: str) -> str:
    """``text`` as a glossary matches it: NFC, each run of white space one space; its sources
    and the lines alike, so a file saved in NFD (macOS) or a doubled space still matches."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def read_glossary(
    text: str, where: str, warn: Callable[[str], None] | None = None, max_chars: int = 0
) -> list[tuple[str, str]]:
    """A glossary's entries, one ``source phrase<TAB>target phrase`` a line, longest source
    phrase first; ValueError naming the line of a bad one, or of a phrase over ``max_chars``
    characters (0: any length). "#" lines are comments and blank ones skipped; a source phrase
    that starts with "#" is written "\\#" (as in .gitignore). A UTF-8 byte order mark (as some
    editors save) is not part of the first phrase. ``warn`` is told, a line each, of a source
    phrase given twice (the first line wins), of comments that hold an entry, and of no entries."""
    entries, first, commented = [], {}, []
    for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1):
        if line.lstrip().startswith("#"):
            commented += [number] if _hashtag_entry(line.lstrip()) else []
            continue
        if not line.strip():
            continue
        source, target = _entry(line, f"{where}, line {number}", max_chars)
        if source in first:
            if warn is not None:
                warn(
                    f"{where}, lines {first[source]} and {number}: the source phrase '{source}' "
                    f"twice; line {first[source]}'s target is used"
                )
            continue
        first[source] = number
        entries.append((source, target))
    _tell(warn, where, entries, commented)
    return sorted(entries, key=lambda e: -len(e[0]))


def _entry(line: str, where: str, max_chars: int) -> tuple[str, str]:
    """One line's (source phrase, target phrase), the source `matchable` and its "\\#" a "#";
    ValueError saying what is wrong ``where``."""
    fields = [f.strip() for f in line.split("\t")]
    if len(fields) != 2 or not all(fields):
        raise ValueError(f"{where}: want 'source phrase<TAB>target phrase'")
    for side, phrase in zip(("source", "target"), fields, strict=True):
        if max_chars and len(phrase) > max_chars:
            said = f"the {side} phrase has {len(phrase):,} characters"
            raise ValueError(f"{where}: {said}; at most max_chars={max_chars:,}")
    source = fields[0][1:] if fields[0].startswith("\\#") else fields[0]
    return matchable(source), fields[1]


def _hashtag_entry(comment: str) -> bool:
    """Whether a comment line reads as an entry whose source starts with "#" ("#MeToo<TAB>...",
    not "# Hund<TAB>dog", an entry commented out)."""
    fields = [f.strip() for f in comment.split("\t")]
    return not comment[1:2].isspace() and len(fields) == 2 and all(f.strip("#") for f in fields)


def _tell(
    warn: Callable[[str], None] | None, where: str, entries: list, commented: list[int]
) -> None:
    """Warn of comment lines that hold an entry and of a glossary without entries."""
    if warn is None:
        return
    if commented:
        lines = ", ".join(map(str, commented[:5])) + (", ..." if len(commented) > 5 else "")
        warn(
            f"{where}, line {lines}: read as a comment (a '#' line); a source phrase that "
            "starts with '#' is written '\\#'"
        )
    if not entries:
        warn(f"{where} has no entries (blank or '#' lines only): it changes nothing")


def glossary_hits(line: str, glossary: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The entries whose source phrase occurs in ``line`` as whole words and as written ("Hund"
    matches "Hund," not "Hundehütte"; "junge" not the noun "Junge"), but for the first letter of
    the line's first word; in the order they occur; a longer phrase wins over a shorter one
    inside it, and each entry counts once. At the line's start the target's first letter is a
    capital ("zwei -> two": "Zwei Hunde" gives "Two"; not "iPhone"). Both sides are `matchable`
    first."""
    taken: list[tuple[int, int]] = []
    hits, line = [], matchable(line)
    for source, target in ((matchable(s), t) for s, t in glossary):  # longest first
        first = "(?:" + "|".join(re.escape(c) for c in {source[:1].lower(), source[:1].upper()})
        pattern = r"(?<!\w)" + first + ")" + re.escape(source[1:]) + r"(?!\w)"
        for m in re.finditer(pattern, line):
            starts = not line[: m.start()].strip(OPENING)
            if m.group()[:1] != source[:1] and not starts:
                continue  # another case inside the line: another word
            if all(m.end() <= a or m.start() >= b for a, b in taken):
                taken.append((m.start(), m.end()))
                hits.append((m.start(), source, _at_line_start(target) if starts else target))
                break
    return [(s, t) for _, s, t in sorted(hits)]


def _at_line_start(target: str) -> str:
    """A term opening the line starts with a capital ("two" -> "Two"), unless its first word is
    cased on purpose ("iPhone", "eBay" stay as they are)."""
    word = target.split(" ", 1)[0]
    return target[:1].upper() + target[1:] if word == word.lower() else target
