"""Subword models on real Multi30k text: round trip, special ids, determinism, cache reuse."""

from __future__ import annotations

import logging
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch

from seq2seq.config import Multi30kConfig, SubwordModel, TokenizerConfig
from seq2seq.data import tokenizer as tokenizer_module
from seq2seq.data.batching import collate
from seq2seq.data.corpus import read_parallel
from seq2seq.data.dataset import encode_corpus
from seq2seq.data.sampling import SubwordSampler
from seq2seq.data.stream import from_lists
from seq2seq.data.tokenizer import Tokenizer, train_tokenizers
from seq2seq.errors import DataError
from seq2seq.vocab import BOS, EOS, PAD, UNK


def config(cache: Path, **tokenizer: object) -> Multi30kConfig:
    return Multi30kConfig(
        cache_dir=str(cache), tokenizer=TokenizerConfig(vocab_size=500, **tokenizer)
    )


def normalized(text: str) -> str:
    """What sentencepiece's default nmt_nfkc normalisation makes of a sentence."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


@pytest.fixture(scope="module")
def lines(multi30k_dir: Path) -> dict[str, list[str]]:
    train_de, train_en = read_parallel(
        multi30k_dir / "train.de.gz", multi30k_dir / "train.en.gz", 2000
    )
    val_de, _ = read_parallel(multi30k_dir / "val.de.gz", multi30k_dir / "val.en.gz")
    return {"de": train_de, "en": train_en, "val_de": val_de}


@pytest.fixture(scope="module")
def trained(lines: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("cache")
    run = tmp_path_factory.mktemp("run")
    src, tgt = train_tokenizers(config(cache), from_lists(lines["de"], lines["en"]), run)
    return cache, run, src, tgt


def test_round_trip_on_multi30k(lines: dict[str, list[str]], trained) -> None:
    _, _, src, tgt = trained
    for tok, texts in ((src, lines["de"]), (tgt, lines["en"])):
        for text, ids in zip(texts, tok.encode_batch(texts), strict=True):
            assert tok.decode(ids) == normalized(text)
    val = lines["val_de"]
    unseen = [(t, ids) for t, ids in zip(val, src.encode_batch(val), strict=True) if UNK not in ids]
    assert len(unseen) > 0.9 * len(val)  # rare characters aside, held-out text is covered
    for text, ids in unseen:
        assert src.decode(ids) == normalized(text)


def test_special_ids_and_decode(trained) -> None:
    _, run, src, _ = trained
    assert src.pieces([PAD, UNK, BOS, EOS]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert src.vocab_size == 500 and src.path == run / "src.model"
    ids = src.encode("Ein Hund läuft durch den Schnee.")
    assert min(ids) > EOS and src.encode_batch(["Ein Hund läuft durch den Schnee."]) == [ids]
    assert src.decode([BOS, *ids, EOS, *ids, PAD]) == src.decode(np.array(ids))
    assert Tokenizer.load(run / "src.model").encode("Ein Hund") == src.encode("Ein Hund")


def test_cache_reused_and_training_deterministic(
    lines: dict[str, list[str]], trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, run, _, _ = trained
    fresh, _ = train_tokenizers(
        config(tmp_path / "fresh"), from_lists(lines["de"], lines["en"]), tmp_path / "a"
    )
    assert fresh.path.read_bytes() == (run / "src.model").read_bytes()  # deterministic

    def no_training(*args: object) -> None:
        raise AssertionError("retrained although cached")

    monkeypatch.setattr(tokenizer_module, "_train", no_training)  # trains in another process
    src, tgt = train_tokenizers(config(cache), from_lists(lines["de"], lines["en"]), tmp_path / "b")
    assert src.path.read_bytes() == (run / "src.model").read_bytes()
    assert tgt.path.read_bytes() == (run / "tgt.model").read_bytes()
    with pytest.raises(AssertionError, match="retrained"):  # other text -> other key
        train_tokenizers(
            config(cache), from_lists(lines["de"][:-1], lines["en"][:-1]), tmp_path / "c"
        )
    with pytest.raises(AssertionError, match="retrained"):  # other settings -> other key
        train_tokenizers(
            config(cache, model_type="bpe"), from_lists(lines["de"], lines["en"]), tmp_path / "d"
        )


def test_too_few_pieces_for_the_characters_is_said_in_our_keys(tmp_path: Path) -> None:
    """sentencepiece's 'Increase vocab_size or decrease character_coverage with
    --character_coverage option' named its flags, not the keys to give."""
    chars = [chr(0x4E00 + i) for i in range(800)]  # 800 CJK characters, each in every line
    lines = ["".join(chars[i:] + chars[:i]) for i in range(0, 800, 40)]
    cfg = config(tmp_path, character_coverage=1.0)
    with pytest.raises(
        DataError,
        match=(
            r"^cannot train the src tokenizer on 20 lines: its \d+ characters need more pieces "
            r"than data.tokenizer.vocab_size=500: raise it, or lower "
            r"data.tokenizer.character_coverage$"
        ),
    ):
        train_tokenizers(cfg, from_lists(lines, ["a b"] * 20), tmp_path / "run")


def test_joint_bpe_and_small_corpus(
    lines: dict[str, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(tmp_path, model_type=SubwordModel.bpe, joint=True)
    src, tgt = train_tokenizers(
        cfg, from_lists(lines["de"][:500], lines["en"][:500]), tmp_path / "run"
    )
    assert src.path.read_bytes() == tgt.path.read_bytes()
    assert src.decode(src.encode("A dog runs.")) == "A dog runs."
    cfg.tokenizer.vocab_size = 8000  # more than 50 lines can fill: fewer pieces, logged
    with caplog.at_level(logging.INFO):
        small, _ = train_tokenizers(
            cfg, from_lists(lines["de"][:50], lines["en"][:50]), tmp_path / "small"
        )
    assert small.vocab_size < 8000 and f"{small.vocab_size} pieces, fewer than" in caplog.text


def test_encode_corpus_matches_tokenizer(lines: dict[str, list[str]], trained, tmp_path) -> None:
    _, _, src, tgt = trained
    corpus = encode_corpus(from_lists(lines["de"], lines["en"]), src, tgt, tmp_path, 100, True)
    assert len(corpus) == len(lines["de"])
    for i in (0, 1, len(corpus) - 1):
        assert corpus.src(i).tolist() == src.encode(lines["de"][i]) + [EOS]
        assert corpus.tgt(i).tolist() == tgt.encode(lines["en"][i]) + [EOS]


def test_sampled_training_text_is_deterministic(lines: dict[str, list[str]], tmp_path) -> None:
    models = []
    for run in ("a", "b"):
        cfg = config(tmp_path / run, input_sentence_size=300)
        src, _ = train_tokenizers(
            cfg, from_lists(lines["de"][:1000], lines["en"][:1000]), tmp_path / run
        )
        models.append(src.path.read_bytes())
    assert models[0] == models[1]


def test_sampled_segmentations_keep_the_text_and_follow_the_seed(lines, trained) -> None:
    _, _, src, _ = trained
    text = lines["de"][:200]
    best = src.encode_batch(text)
    first, again = src.sample_batch(text, 0.1, 7), src.sample_batch(text, 0.1, 7)
    other = src.sample_batch(text, 0.1, 8)
    assert first == again and first != other and first != best
    assert [src.decode(ids) for ids in first] == [src.decode(ids) for ids in best]


def test_subword_sampler_batches(lines, trained, tmp_path) -> None:
    """Sampled batches hold the same sentences as the cached ones, differ from them, and within
    one process depend only on (seed, epoch, pairs). 64 pairs: a few could all fall back to
    their cached segmentation (samples longer than max_len) and fail the test by chance."""
    _, _, src, tgt = trained
    corpus = encode_corpus(from_lists(lines["de"], lines["en"]), src, tgt, tmp_path, 20, True)
    sampler = SubwordSampler(corpus, (lines["de"], lines["en"]), (src, tgt), 0.1, 20, 5)
    assert len(corpus) < len(lines["de"])  # positions differ from line numbers
    ids = np.array([3, 50, 7, *range(100, 160), len(corpus) - 1])
    batch = sampler.collate(ids, epoch=0)
    cached = collate(corpus, ids)
    assert batch.ids.tolist() == ids.tolist() and batch.src.size(0) == len(ids)
    assert not torch.equal(batch.tgt_out, cached.tgt_out[:, : batch.tgt_out.size(1)])
    for row, i in enumerate(ids):
        line = corpus.line_numbers[i]
        assert tgt.decode(batch.tgt_out[row].tolist()) == tgt.decode(tgt.encode(lines["en"][line]))
        assert batch.tgt_in[row, 0] == BOS and (batch.src[row] == EOS).sum() == 1
        assert int(batch.src_lengths[row]) <= 21  # max_len pieces + EOS
    assert batch.ntokens == int((batch.tgt_out != PAD).sum())
    sampler.collate(np.array([1, 2]), epoch=0)  # another batch in between changes nothing
    for field in ("src", "tgt_in", "tgt_out", "src_lengths"):
        assert torch.equal(getattr(sampler.collate(ids, epoch=0), field), getattr(batch, field))
    assert not torch.equal(sampler.collate(ids, epoch=1).tgt_out, batch.tgt_out)


def test_user_symbols_stay_one_piece(lines: dict[str, list[str]], tmp_path: Path) -> None:
    import sentencepiece as spm

    tagged = from_lists([f"@bt@ {line}" for line in lines["de"][:500]], lines["en"][:500])
    pieces = {}
    for symbols in ([], ["@bt@"]):
        src, _ = train_tokenizers(config(tmp_path, user_symbols=symbols), tagged, tmp_path / "r")
        model = spm.SentencePieceProcessor(model_file=str(src.path))
        pieces[len(symbols)] = model.encode("@bt@ Ein Hund.", out_type=str)
    assert "@bt@" in pieces[1] and "@bt@" not in pieces[0]  # split by script without the key
