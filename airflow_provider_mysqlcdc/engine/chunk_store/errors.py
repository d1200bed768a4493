"""Errors of the chunk store: each says what is wrong and what to do."""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.common.errors import CdcError

# --- errors -------------------------------------------------------------------------------------------------


class ChunkStoreError(CdcError):
    """The chunk store refused an operation (unknown table/chunk, stale generation or attempt)."""


class ChunkStoreVersionError(ChunkStoreError):
    """The store was written by a newer release (or is not a chunk store at all)."""


class UnknownChunk(ChunkStoreError):
    """No plan, or no chunk with that id, for the table."""


class StaleGeneration(ChunkStoreError):
    """The chunk belongs to a plan generation that is no longer the table's current plan."""


class StaleAttempt(ChunkStoreError):
    """A newer attempt of the chunk has started since this one (a zombie task must not commit)."""


class ChunkStoreUnavailable(ChunkStoreError):
    """The store stayed unreachable for the whole outage budget."""
