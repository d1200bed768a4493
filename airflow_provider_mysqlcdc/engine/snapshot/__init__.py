"""The snapshot phase: a fresh read view per chunk, the
chunk read with its backfill, planning and committing."""
