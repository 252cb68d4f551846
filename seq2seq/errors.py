"""Errors a user can cause and fix; the command-line apps print them without a traceback."""


class Seq2SeqError(Exception):
    """Base class: a problem with the user's input, data or run folder."""


class DataError(Seq2SeqError):
    """A corpus file is missing, malformed or inconsistent."""


class ChecksumError(DataError):
    """A downloaded file does not match its published SHA-256."""


class ReportedByRankZero(Seq2SeqError):
    """Rank 0's error, received by another process under torchrun: rank 0 reports it."""
