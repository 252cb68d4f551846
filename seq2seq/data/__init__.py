"""Data pipeline: download and read parallel text, subword it, cache token ids, batch by tokens."""

from seq2seq.data.batching import Batch, TokenBatchSampler, Update, collate, plan_updates, shard
from seq2seq.data.corpus import read_parallel, split_files
from seq2seq.data.dataset import TokenizedCorpus, encode_corpus
from seq2seq.data.download import MULTI30K_SHA256, fetch
from seq2seq.data.prepare import TrainingData, training_data
from seq2seq.data.tokenizer import Tokenizer, train_tokenizers

__all__ = [
    "MULTI30K_SHA256",
    "Batch",
    "TokenBatchSampler",
    "TokenizedCorpus",
    "Tokenizer",
    "TrainingData",
    "Update",
    "collate",
    "encode_corpus",
    "fetch",
    "plan_updates",
    "read_parallel",
    "shard",
    "split_files",
    "train_tokenizers",
    "training_data",
]
