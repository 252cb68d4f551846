"""From a trained run to text: search, the one prediction path, alignments, n-best lists."""
