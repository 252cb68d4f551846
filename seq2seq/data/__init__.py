"""Data pipeline: read parallel text from any source, subword it, cache ids, batch by tokens."""
