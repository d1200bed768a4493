"""The chunk store: the durable, transactional record of chunk plans and every chunk's committed snapshot.

Import from here. Inside: ``errors``, ``schema`` (tables, version, migrations), ``records`` (what it hands
out), ``database`` (engine, transactions, retries through conflicts and outages), ``plans`` (plan generations
and pipeline membership), ``attempts`` (start/commit/fail/invalidate a chunk), ``views`` (what the stream
filter and the mirror read), ``claims`` (which stream holds which server_id range), ``group_runs`` (chunk
groups handed to an application already running), ``verifications`` (every chunk verification), and
``store`` (``ChunkStore``, all of them in one object).
"""
from airflow_provider_mysqlcdc.engine.chunk_store.claims import StreamClaim
from airflow_provider_mysqlcdc.engine.chunk_store.database import (
    DEFAULT_OUTAGE_S,
    OUTAGE_ENV,
    SQLITE_BUSY_TIMEOUT_S,
    normalize_url,
)
from airflow_provider_mysqlcdc.engine.chunk_store.errors import (
    ChunkStoreError,
    ChunkStoreUnavailable,
    ChunkStoreVersionError,
    StaleAttempt,
    StaleGeneration,
    UnknownChunk,
)
from airflow_provider_mysqlcdc.engine.chunk_store.group_runs import GroupRequest, GroupRunner
from airflow_provider_mysqlcdc.engine.chunk_store.records import (
    ChunkEvent,
    ChunkResult,
    ChunkSpec,
    ChunkState,
    GenerationView,
    MirrorChunk,
    MirrorView,
    PlanInfo,
    StreamChunk,
    TableEntry,
    TableView,
)
from airflow_provider_mysqlcdc.engine.chunk_store.schema import (
    COMMITTED,
    FAILED,
    MAX_ERROR_CHARS,
    PLANNED,
    RUNNING,
    SCHEMA_VERSION,
    STATUSES,
    chunks_table,
    history_table,
    meta_table,
    metadata,
    plans_table,
    stream_claims_table,
    tables_table,
)
from airflow_provider_mysqlcdc.engine.chunk_store.store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.verifications import Verification

__all__ = [
    "COMMITTED", "DEFAULT_OUTAGE_S", "FAILED", "MAX_ERROR_CHARS", "OUTAGE_ENV", "PLANNED", "RUNNING",
    "SCHEMA_VERSION", "SQLITE_BUSY_TIMEOUT_S", "STATUSES", "ChunkEvent", "ChunkResult", "ChunkSpec",
    "ChunkState", "ChunkStore", "ChunkStoreError", "ChunkStoreUnavailable", "ChunkStoreVersionError",
    "GenerationView", "GroupRequest", "GroupRunner", "MirrorChunk", "MirrorView", "PlanInfo", "StaleAttempt",
    "StaleGeneration",
    "StreamChunk", "StreamClaim", "TableEntry", "TableView", "UnknownChunk", "Verification", "chunks_table",
    "history_table",
    "meta_table", "metadata", "normalize_url", "plans_table", "stream_claims_table", "tables_table",
]
