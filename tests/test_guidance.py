"""Guided alignment: word links of training lines become subword attention targets, and the
loss term pulls the attention toward them."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from run_helpers import composed

from seq2seq.commands.rules import check_config
from seq2seq.config import Multi30kConfig, TokenizerConfig
from seq2seq.data.batching import collate
from seq2seq.data.dataset import encode_corpus
from seq2seq.data.guidance import AlignmentTargets, word_starts, words_of
from seq2seq.data.stream import from_lists
from seq2seq.data.tokenizer import train_tokenizers
from seq2seq.errors import DataError, Seq2SeqError
from seq2seq.model.config import BahdanauConfig, ModelConfig, MultiHeadConfig
from seq2seq.model.seq2seq import build_model

ANIMALS = ["elephants", "crocodiles", "butterflies", "kangaroos"]
SRC = [f"the {a} swim quickly" for a in ANIMALS] * 5 + [""]  # the empty pair is dropped
TGT = [f"les {a[:-1]}x nagent vite" for a in ANIMALS] * 5 + ["rien"]
LINKS = ["0-0 1-1 2-2 3-3"] * 20 + ["0-0"]


@pytest.fixture
def corpus(tmp_path):
    data = Multi30kConfig(
        cache_dir=str(tmp_path / "cache"), tokenizer=TokenizerConfig(vocab_size=40)
    )
    src_tok, tgt_tok = train_tokenizers(data, from_lists(SRC, TGT), tmp_path)
    train = encode_corpus(from_lists(SRC, TGT), src_tok, tgt_tok, tmp_path, 50, True)
    return train, src_tok, tgt_tok


def test_pieces_know_their_words(corpus) -> None:
    train, src_tok, _ = corpus
    ids = train.src(0)[:-1]
    words = words_of(ids, word_starts(src_tok))
    assert words[0] == 0 and words[-1] == 3 and np.all(np.diff(words) >= 0)
    assert len(ids) > 4  # the long words are split into several pieces


def test_links_become_uniform_rows_over_the_linked_pieces(corpus, tmp_path) -> None:
    train, src_tok, tgt_tok = corpus
    path = tmp_path / "train.align"
    path.write_text("".join(line + "\n" for line in LINKS), encoding="utf-8")
    targets = AlignmentTargets.load(path, train, src_tok, tgt_tok)
    assert len(train) == 20  # the empty pair dropped: its links line is never read
    ids = np.array([0, 1])
    batch = collate(train, ids)
    target = targets.batch(ids, batch.tgt_in.size(1), batch.src.size(1)).numpy()
    assert target.shape == (2, batch.tgt_in.size(1), batch.src.size(1))
    for row, i in enumerate(ids):
        src_words = words_of(train.src(i)[:-1], word_starts(src_tok))
        tgt_words = words_of(train.tgt(i)[:-1], word_starts(tgt_tok))
        for t, word in enumerate(tgt_words):  # every target piece is guided: each word is linked
            expected = (src_words == word) / np.sum(src_words == word)
            np.testing.assert_allclose(target[row, t, : len(src_words)], expected, rtol=1e-6)
        np.testing.assert_allclose(target[row, len(tgt_words) :], 0.0)  # EOS and padding
        np.testing.assert_allclose(target[row, :, len(src_words) :], 0.0)


def test_links_past_the_words_leave_the_pair_unguided(corpus, tmp_path, caplog) -> None:
    train, src_tok, tgt_tok = corpus
    path = tmp_path / "train.align"
    path.write_text("0-0 7-1\n" + "".join(line + "\n" for line in LINKS[1:]), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        targets = AlignmentTargets.load(path, train, src_tok, tgt_tok)
    assert "1 training pairs have links past their words" in caplog.text
    batch = collate(train, np.array([0, 1]))
    target = targets.batch(np.array([0, 1]), batch.tgt_in.size(1), batch.src.size(1))
    assert target[0].sum() == 0.0 and target[1].sum() > 0.0


def test_a_links_file_that_does_not_fit_is_refused(corpus, tmp_path) -> None:
    train, src_tok, tgt_tok = corpus
    short = tmp_path / "short.align"
    short.write_text("0-0\n" * 3, encoding="utf-8")
    with pytest.raises(DataError, match="fewer than the training split"):
        AlignmentTargets.load(short, train, src_tok, tgt_tok)
    short.write_text("0:0\n" * 30, encoding="utf-8")
    with pytest.raises(DataError, match="short.align:1: not Pharaoh links"):
        AlignmentTargets.load(short, train, src_tok, tgt_tok)
    with pytest.raises(DataError, match="train.guided_alignment=.* does not exist"):
        AlignmentTargets.load(tmp_path / "missing", train, src_tok, tgt_tok)


@pytest.mark.parametrize("attention", [BahdanauConfig(size=16), MultiHeadConfig(size=16, heads=2)])
def test_the_guided_loss_pulls_the_attention_toward_the_links(attention) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(16, 16, dropout=0.0, attention=attention), 12, 12)
    src = torch.randint(4, 12, (3, 5))
    tgt_in = torch.randint(4, 12, (3, 4))
    tgt_out = torch.randint(4, 12, (3, 4))
    lengths = torch.full((3,), 5)
    align = torch.zeros(3, 4, 5)
    align[:, torch.arange(4), torch.arange(4)] = 1.0  # the diagonal
    plain, nll = model(src, lengths, tgt_in, tgt_out)
    guided, same_nll = model(src, lengths, tgt_in, tgt_out, 0.0, align, 1.0)
    assert guided > plain and torch.equal(nll, same_nll)  # the NLL stays the translation's
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(30):
        optimizer.zero_grad()
        loss, _ = model(src, lengths, tgt_in, tgt_out, 0.0, align, 10.0)
        loss.backward()
        optimizer.step()
    _, weights = model.features(src, lengths, tgt_in)
    diagonal = weights.mean(1)[:, torch.arange(4), torch.arange(4)]
    assert diagonal.mean() > 0.8  # from about 1/5 for an untrained model


def test_guidance_refuses_sampled_subwords() -> None:
    cfg = composed("train.guided_alignment=x.align", "data.sampling_alpha=0.1")
    with pytest.raises(Seq2SeqError, match="guided_alignment needs data.sampling_alpha=0"):
        check_config(cfg)
