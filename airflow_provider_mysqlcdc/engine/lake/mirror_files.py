"""The mirror's files: a chunk's snapshot read in the mirror's columns, a chunk's new mirror version written,
and the one-refresher-per-table lock. Old versions are deleted by garbage collection (``lake.gc``), never
here: readers of older Delta versions still need them."""

from __future__ import annotations

import contextlib
import fcntl
import os
import posixpath
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.chunk_store import MirrorChunk
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog import parquet_files
from airflow_provider_mysqlcdc.engine.lake.file_types import to_file_types
from airflow_provider_mysqlcdc.engine.lake.layout import (
    MIRROR,
    filesystem,
    mirror_dir,
    new_version,
    snapshot_dir,
    table_dir,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import MirrorChunkEntry
from airflow_provider_mysqlcdc.engine.lake.schema_history import SchemaEvent, conform, events_after
from airflow_provider_mysqlcdc.engine.model.position_text import after_bound
from airflow_provider_mysqlcdc.engine.model.tables import TableId

PART_FILE = "part.parquet"


def snapshot_files(root: str, table: TableId, generation: int, chunk: MirrorChunk) -> list[str]:
    version = chunk.output_version
    if version is None:
        return []
    if "/" in version:  # the writer recorded the version directory itself (the Spark snapshot does)
        return parquet_files(version)
    return parquet_files(snapshot_dir(root, table, generation, chunk.chunk_id, version))


def read_snapshot(
    root: str, table: TableId, generation: int, chunk: MirrorChunk, data_schema: pa.Schema,
    history: list[SchemaEvent],
) -> pa.Table:
    """A chunk's committed snapshot in the mirror's columns; an error unless it holds the committed rows."""
    files = snapshot_files(root, table, generation, chunk)
    events = events_after(history, after_bound(chunk.hw))
    if events:  # the chunk was read before some DDL: its rows in the newer columns
        parts = [conform(read_file(f), events, data_schema, str(table)) for f in files]
        state = pa.concat_tables(parts) if parts else data_schema.empty_table()
    else:
        state = read_files(files, data_schema)
    if state.num_rows != chunk.rows:
        version = chunk.output_version or "?"
        where = (
            version
            if "/" in version
            else snapshot_dir(root, table, generation, chunk.chunk_id, version)
        )
        raise CdcError(
            f"{table} chunk {chunk.chunk_id}: the snapshot files ({where}) hold {state.num_rows} rows, "
            f"the chunk store committed {chunk.rows}: wrong output root, or the files were changed"
        )
    return state


def write_chunk(
    root: str, table: TableId, chunk: MirrorChunk, state: pa.Table, through: int | None
) -> MirrorChunkEntry:
    """A new mirror version of one chunk (a fresh directory; the manifest names it once switched)."""
    version = new_version()
    directory = mirror_dir(root, table, chunk.chunk_id, version)
    fs, inner = filesystem(directory)
    fs.create_dir(inner, recursive=True)
    pq.write_table(to_file_types(state), posixpath.join(inner, PART_FILE), filesystem=fs)
    relative = posixpath.join(directory[len(table_dir(root, table)) + 1 :], PART_FILE)
    return MirrorChunkEntry(
        chunk.chunk_id, version, (relative,), state.num_rows, chunk.hw, chunk.output_version, through
    )


def read_file(path: str) -> pa.Table:
    fs, inner = filesystem(path)
    return pq.read_table(inner, filesystem=fs)


def read_files(files: list[str], schema: pa.Schema) -> pa.Table:
    """``files`` in ``schema``: a column a file lacks (a mirror file written before an ADD COLUMN no chunk was
    rewritten for) reads NULL, the value the source gives those rows."""
    if not files:
        return schema.empty_table()
    return parquet_dataset(files, schema).to_table().cast(schema)


def parquet_dataset(files: list[str], schema: pa.Schema) -> ds.Dataset:
    """One dataset over Parquet files of one file system (``files`` not empty), read as ``schema``."""
    fs, _ = filesystem(files[0])
    return ds.dataset(
        [filesystem(f)[1] for f in files], schema=schema, format="parquet", filesystem=fs, partitioning=None
    )


@contextlib.contextmanager
def refresh_lock(root: str, table: TableId) -> Iterator[None]:
    """One refresher per table: an exclusive lock file on local file systems (elsewhere: the caller's job)."""
    directory = posixpath.join(table_dir(root, table), MIRROR)
    if "://" in directory and not directory.startswith("file://"):
        yield
        return
    local = directory.removeprefix("file://")
    os.makedirs(local, exist_ok=True)
    fd = os.open(os.path.join(local, "_refresh.lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
