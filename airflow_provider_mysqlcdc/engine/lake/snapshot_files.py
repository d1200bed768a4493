"""A chunk snapshot's files: one fresh version directory per chunk read, Parquet parts of bounded size.

``snapshot/generation=<g>/chunk=<c>/version=<v>/part-NNNNN.parquet`` (``layout.snapshot_dir``; ``v`` never
repeats, so a rerun never writes into a directory a reader may hold). Nothing here is visible until the chunk
is committed (``snapshot_commit``: the chunk store row and the snapshot manifest name the directory).
"""
from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem, new_version, snapshot_dir
from airflow_provider_mysqlcdc.engine.model.tables import TableId


def new_chunk_version(root: str, table: TableId, generation: int, chunk_id: int) -> str:
    """A fresh version directory for one read of a chunk (never reused, not visible until committed)."""
    return snapshot_dir(root, table, generation, chunk_id, new_version())


class VersionFiles:
    """``part-NNNNN.parquet`` files of at most ``rows_per_file`` rows in one version directory; at least one
    (maybe empty) file, so readers always find the schema. ``schema`` may be a function, called when the first
    file opens (the chunk read knows its columns only once it yields, or ends)."""

    def __init__(self, directory: str, schema: pa.Schema | Callable[[], pa.Schema],
                 rows_per_file: int) -> None:
        self.fs, self.inner = filesystem(directory)
        self.fs.create_dir(self.inner, recursive=True)
        self._schema, self.rows_per_file = schema, rows_per_file
        self.names: list[str] = []
        self.rows = self.bytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._stream: Any = None
        self._in_file = 0

    @property
    def schema(self) -> pa.Schema:
        if callable(self._schema):
            self._schema = self._schema()
        return self._schema

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.schema.equals(self.schema):
            raise CdcError(f"a batch with columns {batch.schema.names} does not fit the chunk's files "
                           f"({self.schema.names})")
        offset = 0
        while offset < batch.num_rows:
            if self._writer is None or self._in_file >= self.rows_per_file:
                self._close_file()
                self._open_file()
            take = min(batch.num_rows - offset, self.rows_per_file - self._in_file)
            assert self._writer is not None
            self._writer.write_batch(batch.slice(offset, take))
            offset += take
            self._in_file += take
            self.rows += take

    def close(self) -> None:
        if not self.names:
            self._open_file()
        self._close_file()

    def discard(self) -> None:
        """Close quietly (the caller deletes the directory)."""
        try:
            self._close_file()
        except Exception:  # noqa: BLE001, S110 - the output is being thrown away
            pass

    def _open_file(self) -> None:
        name = f"part-{len(self.names):05d}.parquet"
        self.names.append(name)
        self._stream = self.fs.open_output_stream(posixpath.join(self.inner, name))
        self._writer = pq.ParquetWriter(self._stream, self.schema)
        self._in_file = 0

    def _close_file(self) -> None:
        if self._writer is None:
            return
        writer, stream, self._writer, self._stream = self._writer, self._stream, None, None
        writer.close()
        stream.close()
        self.bytes += self.fs.get_file_info(posixpath.join(self.inner, self.names[-1])).size
