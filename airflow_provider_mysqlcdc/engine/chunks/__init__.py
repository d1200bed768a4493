"""Chunks: the plan types, chunk keys (codec, SQL, order, locator), where a table is split, chunk groups."""
