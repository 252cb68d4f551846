"""Special token ids, the same in every vocabulary: the bottom of the package, imported by all."""

PAD, UNK, BOS, EOS = 0, 1, 2, 3
