"""Reading a table's mirror as data consumers do: through its Delta table, now or as of a binlog position, a
time or a Delta version (time travel).

Each mirror commit records the binlog position the whole table is exact at (``mysqlcdc.asOf``, once the
mirror is consistent). So "the table as of position P" is the latest mirror version whose ``asOf`` is at or
before P: exact at every recorded position, and for a position between two versions the table as of the
earlier one (the batch that made the next version ended after P; its changes are not in it). "As of time T"
is Delta's own time travel: the latest version *written* at or before T (the lake's clock: it trails the
source by the stream's latency).

The files of the chosen version are read with pyarrow, so our own column types come back (TIME as
``duration[us]``, noted in each file's schema), and files written before an ADD COLUMN read NULL there, as
every Delta reader reads them. A version with deletion vectors (``mirror_updates=deletion_vectors``) is read
the same way, each file's deleted rows dropped by the keep-mask delta-rs reports for it
(``DeltaTable.deletion_vectors()``). A table whose mirror has no Delta table yet (an empty mirror, or an
output written before the mirror was a Delta table) is read through its manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids
from airflow_provider_mysqlcdc.engine.lake.delta_dv_commit import FEATURE
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import (
    AS_OF,
    STREAM_POSITION,
    THROUGH_BATCH,
    mirror_table_uri,
)
from airflow_provider_mysqlcdc.engine.lake.file_types import ENGINE_TYPE, engine_types, plain_type
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import (
    MirrorNotFound,
    read_manifest,
    read_manifest_files,
)
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

AsOf = BinlogPosition | datetime | int  # a binlog position, a time (aware, or UTC) or a Delta version


@dataclass(frozen=True)
class MirrorVersion:
    """One commit of a table's mirror Delta table, and where in the binlog it stands."""

    version: int
    written_at: datetime  # the Delta commit's own timestamp (UTC)
    through_batch: int | None  # the last changelog batch applied
    stream_position: BinlogPosition | None  # how far the applied changelog reaches
    as_of: BinlogPosition | None  # the position the whole table is exact at (None: not yet consistent)

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "written_at": self.written_at.isoformat(timespec="milliseconds"),
            "through_batch": self.through_batch,
            "stream_position": None if self.stream_position is None else str(self.stream_position),
            "as_of": None if self.as_of is None else str(self.as_of),
        }


def mirror_versions(
    root: str, table: TableId | str, storage_options: dict[str, str] | None = None
) -> list[MirrorVersion]:
    """Every mirror version the Delta log still holds, oldest first (empty: no Delta table yet)."""
    table = _table(table)
    delta = _delta_table(root, table, storage_options)
    if delta is None:
        return []
    return sorted((_version_of(entry) for entry in delta.history()), key=lambda v: v.version)


def latest_mirror_version(
    root: str, table: TableId | str, storage_options: dict[str, str] | None = None
) -> MirrorVersion | None:
    """The mirror's current Delta version (one log read; None: no Delta table yet)."""
    delta = _delta_table(root, _table(table), storage_options)
    if delta is None:
        return None
    entries = delta.history(limit=1)
    return _version_of(entries[0]) if entries else None


def mirror_version_at(
    root: str, table: TableId | str, as_of: AsOf, storage_options: dict[str, str] | None = None
) -> MirrorVersion:
    """The mirror version that shows the table as of ``as_of`` (a binlog position, a time or a version);
    an error naming what is available when none does."""
    table = _table(table)
    versions = mirror_versions(root, table, storage_options)
    if not versions:
        raise MirrorNotFound(
            f"{table} has no mirror Delta table under {root!r} yet: it is written once the table's snapshot "
            f"is committed and the mirror refreshed (`mysqlcdc mirror --table {table}`, or the running "
            "stream)"
        )
    if isinstance(as_of, bool) or not isinstance(as_of, (BinlogPosition, datetime, int)):
        raise ConfigurationError(
            f"as_of {as_of!r}: give a binlog position, a datetime or a Delta version number"
        )
    if isinstance(as_of, int):
        found = [v for v in versions if v.version == as_of]
        if not found:
            raise CdcError(
                f"{table}: the mirror has no Delta version {as_of}; it holds versions "
                f"{versions[0].version}..{versions[-1].version} (older ones are removed after the retention)"
            )
        return found[0]
    if isinstance(as_of, datetime):
        when = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=UTC)
        written = [v for v in versions if v.written_at <= when]
        if not written:
            raise CdcError(
                f"{table}: no mirror version was written at or before {when.isoformat()}; the oldest kept is "
                f"version {versions[0].version}, written {versions[0].written_at.isoformat()}"
            )
        return written[-1]
    return _at_position(root, table, versions, as_of, storage_options)


def read_mirror(
    root: str,
    table: TableId | str,
    columns: list[str] | None = None,
    as_of: AsOf | None = None,
    storage_options: dict[str, str] | None = None,
) -> pa.Table:
    """The table's mirror as one Arrow table: the current state, or as of a binlog position, a time or a Delta
    version (``as_of``). Our column types (TIME as ``duration[us]``), no partition columns."""
    table = _table(table)
    delta = _delta_table(root, table, storage_options)
    if delta is None:
        if as_of is not None:
            mirror_version_at(root, table, as_of, storage_options)  # raises: no versions to travel to
        return read_manifest_files(root, table, columns)
    if as_of is None:
        return _in_source_order(root, table, _read_files(delta, columns, storage_options), storage_options)
    version = mirror_version_at(root, table, as_of, storage_options)
    delta.load_as_version(version.version)
    try:
        return _in_source_order(root, table, _read_files(delta, columns, storage_options), storage_options)
    except FileNotFoundError:
        raise CdcError(
            f"{table}: the files of mirror version {version.version} (written "
            f"{version.written_at.isoformat()}) "
            "were deleted by garbage collection: time travel on the mirror reaches back as far as the GC "
            "retention of superseded mirror files (`--gc-mirror-retention`, default 1h; `mysqlcdc gc "
            "--mirror-retention`); older states come from the changelog"
        ) from None


# --- pieces -------------------------------------------------------------------------------------------------


def _table(table: TableId | str) -> TableId:
    return TableId.parse(table) if isinstance(table, str) else table


def _delta_table(root: str, table: TableId, storage_options: dict[str, str] | None) -> Any:
    from deltalake import DeltaTable

    uri = mirror_table_uri(root, table)
    if not DeltaTable.is_deltatable(uri, storage_options):
        return None
    return DeltaTable(uri, storage_options=storage_options)


def _version_of(entry: dict[str, Any]) -> MirrorVersion:
    def position(key: str) -> BinlogPosition | None:
        text = entry.get(key)
        return BinlogPosition.parse(text) if text else None

    batch = entry.get(THROUGH_BATCH)
    return MirrorVersion(
        version=int(entry["version"]),
        written_at=datetime.fromtimestamp(int(entry["timestamp"]) / 1000, tz=UTC),
        through_batch=int(batch) if batch not in (None, "") else None,
        stream_position=position(STREAM_POSITION),
        as_of=position(AS_OF),
    )


def _at_position(root: str, table: TableId, versions: list[MirrorVersion], at: BinlogPosition,
                 storage_options: dict[str, str] | None) -> MirrorVersion:
    """The latest version exact at or before ``at``; refused before the first consistent version and past the
    position the mirror has reached (it cannot know yet what the table held there)."""
    consistent = [v for v in versions if v.as_of is not None]
    if not consistent:
        raise CdcError(
            f"{table}: no mirror version is consistent yet (the stream has not passed the largest chunk high "
            "watermark of its snapshot): there is no position the whole table can be shown at"
        )
    reached = _reached(root, table, versions, storage_options)
    if reached is not None and at > reached:
        raise CdcError(
            f"{table}: the mirror has reached binlog position {reached}; {at} is past it. Wait for the "
            "stream to pass it, or read the current state"
        )
    before = [v for v in consistent if v.as_of <= at]
    if not before:
        raise CdcError(
            f"{table}: {at} is before the earliest position a kept mirror version is exact at "
            f"({consistent[0].as_of}, version {consistent[0].version}); older states are removed after the "
            "retention, and the mirror is exact only from its snapshot's largest high watermark on"
        )
    return max(before, key=lambda v: (v.as_of, v.version))


def _reached(root: str, table: TableId, versions: list[MirrorVersion],
             storage_options: dict[str, str] | None) -> BinlogPosition | None:
    """How far the mirror is known to reflect the source: the position of its latest refresh, or the stream's
    latest committed batch when the mirror holds every batch that changed the table (an idle table's mirror
    is not rewritten, yet stays exact while the stream moves on)."""
    manifest = read_manifest(root, table, storage_options)
    known = [p for p in (manifest.as_of if manifest is not None else None, versions[-1].as_of)
             if p is not None]
    progress = read_stream_progress(root, storage_options)
    if (manifest is not None and manifest.as_of is not None and progress is not None
            and progress.covers(table)):
        own = committed_batch_ids(root, table, storage_options)
        applied = manifest.through_batch
        if not own or (applied is not None and applied >= own[-1]):
            known.append(progress.end_offset.ordered_position)
    return max(known, default=None)


def _in_source_order(root: str, table: TableId, data: pa.Table,
                     storage_options: dict[str, str] | None) -> pa.Table:
    """The columns in the source's order, as the manifest lists them (Delta's ``ADD COLUMNS`` appends a column
    added with ``FIRST`` or ``AFTER`` at the end); columns it does not list (an older version's) after
    them."""
    manifest = read_manifest(root, table, storage_options)
    if manifest is None:
        return data
    order = [n for n in manifest.columns if n in data.column_names]
    order += [n for n in data.column_names if n not in order]
    return data if order == data.column_names else data.select(order)


def _read_files(delta: Any, columns: list[str] | None, storage_options: dict[str, str] | None = None
                ) -> pa.Table:
    """The files of the loaded Delta version, read through delta-rs's file system (its storage options) in
    the Delta schema (a column a file lacks reads NULL), each column keeping the engine-type note its files
    carry."""
    if has_deletion_vectors(delta):
        return _read_with_vectors(delta, columns, storage_options)
    dataset = delta.to_pyarrow_dataset()
    schema = pa.schema([pa.field(f.name, plain_type(f.type), True) for f in dataset.schema])
    if dataset.files:
        schema = _with_engine_notes(schema, dataset.files, dataset.filesystem)
        dataset = ds.dataset(dataset.files, schema=schema, format="parquet", filesystem=dataset.filesystem,
                             partitioning=None)
        table = dataset.to_table(columns=columns)
    else:
        table = schema.empty_table() if columns is None else schema.empty_table().select(columns)
    return engine_types(table)


def has_deletion_vectors(delta: Any) -> bool:
    """Whether the table's protocol has the deletion-vector reader feature (pyarrow datasets refuse it)."""
    return FEATURE in (delta.protocol().reader_features or [])


def keep_masks(delta: Any) -> dict[str, np.ndarray]:
    """Each file's keep-mask (True: the row is live) as delta-rs reports it, for files with a vector (by
    URI). A mask may be shorter than the file: rows past its end are live."""
    found = pa.RecordBatchReader.from_stream(delta.deletion_vectors()).read_all()
    masks = found.column("selection_vector").combine_chunks()
    return {file_key(path): masks[i].values.to_numpy(zero_copy_only=False)
            for i, path in enumerate(found.column("filepath").to_pylist())}


def file_key(uri: str) -> str:
    """A data file's URI in one form: delta-rs names local files ``file:///...`` in its vector listing and
    by plain path in ``file_uris()``."""
    return unquote(uri.removeprefix("file://"))


def _read_with_vectors(delta: Any, columns: list[str] | None,
                       storage_options: dict[str, str] | None) -> pa.Table:
    schema = pa.schema([pa.field(f.name, plain_type(f.type), True)
                        for f in pa.schema(delta.schema().to_arrow())])
    files = delta.file_uris()
    if not files:
        return engine_types(schema.empty_table() if columns is None else schema.empty_table().select(columns))
    fs, _ = filesystem(files[0], storage_options)
    paths = [filesystem(f, storage_options)[1] for f in files]
    schema = _with_engine_notes(schema, paths, fs)
    masks = keep_masks(delta)
    parts = []
    for uri, path in zip(files, paths):
        data = ds.dataset([path], schema=schema, format="parquet", filesystem=fs, partitioning=None).to_table(
            columns=columns)
        mask = masks.get(file_key(uri))
        if mask is not None and not mask.all():
            keep = np.ones(data.num_rows, dtype=bool)
            keep[:len(mask)] = mask[:data.num_rows]
            data = data.filter(pa.array(keep))
        parts.append(data)
    return engine_types(pa.concat_tables(parts))


def _with_engine_notes(schema: pa.Schema, paths: list[str], fs: Any) -> pa.Schema:
    """``schema`` with each field's engine-type note (``file_types.ENGINE_TYPE``) from the files that hold
    the column: a footer is read until every column has been seen (usually one)."""
    notes: dict[str, dict[bytes, bytes]] = {}
    missing = set(schema.names)
    for path in paths:
        for f in pq.read_schema(path, filesystem=fs):
            if f.name in missing:
                missing.discard(f.name)
                if f.metadata and ENGINE_TYPE in f.metadata:
                    notes[f.name] = {ENGINE_TYPE: f.metadata[ENGINE_TYPE]}
        if not missing:
            break
    return pa.schema([f.with_metadata(notes[f.name]) if f.name in notes else f for f in schema])
