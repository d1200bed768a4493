"""The mirror manifest: which Parquet files hold a table's current state, and as of which binlog position.

``<table>/mirror/_manifest.json`` is written last and atomically by each refresh; readers that follow it never
see a torn or half-refreshed mirror. It names one version directory per chunk (paths relative to the table
directory), the changelog batch the mirror is refreshed through, each chunk's HW, and ``consistent_from``:
the table's largest chunk HW. Until the stream has passed it, chunks reflect different points of the binlog
(each its own HW, or the stream position if later) and the mirror is not a state the table ever had as a
whole; ``consistent`` says whether it is.

The refresh works from the manifest; consumers read the mirror's Delta table (``mirror_reader``). Without
delta-rs: :func:`mirror_files` lists the files, :func:`read_manifest_files` reads them with pyarrow. The
mirror files hold the table's columns only; a file written before an ADD COLUMN whose value for existing rows
is NULL lacks that column (no chunk is rewritten for it): read it as NULL.

Note for readers of the file list: the directories are named ``chunk=<id>/version=<v>``, which pyarrow and
DuckDB take for Hive partitions and turn into two extra columns unless told otherwise: pass
``partitioning=None`` (pyarrow) or ``hive_partitioning=false`` (DuckDB ``read_parquet``). Spark adds none when
given the files themselves.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import DeletionVector
from airflow_provider_mysqlcdc.engine.lake.file_types import engine_types
from airflow_provider_mysqlcdc.engine.lake.layout import (
    MIRROR,
    MIRROR_MANIFEST,
    filesystem,
    parse_json,
    read_bytes,
    read_json,
    table_dir,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

MIRROR_FORMAT = "mysqlcdc-mirror"
# 2: chunk parts and deletion vectors (``mirror_updates=deletion_vectors``), files named by path; 3: the
# same, with chunks naming files by their position in ``files`` (a release that reads 2 must refuse 3, never
# read a position as a path). This release writes 3 and reads 1-3.
MIRROR_FORMAT_VERSION = 3
PATHS_FORMAT_VERSION = 2
PLAIN_FORMAT_VERSION = 1  # what a manifest without deletion vectors is written as (as before they existed)


class MirrorNotFound(CdcError):
    """No mirror has been written for the table yet."""


@dataclass(frozen=True)
class FilePart:
    """Rows ``[start, end)`` of a mirror file that belong to one chunk (deletion-vector mode: a batch's
    overlay file holds the new rows of every chunk it changed, each chunk's a contiguous range)."""

    file: str  # relative to the table directory
    start: int
    end: int

    def to_list(self, index: dict[str, int] | None = None) -> list[Any]:
        """``[file, start, end]``; with ``index`` the file as its position in the manifest's ``files``."""
        return [self.file if index is None else index[self.file], self.start, self.end]

    @classmethod
    def from_list(cls, data: list[Any], files: list[str] | None = None) -> FilePart:
        file = data[0]
        return cls(files[file] if isinstance(file, int) and files is not None else str(file), int(data[1]),
                   int(data[2]))


@dataclass(frozen=True)
class MirrorChunkEntry:
    """One chunk's current mirror files and what they were built from.

    ``parts`` (deletion-vector mode only; empty otherwise): the row ranges of the files that hold the chunk's
    rows, its base file's and overlay files'; the rows the manifest's deletion vectors name are not live.
    ``rows`` counts live rows."""

    chunk_id: int
    version: str  # the mirror version directory of this chunk
    files: tuple[str, ...]  # relative to the table directory
    rows: int
    high_watermark: BinlogPosition  # the chunk's committed snapshot HW the files build on
    snapshot_version: str | None  # the chunk store's output_version of that snapshot
    through_batch: int | None  # the last changelog batch applied to these files
    parts: tuple[FilePart, ...] = ()

    def to_dict(self, index: dict[str, int] | None = None) -> dict[str, Any]:
        """``index``: write files as their position in the manifest's ``files`` (a manifest with parts: a
        batch's overlay file is named in every chunk it changed, so by name the manifest would grow by a
        path per chunk and batch)."""
        return {
            "chunk_id": self.chunk_id,
            "version": self.version,
            "files": list(self.files) if index is None else [index[f] for f in self.files],
            "rows": self.rows,
            "high_watermark": str(self.high_watermark),
            "snapshot_version": self.snapshot_version,
            "through_batch": self.through_batch,
            **({"parts": [p.to_list() for p in self.parts] if index is None else
                [[index[p.file], p.start, p.end] for p in self.parts]} if self.parts else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], files: list[str] | None = None) -> MirrorChunkEntry:
        """``files``: the manifest's, which a file given by position names."""
        return cls(
            chunk_id=int(data["chunk_id"]),
            version=str(data["version"]),
            files=tuple(files[f] if isinstance(f, int) and files is not None else str(f)
                        for f in data["files"]),
            rows=int(data["rows"]),
            high_watermark=BinlogPosition.parse(data["high_watermark"]),
            snapshot_version=data.get("snapshot_version"),
            through_batch=data.get("through_batch"),
            parts=tuple(FilePart.from_list(p, files) for p in data.get("parts") or ()),
        )


@dataclass(frozen=True)
class MirrorManifest:
    table: str
    generation: int  # the plan generation whose chunks the mirror is built from
    key_columns: tuple[str, ...]  # the chunk key
    primary_key: tuple[str, ...]  # empty: the mirror is a multiset of whole rows
    columns: tuple[str, ...]
    chunks: tuple[MirrorChunkEntry, ...]
    through_batch: int | None  # every committed changelog batch up to this id is applied
    stream_position: BinlogPosition | None  # how far the applied changelog reaches (None: no stream yet)
    stream_position_exact: bool  # from the batch marker's end_offset (else estimated from the records)
    refreshed_at: str
    extra: dict[str, Any] = field(default_factory=dict)
    # the deleted rows of each file that has any (deletion-vector mode), by file relative to the table dir
    deletion_vectors: dict[str, DeletionVector] = field(default_factory=dict)

    # -- derived ---------------------------------------------------------------------------------------------

    @property
    def files(self) -> list[str]:
        """Every file of the mirror, once (a batch's overlay file holds rows of several chunks)."""
        return list(dict.fromkeys(f for c in self.chunks for f in c.files))

    @property
    def uses_deletion_vectors(self) -> bool:
        return bool(self.deletion_vectors) or any(c.parts for c in self.chunks)

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.chunks)

    @cached_property  # over every chunk; to_dict asks for it several times
    def min_hw(self) -> BinlogPosition | None:
        return min((c.high_watermark for c in self.chunks), default=None)

    @cached_property  # over every chunk; to_dict asks for it several times
    def consistent_from(self) -> BinlogPosition | None:
        """The largest chunk HW: from this binlog position on, the whole mirror reflects one point in time."""
        return max((c.high_watermark for c in self.chunks), default=None)

    @property
    def consistent(self) -> bool:
        return is_consistent(self.min_hw, self.consistent_from, self.stream_position)

    @property
    def as_of(self) -> BinlogPosition | None:
        """The binlog position the mirror reflects when consistent (None when chunks are mixed)."""
        return consistent_as_of(self.min_hw, self.consistent_from, self.stream_position)

    def describe(self) -> str:
        """One line for people: rows, batch, and whether (and from where) the mirror is consistent."""
        through = (
            "no stream batch yet" if self.through_batch is None else f"through batch {self.through_batch}"
        )
        if self.consistent:
            state = f"consistent as of {self.as_of}"
        else:
            state = (
                f"NOT yet consistent: chunks mix their HWs {self.min_hw} .. {self.consistent_from}; "
                f"consistent once the stream passes {self.consistent_from} (stream at "
                f"{self.stream_position or 'not started'})"
            )
        return f"{self.table}: {self.rows} rows in {len(self.chunks)} chunks, {through}, {state}"

    # -- JSON ------------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        files = self.files
        vectored = self.uses_deletion_vectors
        index = {f: i for i, f in enumerate(files)} if vectored else None
        return {
            "format": MIRROR_FORMAT,
            "format_version": MIRROR_FORMAT_VERSION if vectored else PLAIN_FORMAT_VERSION,
            "table": self.table,
            "generation": self.generation,
            "key_columns": list(self.key_columns),
            "primary_key": list(self.primary_key),
            "multiset": not self.primary_key,
            "columns": list(self.columns),
            "rows": self.rows,
            "through_batch": self.through_batch,
            "stream_position": None if self.stream_position is None else str(self.stream_position),
            "stream_position_exact": self.stream_position_exact,
            "min_hw": None if self.min_hw is None else str(self.min_hw),
            "consistent_from": None if self.consistent_from is None else str(self.consistent_from),
            "consistent": self.consistent,
            "as_of": None if self.as_of is None else str(self.as_of),
            "refreshed_at": self.refreshed_at,
            "files": files,
            "chunks": [c.to_dict(index) for c in self.chunks],
            **({"extra": self.extra} if self.extra else {}),
            **({"deletion_vectors": {f: v.to_dict() for f, v in self.deletion_vectors.items()}}
               if self.deletion_vectors else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MirrorManifest:
        if data.get("format") != MIRROR_FORMAT:
            raise CdcError(f"not a mysqlcdc mirror manifest (format {data.get('format')!r})")
        version = data.get("format_version")
        if version not in (PLAIN_FORMAT_VERSION, PATHS_FORMAT_VERSION, MIRROR_FORMAT_VERSION):
            raise CdcError(
                f"mirror manifest format version {version!r} is not supported (this release reads "
                f"{MIRROR_FORMAT_VERSION}): upgrade the provider"
            )
        position = data.get("stream_position")
        files = [str(f) for f in data.get("files") or ()]
        return cls(
            table=str(data["table"]),
            generation=int(data["generation"]),
            key_columns=tuple(data["key_columns"]),
            primary_key=tuple(data["primary_key"]),
            columns=tuple(data["columns"]),
            chunks=tuple(MirrorChunkEntry.from_dict(c, files) for c in data["chunks"]),
            through_batch=data.get("through_batch"),
            stream_position=BinlogPosition.parse(position) if position else None,
            stream_position_exact=bool(data.get("stream_position_exact")),
            refreshed_at=str(data.get("refreshed_at", "")),
            extra=dict(data.get("extra") or {}),
            deletion_vectors={str(f): DeletionVector.from_dict(v)
                              for f, v in (data.get("deletion_vectors") or {}).items()},
        )


def is_consistent(
    min_hw: BinlogPosition | None, max_hw: BinlogPosition | None, stream: BinlogPosition | None
) -> bool:
    """Whether every chunk reflects the same binlog point.

    A chunk reflects max(its HW, stream position): its snapshot at HW plus the changes after HW that the
    stream has delivered. They agree once the stream has passed the largest HW, or when all HWs are equal.
    """
    if max_hw is None:
        return False
    if stream is not None and stream >= max_hw:
        return True
    return min_hw == max_hw


def consistent_as_of(
    min_hw: BinlogPosition | None, max_hw: BinlogPosition | None, stream: BinlogPosition | None
) -> BinlogPosition | None:
    if not is_consistent(min_hw, max_hw, stream):
        return None
    assert max_hw is not None
    return stream if stream is not None and stream > max_hw else max_hw


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def manifest_path(root: str, table: TableId) -> str:
    return posixpath.join(table_dir(root, table), MIRROR, MIRROR_MANIFEST)


def read_manifest(
    root: str, table: TableId | str, storage_options: dict[str, str] | None = None
) -> MirrorManifest | None:
    table = TableId.parse(table) if isinstance(table, str) else table
    data = read_json(manifest_path(root, table), storage_options)
    return None if data is None else MirrorManifest.from_dict(data)


def write_manifest(root: str, table: TableId, manifest: MirrorManifest) -> bytes:
    """Write the manifest; its bytes as written (``ManifestCache``)."""
    return write_json_atomic(manifest_path(root, table), manifest.to_dict(), item_lines=True)


@dataclass
class ManifestCache:
    """The manifests one refresher wrote last, by table, with their bytes: reading one back compares the
    file's bytes (one read, no parse) and reuses the object when they are the same: a manifest with deletion
    vectors names every chunk's parts, tens of ms to parse per batch at 300 chunks. Any other writer (another
    process's refresh) changes the bytes (``refreshed_at`` at least), so its manifest is parsed."""

    _known: dict[TableId, tuple[bytes, MirrorManifest]] = field(default_factory=dict)

    def read(self, root: str, table: TableId) -> MirrorManifest | None:
        path = manifest_path(root, table)
        raw = read_bytes(path)
        if raw is None:
            self._known.pop(table, None)
            return None
        known = self._known.get(table)
        if known is not None and known[0] == raw:
            return known[1]
        manifest = MirrorManifest.from_dict(parse_json(path, raw))
        self._known[table] = (raw, manifest)
        return manifest

    def write(self, root: str, table: TableId, manifest: MirrorManifest) -> None:
        self._known[table] = (write_manifest(root, table, manifest), manifest)


def mirror_files(root: str, table: TableId | str) -> list[str]:
    """Full paths (or URIs) of the current mirror files of a table, as the manifest names them."""
    table = TableId.parse(table) if isinstance(table, str) else table
    manifest = read_manifest(root, table)
    if manifest is None:
        raise MirrorNotFound(
            f"{table} has no mirror under {root!r} yet: run `mysqlcdc mirror --table {table}` (or let the "
            "stream refresh it) after the table's snapshot is committed"
        )
    base = table_dir(root, table)
    return [posixpath.join(base, f) for f in manifest.files]


def read_manifest_files(root: str, table: TableId | str, columns: list[str] | None = None) -> pa.Table:
    """The files the manifest names as one Arrow table, no partition columns: the mirror as of its last
    refresh, for a mirror with no Delta table (consumers read ``mirror_reader.read_mirror``)."""
    table = TableId.parse(table) if isinstance(table, str) else table
    files = mirror_files(root, table)
    fs, _ = filesystem(files[0])
    paths = [filesystem(f)[1] for f in files]
    # files written before an ADD COLUMN no chunk was rewritten for lack the column: NULL there, the value
    # the source gives those rows; the columns in the manifest's (the source's) order
    schema = pa.unify_schemas([pq.read_schema(p, filesystem=fs) for p in paths])
    order = [n for n in read_manifest(root, table).columns if n in schema.names]  # type: ignore[union-attr]
    schema = pa.schema([schema.field(n) for n in [*order, *(n for n in schema.names if n not in order)]])
    manifest = read_manifest(root, table)
    if manifest is not None and manifest.deletion_vectors:  # each file without its deleted rows
        from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import read_vector

        base = table_dir(root, table)
        parts = []
        for relative, path in zip(manifest.files, paths):
            data = ds.dataset([path], schema=schema, format="parquet", filesystem=fs,
                              partitioning=None).to_table(columns=columns)
            vector = manifest.deletion_vectors.get(relative)
            if vector is not None:
                keep = np.ones(data.num_rows, dtype=bool)
                keep[list(read_vector(posixpath.join(base, MIRROR), vector))] = False
                data = data.filter(pa.array(keep))
            parts.append(data)
        return engine_types(pa.concat_tables(parts))
    dataset = ds.dataset(paths, schema=schema, format="parquet", filesystem=fs, partitioning=None)
    return engine_types(dataset.to_table(columns=columns))
