"""What a request may hold and what it is answered: parsing with its limits, one translated
sentence as JSON, errors as ``{"error": ...}``, the API key."""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from seq2seq_lite.steering import (
    LineSteering,
    constraints_problem,
    glossary_terms,
    steer_lines,
)
from starlette.requests import Request
from starlette.responses import JSONResponse

from seq2seq.data.stream import decode_text
from seq2seq.decoding.alignment import alignment_record
from seq2seq.decoding.inference import Translation, TranslatorBase
from seq2seq.decoding.nbest import json_candidates
from seq2seq.errors import DataError
from seq2seq.serving.settings import ServeConfig


class BadRequest(Exception):
    """User input the API refuses: the HTTP status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Query(NamedTuple):
    """What a request asks: its sentences, the search, and which model answers."""

    sentences: list[str]
    beam_size: int
    nbest: int
    alignment: bool
    model: str
    steer: list[LineSteering] | None = None  # each sentence's prefix, constraints, terms


FIELDS = {"sentences", "beam_size", "nbest", "alignment", "model", "prefixes", "constraints"}


def parse(
    body: bytes,
    cfg: ServeConfig,
    models: Sequence[str],
    glossary: Sequence[tuple[str, str]] = (),
) -> Query:
    """The query of a request body, or BadRequest; ``models`` are the names served, the first
    the default; the served ``glossary``'s hits become constraints."""
    try:
        text = decode_text(body, "the request body")  # the message every command gives
    except DataError as e:
        raise BadRequest(400, str(e)) from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise BadRequest(400, f"the body is not JSON: {e}") from None
    except RecursionError:  # [[[[...]]]]: valid, and deeper than Python's parser goes
        raise BadRequest(400, "the body's JSON nests too deeply") from None
    options: dict[str, Any] = {}
    if isinstance(data, dict):
        unknown = set(data) - FIELDS
        if unknown:
            names, known = ", ".join(sorted(unknown)), ", ".join(sorted(FIELDS))
            raise BadRequest(422, f"unknown fields: {names}; the fields are {known}")
        options, data = data, data.get("sentences")
    if not isinstance(data, list) or not all(isinstance(s, str) for s in data):
        raise BadRequest(422, 'send a JSON list of sentences (strings), or {"sentences": [...]}')
    if not data:
        raise BadRequest(422, "no sentences")
    if len(data) > cfg.max_sentences:
        raise BadRequest(413, f"{len(data)} sentences; at most {cfg.max_sentences} per request")
    for i, sentence in enumerate(data):
        if len(sentence) > cfg.max_chars:
            raise BadRequest(
                413, f"sentence {i} has {len(sentence)} characters; at most {cfg.max_chars}"
            )
        if "\n" in sentence or "\r" in sentence:
            raise BadRequest(422, f"sentence {i} has a line break: send one sentence per item")
    beam = options.get("beam_size", cfg.beam_size)
    # the server's nbest is the default, capped by a request's smaller beam
    default_nbest = min(cfg.nbest, beam) if type(beam) is int else cfg.nbest
    nbest, alignment = options.get("nbest", default_nbest), options.get("alignment", False)
    for name, value, top in (("beam_size", beam, cfg.max_beam), ("nbest", nbest, beam)):
        if type(value) is not int or not 1 <= value <= top:
            raise BadRequest(422, f"{name} must be a whole number from 1 to {top}")
    if type(alignment) is not bool:
        raise BadRequest(422, "alignment must be true or false")
    steer = _steering(data, options, glossary, beam, cfg)
    model = _model(options.get("model", models[0]), models)
    return Query(data, beam, nbest, alignment, model, steer)


def _steering(
    sentences: list[str],
    options: dict,
    glossary: Sequence[tuple[str, str]],
    beam: int,
    cfg: ServeConfig,
) -> list[LineSteering] | None:
    """Each sentence's steering from the request's "prefixes" (a string or null each) and
    "constraints" (a list of phrases each), with the glossary's hits; None where none. A
    sentence's prefix, and its phrases together, have at most ``max_chars`` characters, and it
    has at most ``max_constraints`` phrases: the search's work grows with them."""
    prefixes, constraints = options.get("prefixes"), options.get("constraints")
    count = len(sentences)
    wrong = f"must be a list of {count}"
    if prefixes is not None and (
        not isinstance(prefixes, list)
        or len(prefixes) != count
        or not all(p is None or isinstance(p, str) for p in prefixes)
    ):
        raise BadRequest(
            422, f"prefixes must be a list of {count} strings (or null), one a sentence"
        )
    if constraints is not None and (
        not isinstance(constraints, list)
        or len(constraints) != count
        or not all(isinstance(c, list) and all(isinstance(p, str) for p in c) for c in constraints)
    ):
        raise BadRequest(422, f"constraints {wrong} lists of phrases (strings), one a sentence")
    for i, phrases in enumerate(constraints or []):
        if len(phrases) > cfg.max_constraints:
            raise BadRequest(
                413, f"sentence {i} has {len(phrases)} constraints; at most {cfg.max_constraints}"
            )
        _within_chars(i, "constraints", sum(map(len, phrases)), cfg.max_chars)
        if any(c in phrase for phrase in phrases for c in "\t\r\n"):
            raise BadRequest(
                422, f"sentence {i}'s constraints hold a tab or line break: one phrase an item"
            )
        if not all(phrase.strip() for phrase in phrases):  # else left out in silence
            raise BadRequest(422, f"sentence {i}'s constraints hold an empty phrase")
    for i, prefix in enumerate(prefixes or []):
        _within_chars(i, "prefix", len(prefix or ""), cfg.max_chars)
        if any(c in (prefix or "") for c in "\r\n"):
            raise BadRequest(422, f"sentence {i}'s prefix has a line break: a prefix is one line")
    if prefixes is None and constraints is None and not glossary:
        return None
    prefixes = [p or "" for p in prefixes] if prefixes is not None else None
    steer = steer_lines(sentences, prefixes, constraints, glossary)
    _with_terms_within(steer, cfg)
    asked = any(s.constraints for s in steer)
    what = "constraints" if asked else glossary_terms(f"the server's terms={cfg.terms}")
    if problem := constraints_problem(asked or any(s.terms for s in steer), beam, what=what):
        raise BadRequest(422, problem)
    return steer


def _with_terms_within(steer: Sequence[LineSteering], cfg: ServeConfig) -> None:
    """413 for a sentence whose constraints and glossary terms together are over the limits
    (``max_constraints`` phrases, ``max_chars`` characters): the search places them all."""
    for i, s in enumerate(steer):
        if not s.terms:
            continue
        phrases = [*s.constraints, *(target for _, target in s.terms)]
        if len(phrases) > cfg.max_constraints:
            raise BadRequest(
                413,
                f"sentence {i} has {len(s.constraints)} constraints and {len(s.terms)} of the "
                f"glossary's terms; at most {cfg.max_constraints} in all",
            )
        _within_chars(i, "constraints and terms", sum(map(len, phrases)), cfg.max_chars)


def no_query(params: Mapping[str, str]) -> None:
    """Settings sent as query parameters are refused (422), as unknown JSON fields are: they
    would otherwise be silently ignored."""
    if params:
        names = ", ".join(sorted(set(params)))
        raise BadRequest(
            422,
            f"query parameters are not read: {names}; send settings in the JSON body, e.g. "
            '{"sentences": [...], "beam_size": 5}',
        )


def _within_chars(sentence: int, name: str, chars: int, limit: int) -> None:
    """A sentence's prefix or constraints within ``limit`` characters, else 413."""
    if chars > limit:
        raise BadRequest(413, f"sentence {sentence}'s {name}: {chars} characters; at most {limit}")


def _model(name: Any, models: Sequence[str]) -> str:
    """The served model a request names, or BadRequest naming those there are."""
    served = ", ".join(models)
    if not isinstance(name, str):
        raise BadRequest(422, f"model must be the name of a served model: {served}")
    if name not in models:
        raise BadRequest(404, f"no model named {name!r} here; the models served: {served}")
    return name


def answer(
    translator: TranslatorBase,
    translation: Translation,
    nbest: int,
    alignment: bool,
    steer: LineSteering | None = None,
) -> dict:
    """The JSON object of one translated sentence (with the glossary's hits in its ``steer``)."""
    best = translation.hypotheses[0] if translation.hypotheses else None
    item: dict[str, Any] = {"translation": translator.text(best) if best else ""}
    if steer is not None and steer.terms:
        item["terms"] = [list(term) for term in steer.terms]
    if translation.warnings:  # steering not met as asked
        item["warnings"] = translation.warnings
    if nbest > 1:
        item["nbest"] = json_candidates(translator, translation)
    if alignment:  # as documented: source, target, weights (the mean over heads)
        item["alignment"] = alignment_record(translator, translation, head_weights=False)
    return item


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON answer to a refused request: ``{"error": message}`` with its status."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def authorised(request: Request, api_key: str | None) -> bool:
    """Whether the request carries the server's API key (any request, when it has none)."""
    if api_key is None:
        return True
    given = request.headers.get("x-api-key", "")
    return hmac.compare_digest(given.encode(), api_key.encode())


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, or BadRequest when its declared or actual size is over ``limit``
    bytes (read in chunks, so an oversized body is refused before it is all in memory)."""
    declared = request.headers.get("content-length") or "0"
    if not declared.isdigit():
        raise BadRequest(400, f"Content-Length {declared!r} is not a number")
    length = int(declared)
    if length > limit:
        raise BadRequest(413, f"the body has {length} bytes; at most {limit}")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BadRequest(413, f"the body is over {limit} bytes")
    return body
