"""What a language's script asks of the pipeline: BLEU's tokenizer and the subword model's settings.

Chinese, Japanese and Korean are written without spaces between words (Korean: between phrases),
so sacreBLEU's default ``13a`` tokenizer sees nearly a whole sentence as one token; sacreBLEU
prescribes its ``zh``, ``ja-mecab`` and ``ko-mecab`` tokenizers for them. Their scripts have
thousands of characters, so sentencepiece's ``character_coverage`` is 0.9995 there (its own
recommendation), and rare characters fall back to UTF-8 bytes so that text round-trips unchanged.
"""

from __future__ import annotations

from seq2seq.errors import Seq2SeqError

# Codes of languages written in CJK scripts: ISO 639-1 and -3, and Tatoeba's names.
_CHINESE = {"zh", "zho", "chi", "cmn", "yue", "wuu", "lzh", "nan", "hak", "gan"}
_JAPANESE = {"ja", "jpn"}
_KOREAN = {"ko", "kor"}
_BLEU_TOKENIZERS = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
_EXTRAS = {"ja-mecab": "ja", "ko-mecab": "ko"}  # sacrebleu's extras for its MeCab tokenizers

CJK_CHARACTER_COVERAGE = 0.9995


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
