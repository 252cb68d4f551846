"""Scripts without spaces: BLEU's tokenizer by target language, CJK subwords, round trips."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import pytest
from run_helpers import sacrebleu_cli

from seq2seq.config import CustomDataConfig, TokenizerConfig
from seq2seq.data.stream import from_lists
from seq2seq.data.tokenizer import train_tokenizers
from seq2seq.decoding.inference import score
from seq2seq.errors import Seq2SeqError
from seq2seq.languages import (
    bleu_tokenizer,
    character_coverage,
    check_bleu_tokenizer,
    warn_unknown_languages,
)


def test_bleu_tokenizer_follows_the_target_language() -> None:
    for lang in ("zh", "zh-TW", "zh_Hant", "cmn", "ZH"):
        assert bleu_tokenizer(lang) == "zh"
    assert bleu_tokenizer("ja") == "ja-mecab" and bleu_tokenizer("ko") == "ko-mecab"
    assert bleu_tokenizer("de") == bleu_tokenizer("en") == "13a"
    assert bleu_tokenizer("zh", "char") == "char"


def test_character_coverage_follows_the_script() -> None:
    assert character_coverage(["en", "zh"], None) == 0.9995
    assert character_coverage(["de", "en"], None) == 1.0
    assert character_coverage(["ja"], 0.98) == 0.98


def test_a_language_seq2seq_does_not_know_is_warned_of(caplog) -> None:
    """data.tgt_lang=chinese silently got NFKC and BLEU's 13a; region tags and ISO 639-3 pass."""
    with caplog.at_level("WARNING"):
        warn_unknown_languages("en", "chinese", None)
        warn_unknown_languages("Deutsch", "en-GB", "13a")
        for src, tgt in (("de-CH", "zh_Hant"), ("deu", "cmn"), ("pt-BR", "en")):
            warn_unknown_languages(src, tgt, None)
    assert [r.getMessage() for r in caplog.records] == [
        "data.tgt_lang=chinese is not a language code seq2seq knows: text normalisation and "
        "BLEU's tokenizer are the defaults (NFKC, 13a); for Chinese give zh",
        "data.src_lang=Deutsch is not a language code seq2seq knows: text normalisation is the "
        "default (NFKC); give an ISO 639-1 code",
    ]


def test_unknown_or_unusable_bleu_tokenizers_are_refused() -> None:
    with pytest.raises(Seq2SeqError, match="unknown BLEU tokenizer 'nope'; sacreBLEU has: "):
        check_bleu_tokenizer("nope")
    try:
        import MeCab  # noqa: F401
    except ImportError:
        with pytest.raises(Seq2SeqError, match=r"needs MeCab: pip install 'sacrebleu\[ja\]'"):
            check_bleu_tokenizer("ja-mecab")


def chinese_pairs(tatoeba_dir: Path, n: int) -> list[tuple[str, str]]:
    with gzip.open(tatoeba_dir / "cmn-eng.txt.gz", "rt", encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")[:2]) for line in itertools.islice(f, n)]


def test_chinese_bleu_equals_sacrebleu_zh(tatoeba_dir: Path, tmp_path: Path) -> None:
    pairs = chinese_pairs(tatoeba_dir, 3000)[1000:1200]
    refs = [zh for _, zh in pairs]
    hyps = [zh[: max(1, len(zh) * 2 // 3)] + "的" for zh in refs]  # partly right
    ours = score(hyps, refs, bleu_tokenizer("zh"))
    (tmp_path / "hyp").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (tmp_path / "ref").write_text("\n".join(refs) + "\n", encoding="utf-8")
    cli = sacrebleu_cli(tmp_path / "ref", tmp_path / "hyp", "-tok", "zh", "-w", "6")
    assert ours.bleu == pytest.approx(float(cli), abs=1e-4)
    assert "tok:zh" in ours.bleu_signature
    assert score(hyps, refs).bleu < ours.bleu / 2  # 13a sees each sentence as about one word


JAPANESE = ["私", "猫", "が", "好き", "です", "東京", "へ", "行きます", "今日", "は", "雨"]


def test_cjk_text_round_trips_through_the_tokenizer(tatoeba_dir: Path, tmp_path: Path) -> None:
    zh = [z for _, z in chinese_pairs(tatoeba_dir, 2000)]
    ja = ["".join(w) + "。" for w in itertools.permutations(JAPANESE, 4)][:2000]
    cfg = CustomDataConfig(
        train="x",
        valid="x",
        src_lang="ja",
        tgt_lang="zh",
        cache_dir=str(tmp_path),
        tokenizer=TokenizerConfig(vocab_size=2000),
    )
    ja_tok, zh_tok = train_tokenizers(cfg, from_lists(ja, zh), tmp_path / "run")
    held_out = ["你好，世界！今天１２３号。", "龘靐齉爩", "我们走吧 ok"]
    for text in zh[:500] + held_out:
        assert zh_tok.decode(zh_tok.encode(text)) == text
    for text in [*ja[:200], "雨が好き、です！？", "ｶﾀｶﾅ"]:
        assert ja_tok.decode(ja_tok.encode(text)) == text
