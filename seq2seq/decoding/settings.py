"""The search settings by name, read off DecodeConfig once: every search setting, and the
subsets other code passes on or records, each named by what it is."""

from __future__ import annotations

from dataclasses import fields

from seq2seq.config import DecodeConfig

# every search setting, in DecodeConfig's order (what a served translator is given, e.g.)
SEARCH_KEYS = tuple(f.name for f in fields(DecodeConfig))
# what only sampling=true reads: DecodeConfig lists them after that switch
SAMPLING_KEYS = SEARCH_KEYS[SEARCH_KEYS.index("sampling") + 1 :]
# what a decoded corpus (seq2seq-backtranslate) records of its search, and compares on resuming:
# not how many translations are listed, how many sentences share a batch or which lines are
# refused; not coverage_penalty, which its records never held; the sampling settings are
# recorded with sampling=true only
RECORDED_KEYS = tuple(
    key
    for key in SEARCH_KEYS
    if key not in ("nbest", "batch_size", "max_source_len", "coverage_penalty", *SAMPLING_KEYS)
)
# the settings that ban tokens (repeats, an early end), recorded since they came: a corpus's chunks
# recorded before them lack them, and were decoded as they are at these defaults
BAN_DEFAULTS = {
    key: getattr(DecodeConfig(), key) for key in ("no_repeat_ngram", "min_len_a", "min_len_b")
}
