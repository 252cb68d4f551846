"""What a language's script asks of the pipeline: BLEU's tokenizer and the subword model's settings.

Chinese, Japanese and Korean are written without spaces between words (Korean: between phrases),
so sacreBLEU's default ``13a`` tokenizer sees nearly a whole sentence as one token; sacreBLEU
prescribes its ``zh``, ``ja-mecab`` and ``ko-mecab`` tokenizers for them. Their scripts have
thousands of characters, so sentencepiece's ``character_coverage`` is 0.9995 there (its own
recommendation), and rare characters fall back to UTF-8 bytes so that text round-trips unchanged.
"""

from __future__ import annotations

import logging

from seq2seq.errors import Seq2SeqError

log = logging.getLogger(__name__)

# Codes of languages written in CJK scripts: ISO 639-1 and -3, and Tatoeba's names.
_CHINESE = {"zh", "zho", "chi", "cmn", "yue", "wuu", "lzh", "nan", "hak", "gan"}
_JAPANESE = {"ja", "jpn"}
_KOREAN = {"ko", "kor"}
_BLEU_TOKENIZERS = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
_EXTRAS = {"ja-mecab": "ja", "ko-mecab": "ko"}  # sacrebleu's extras for its MeCab tokenizers

CJK_CHARACTER_COVERAGE = 0.9995

# ISO 639-1 (with the legacy iw, in, ji, mo, sh); any three letters pass as ISO 639-2/3, whose
# thousands of codes get the defaults, right for every script but the CJK ones named above.
_ISO_639_1_CODES = (
    "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy "
    "da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu "
    "hy hz ia id ie ig ii ik in io is it iu iw ja ji jv ka kg ki kj kk kl km kn ko kr ks ku kv kw "
    "ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mo mr ms mt my na nb nd ne ng nl nn no nr nv "
    "ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg sh si sk sl sm sn so sq sr "
    "ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo "
    "za zh zu"
)
_ISO_639_1 = frozenset(_ISO_639_1_CODES.split())
_BY_NAME = {"chinese": "zh", "mandarin": "zh", "cantonese": "yue", "japanese": "ja"}
_BY_NAME |= {"korean": "ko", "english": "en", "german": "de", "french": "fr", "czech": "cs"}


def _base(lang: str) -> str:
    """``zh`` for ``zh``, ``zh-TW``, ``zh_Hant`` or ``cmn``; ``ja``, ``ko``; else the code."""
    code = lang.lower().replace("_", "-").split("-")[0]
    if code in _CHINESE:
        return "zh"
    if code in _JAPANESE:
        return "ja"
    if code in _KOREAN:
        return "ko"
    return code


def is_known(lang: str) -> bool:
    """Whether ``lang``'s base code (``de`` of ``de-CH``) is a language code: ISO 639-1, or
    three letters (ISO 639-2/3, e.g. Tatoeba's ``deu``, ``cmn``)."""
    code = lang.lower().replace("_", "-").split("-")[0]
    return code in _ISO_639_1 or (len(code) == 3 and code.isascii() and code.isalpha())


def warn_unknown_languages(src_lang: str, tgt_lang: str, bleu_override: str | None) -> None:
    """A warning for each code seq2seq does not know: its text gets the defaults (NFKC, and as
    a target BLEU's 13a), wrong for a CJK language given by name (``chinese``)."""
    for key, lang in (("data.src_lang", src_lang), ("data.tgt_lang", tgt_lang)):
        if is_known(lang):
            continue
        tgt = key == "data.tgt_lang" and not bleu_override
        said = (
            "text normalisation and BLEU's tokenizer are the defaults (NFKC, 13a)"
            if tgt
            else "text normalisation is the default (NFKC)"
        )
        code = _BY_NAME.get(lang.lower().replace("_", "-").split("-")[0])
        hint = f"for {lang.capitalize()} give {code}" if code else "give an ISO 639-1 code"
        log.warning("%s=%s is not a language code seq2seq knows: %s; %s", key, lang, said, hint)


def is_cjk(lang: str) -> bool:
    """Whether ``lang`` is written in a Chinese, Japanese or Korean script."""
    return _base(lang) in _BLEU_TOKENIZERS


def bleu_tokenizer(lang: str, override: str | None = None) -> str:
    """sacreBLEU's tokenizer for a target language (``override`` wins when given)."""
    return override or _BLEU_TOKENIZERS.get(_base(lang), "13a")


def _known_tokenizers() -> list[str] | None:
    """The names of sacreBLEU's BLEU tokenizers (its private table), None where it has none."""
    try:
        from sacrebleu.metrics.bleu import _TOKENIZERS
    except ImportError:
        return None
    return sorted(_TOKENIZERS)


def check_bleu_tokenizer(name: str) -> None:
    """Refuse, in one line, a tokenizer sacreBLEU does not know or cannot load here."""
    known = _known_tokenizers()
    if known is not None and name not in known:
        raise Seq2SeqError(f"unknown BLEU tokenizer {name!r}; sacreBLEU has: {', '.join(known)}")
    if known is None:  # a sacreBLEU without the list: ask it to build the tokenizer
        from sacrebleu.metrics.bleu import BLEU

        try:
            BLEU(tokenize=name)
        except KeyError:
            raise Seq2SeqError(f"unknown BLEU tokenizer {name!r} for this sacreBLEU") from None
        except (ImportError, RuntimeError, OSError):
            pass  # known, but it needs an extra: said below
    if name in _EXTRAS:
        from sacrebleu.metrics.bleu import BLEU

        try:
            BLEU(tokenize=name)
        except (ImportError, RuntimeError, OSError) as e:
            raise Seq2SeqError(
                f"BLEU's {name} tokenizer needs MeCab: pip install 'sacrebleu[{_EXTRAS[name]}]' "
                f"({type(e).__name__}: {e})"
            ) from None


def character_coverage(langs: list[str], configured: float | None) -> float:
    """The subword model's character coverage: the setting, else 0.9995 where any of ``langs``
    is CJK, else 1.0."""
    if configured is not None:
        return configured
    return CJK_CHARACTER_COVERAGE if any(is_cjk(lang) for lang in langs) else 1.0
