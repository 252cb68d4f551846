"""Data pipeline: download and read parallel text, subword it, cache token ids, batch by tokens."""

from seq2seq.data.batching import Batch, TokenBatchSampler, collate
from seq2seq.data.corpus import read_parallel, split_files
from seq2seq.data.dataset import TokenizedCorpus, encode_corpus
from seq2seq.data.download import MULTI30K_SHA256, fetch
from seq2seq.data.tokenizer import BOS, EOS, PAD, UNK, Tokenizer, train_tokenizers

__all__ = [
    "BOS",
    "EOS",
    "MULTI30K_SHA256",
    "PAD",
    "UNK",
    "Batch",
    "TokenBatchSampler",
    "TokenizedCorpus",
    "Tokenizer",
    "collate",
    "encode_corpus",
    "fetch",
    "read_parallel",
    "split_files",
    "train_tokenizers",
]
