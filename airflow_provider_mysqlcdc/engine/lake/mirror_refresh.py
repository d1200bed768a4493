"""Incremental refresh of a table's materialized mirror from its snapshot and changelog Parquet files.

The mirror rule (``tests/support/reference_mirror.py``) over Arrow tables, chunk by chunk: a chunk's state is its *current*
committed snapshot plus the changelog records of its key range whose position is after its *current* HW,
latest record per primary key by position, deletes removed (a multiset of whole rows without a primary key).

Incremental, because every record of batch n+1 is later in the binlog than every record of batches <= n:
applying a new batch's records to a chunk's previous mirror state gives what applying all records to its
snapshot gives. So a refresh rewrites only the chunks that received records after their HW; the rest keep
their files. A chunk whose committed snapshot changed since the last refresh (a rerun: new version and HW; or
a new plan generation) is rebuilt from the new snapshot and every committed batch's records after the new HW:
records the new snapshot covers are ignored, never resurrected.

Key-changing updates: each row image is located in the chunk of its *own* key and applied there (a before
image retracts, an after image asserts), which is exactly what splitting ``-U``/``+U`` into ``-D``/``+I``
(``key_changes.py``) achieves, so no separate pass is needed.

Commit protocol: new files go into fresh version directories, then the manifest is switched atomically, then
version directories named by neither the new nor the previous manifest are deleted (readers of the previous
manifest keep working for one more refresh). One refresher per table at a time: on a local file system a lock
file enforces it; on object stores the caller must (the stream's driver is the natural single writer).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import posixpath
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.lake.changelog import CommittedBatch, committed_batch_ids, parquet_files, read_batch
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, MirrorChunk, MirrorView
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.chunks.key_order import ConnFactory, KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import (
    MirrorChunkEntry,
    MirrorManifest,
    now_text,
    read_manifest,
    write_manifest,
)
from airflow_provider_mysqlcdc.engine.source.outages import DEFAULT_RECONNECT_TIMEOUT_S, retry_while_unavailable
from airflow_provider_mysqlcdc.engine.lake.layout import MIRROR, filesystem, mirror_dir, new_version, snapshot_dir, table_dir
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.model.position_text import after_bound, position_of
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.records import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE
from airflow_provider_mysqlcdc.engine.lake.schema_history import (
    SchemaEvent,
    columns_after,
    conform,
    events_after,
    read_schema_history,
    schema_version,
)
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema

log = logging.getLogger(__name__)

OP, POSITION, CHUNK = "_op", "_position", "_chunk"
PART_FILE = "part.parquet"
_ASSERTS = pa.array([INSERT, UPDATE_AFTER])
_RETRACTS = (DELETE, UPDATE_BEFORE)


@dataclass(frozen=True)
class MirrorRefresh:
    """What one refresh did (``manifest`` is None when the table has no fully committed snapshot yet)."""

    table: str
    manifest: MirrorManifest | None
    rewritten: tuple[int, ...] = ()  # chunks that got new files
    rebuilt: tuple[int, ...] = ()  # of those, rebuilt from their snapshot (new snapshot or first build)
    batches: tuple[int, ...] = ()  # changelog batches applied by this refresh
    records: int = 0  # changelog records read
    seconds: float = 0.0
    reason: str | None = None


@dataclass(frozen=True)
class _ChunkRecords:
    per_chunk: dict[int, pa.Table]  # chunk id -> its records after its HW, by position (only non-empty)
    read: int  # records read from the files
    latest_position: str | None  # the latest ``_position`` among the new batches' records


# --- where each record belongs ------------------------------------------------------------------------------


class ChunkAssigner:
    """Chunk index of each record's key under one plan, vectorized where Arrow's order is the server's.

    A single integer, DATE, DATETIME or TIMESTAMP key compares natively (as ``KeyOrder`` does), so it is
    located with one ``searchsorted``; any other key goes through ``ChunkLocator`` and the server's collation
    sort keys. Keys with a NULL belong to the first chunk.
    """

    def __init__(self, plan: ChunkPlan, schema: TableSchema, conn_factory: ConnFactory | None) -> None:
        self.plan, self.schema, self._conn_factory = plan, schema, conn_factory
        self.chunk_ids = [c.chunk_id for c in plan.chunks]
        self._index = {cid: i for i, cid in enumerate(self.chunk_ids)}
        self._order: KeyOrder | None = None
        self._locator: ChunkLocator | None = None
        self._bounds: dict[pa.DataType, np.ndarray | None] = {}

    def close(self) -> None:
        if self._order is not None:
            self._order.close()
            self._order = self._locator = None

    def indexes(self, table: pa.Table) -> np.ndarray:
        """Index into ``plan.chunks`` for every row of ``table`` (which holds the key columns)."""
        if table.num_rows == 0 or len(self.chunk_ids) == 1:
            return np.zeros(table.num_rows, dtype=np.int64)
        if len(self.plan.key_columns) == 1:
            column = table.column(self.plan.key_columns[0])
            native, bounds = _native_ints(column), self._native_bounds(column.type)
            if native is not None and bounds is not None:
                keys, nulls = native
                out = np.searchsorted(bounds, keys, side="right")
                out[nulls] = 0
                return out
        return self._slow(table)

    def _native_bounds(self, arrow_type: pa.DataType) -> np.ndarray | None:
        """The plan's inner chunk starts as int64 in the column's Arrow type (None: not natively ordered)."""
        if arrow_type not in self._bounds:
            starts = pa.chunked_array(
                [
                    pa.array(
                        [c.start[0] for c in self.plan.chunks[1:]],  # type: ignore[index]
                        type=arrow_type,
                    )
                ]
            )
            native = _native_ints(starts)
            self._bounds[arrow_type] = None if native is None or native[1].any() else native[0]
        return self._bounds[arrow_type]

    def _slow(self, table: pa.Table) -> np.ndarray:
        if self._locator is None:
            factory = self._conn_factory or _no_connection(self.schema.table)
            self._order = KeyOrder(factory, self.schema, self.plan.key_columns)
            self._locator = ChunkLocator(self.plan, self._order)
        keys = list(zip(*(table.column(c).to_pylist() for c in self.plan.key_columns)))
        return np.fromiter(
            (self._index[c] for c in self._locator.locate(keys)), dtype=np.int64, count=len(keys)
        )


def _native_ints(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray] | None:
    """(int64 values, null mask) of a column whose Arrow order is the server's order; None otherwise."""
    t = column.type
    if pa.types.is_integer(t) and t != pa.uint64():
        target = column
    elif pa.types.is_timestamp(t):
        target = column.cast(pa.int64())
    elif pa.types.is_date32(t):
        target = column.cast(pa.int32())
    else:
        return None
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    filled = target.fill_null(0) if column.null_count else target
    return filled.to_numpy().astype(np.int64, copy=False), nulls


def _no_connection(table: TableId) -> ConnFactory:
    def fail() -> object:
        raise CdcError(
            f"{table}: locating string chunk keys needs a MySQL connection (collation sort keys); "
            "give the mirror refresher the MySQL settings"
        )

    return fail  # type: ignore[return-value]


# --- applying records to a chunk's state --------------------------------------------------------------------


def apply_latest(state: pa.Table, changes: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """Rows of ``state`` with the latest of ``changes`` (sorted by position) per primary key applied."""
    if changes.num_rows == 0:
        return state
    pk = list(primary_key)
    indexed = changes.select(pk).append_column("_i", pa.array(np.arange(changes.num_rows, dtype=np.int64)))
    last = indexed.group_by(pk, use_threads=False).aggregate([("_i", "max")]).column("_i_max")
    latest = changes.take(pa.array(np.sort(last.to_numpy())))
    kept = state.join(latest.select(pk), keys=pk, join_type="left anti", use_threads=False)
    upserts = latest.filter(pc.is_in(latest.column(OP), value_set=_ASSERTS))
    names = state.schema.names
    return pa.concat_tables([kept.select(names).cast(state.schema), upserts.select(names).cast(state.schema)])


def apply_multiset(state: pa.Table, changes: pa.Table) -> pa.Table:
    """A table without a primary key: inserts add one copy of the row, retractions remove one if present."""
    if changes.num_rows == 0:
        return state
    names = state.schema.names
    bag: Counter[tuple] = Counter(zip(*(state.column(n).to_pylist() for n in names)))
    rows = zip(*(changes.column(n).to_pylist() for n in names))
    for op, row in zip(changes.column(OP).to_pylist(), rows):
        if op in _RETRACTS:
            if bag[row] > 0:
                bag[row] -= 1
        else:
            bag[row] += 1
    out = list(bag.elements())
    if not out:
        return state.schema.empty_table()
    columns = list(zip(*out))
    return pa.Table.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, state.schema)], schema=state.schema
    )


# --- the refresher ------------------------------------------------------------------------------------------


@dataclass
class MirrorRefresher:
    """Refreshes the mirrors of tables under one output root; keeps per-table plans, schemas and key orders.

    ``conn_factory`` (or ``settings``) opens MySQL connections: for table schemas and for collation sort keys
    of string chunk keys. The stream's driver holds one and calls :meth:`refresh_tables` after each committed
    batch; ``mysqlcdc mirror`` calls :meth:`refresh`.
    """

    root: str
    store: ChunkStore
    settings: MySQLSettings | None = None
    conn_factory: ConnFactory | None = None
    schemas: dict[TableId, TableSchema] = field(default_factory=dict)
    _assigners: dict[tuple[TableId, int], ChunkAssigner] = field(default_factory=dict, repr=False)
    _schema_marks: dict[TableId, str | None] = field(default_factory=dict, repr=False)
    outage_budget_s: float = DEFAULT_RECONNECT_TIMEOUT_S  # a MySQL outage during a refresh is waited out

    def __post_init__(self) -> None:
        if self.conn_factory is None and self.settings is not None:
            settings = self.settings
            self.conn_factory = lambda: connect(settings)

    def close(self) -> None:
        for assigner in self._assigners.values():
            assigner.close()
        self._assigners.clear()

    def __enter__(self) -> "MirrorRefresher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the stream's hook -----------------------------------------------------------------------------------

    def refresh_tables(
        self, tables: Iterable[TableId | str], batch_id: int | None = None
    ) -> list[MirrorRefresh]:
        """After batch ``batch_id`` committed: refresh the mirrors of the tables it changed."""
        return [self.refresh(t, None if batch_id is None else [batch_id]) for t in tables]

    def on_batch_committed(self, batch_id: int, tables: list[TableId]) -> None:
        """The changelog sink's hook signature (``ChangelogSink(on_batch_committed=...)``).

        A MySQL outage (a restart, KILLed sessions, a failover) while a mirror is refreshed is waited out for
        ``outage_budget_s``, like the stream's own reads: a refresh is safe to run again (new file versions,
        then the manifest), and the collation sessions are opened anew."""
        where = f"{self.settings.host}:{self.settings.port}" if self.settings is not None else "MySQL"
        for table in tables:
            retry_while_unavailable(
                lambda: self.refresh(table, [batch_id]),
                what=f"refreshing the mirror of {table}",
                where=where,
                budget_s=self.outage_budget_s,
                on_retry=self.close,
            )

    # -- one table -------------------------------------------------------------------------------------------

    def refresh(self, table: TableId | str, batch_ids: Iterable[int] | None = None) -> MirrorRefresh:
        """Bring the mirror up to date with the committed snapshot and the committed changelog batches.

        ``batch_ids``: the batches just committed (a hint that bounds the work: batches after the largest are
        left for the next refresh); None applies every committed batch not applied yet.
        """
        table = TableId.parse(table) if isinstance(table, str) else table
        started = time.monotonic()
        with _refresh_lock(self.root, table):
            result = self._refresh(table, list(batch_ids) if batch_ids is not None else None)
        result = _with_seconds(result, time.monotonic() - started)
        if result.manifest is not None:
            log.info(
                "mirror %s: rewrote chunks %s (rebuilt %s), applied batches %s, %d records, %.2fs; %s",
                table,
                list(result.rewritten),
                list(result.rebuilt),
                list(result.batches),
                result.records,
                result.seconds,
                result.manifest.describe(),
            )
        return result

    def _refresh(self, table: TableId, batch_ids: list[int] | None) -> MirrorRefresh:
        view = self.store.mirror_view(str(table))
        old = read_manifest(self.root, table)
        if view is None:
            return MirrorRefresh(
                str(table),
                old,
                reason="no plan generation of this table is fully committed "
                "yet: the mirror is built once every chunk of a plan has a committed snapshot",
            )
        plan = ChunkPlan.from_dict(self.store.plan(str(table), view.generation).plan)
        history = read_schema_history(self.root, table)
        schema_mark = history[-1].position if history else None
        if self._schema_marks.get(table, schema_mark) != schema_mark:
            self.schemas.pop(table, None)  # the stream followed DDL since: the table's newest columns
        self._schema_marks[table] = schema_mark
        schema = self._schema(table)
        if old is not None and old.extra.get("schema_position") != schema_mark:
            old_ids_all = True  # the columns changed: every chunk is built again from its snapshot
        else:
            old_ids_all = False

        # batches: the committed ones not applied yet (up to the caller's latest); older ones for rebuilds
        committed = committed_batch_ids(self.root, table)
        if batch_ids:
            committed = [b for b in committed if b <= max(batch_ids)]
        applied = old.through_batch if old is not None else None
        new_ids = [b for b in committed if applied is None or b > applied]
        old_ids = [b for b in committed if applied is not None and b <= applied]
        through = max([*committed, *([applied] if applied is not None else [])], default=None)

        # chunks: rebuilt from their snapshot (new snapshot, new plan, first build), or updated from their
        # previous files
        previous = (
            {c.chunk_id: c for c in old.chunks}
            if old is not None and old.generation == view.generation and not old_ids_all
            else {}
        )
        rebuild = {c.chunk_id for c in view.chunks if _needs_rebuild(previous.get(c.chunk_id), c)}
        data_schema = self._data_schema(table, schema, view, old if previous else None, history)
        primary_key = tuple(schema.primary_key)
        missing = [c for c in (*primary_key, *plan.key_columns) if c not in data_schema.names]
        if missing:
            raise CdcError(
                f"{table}: key columns {missing} are not in the output columns: they cannot be excluded"
            )

        new_batches = [read_batch(self.root, table, b) for b in new_ids]
        changes = self._records(table, plan, schema, view, data_schema, new_batches, old_ids, rebuild, history)
        entries: list[MirrorChunkEntry] = []
        rewritten: list[int] = []
        for chunk in view.chunks:
            cid = chunk.chunk_id
            if cid in rebuild:
                state = self._snapshot(table, view, chunk, data_schema, history)
            elif cid in changes.per_chunk:
                state = _read_files(
                    [posixpath.join(table_dir(self.root, table), f) for f in previous[cid].files], data_schema
                )
            else:
                entries.append(previous[cid])  # nothing new: keep its files
                continue
            records = changes.per_chunk.get(cid)
            if records is not None:
                state = (
                    apply_latest(state, records, primary_key)
                    if primary_key
                    else apply_multiset(state, records)
                )
            entries.append(self._write_chunk(table, chunk, state, through))
            rewritten.append(cid)

        position, exact = _stream_position(old, new_batches, changes.latest_position, view)
        manifest = MirrorManifest(
            table=str(table),
            generation=view.generation,
            key_columns=tuple(plan.key_columns),
            primary_key=primary_key,
            columns=tuple(data_schema.names),
            chunks=tuple(entries),
            through_batch=through,
            stream_position=position,
            stream_position_exact=exact,
            refreshed_at=now_text(),
            extra={"schema_position": schema_mark, "schema_version": schema_version(history)} if history else {},
        )
        if rewritten or old is None or _header_changed(old, manifest):
            write_manifest(self.root, table, manifest)
            _collect_garbage(
                self.root, table, keep=[*manifest.files, *(old.files if old is not None else [])]
            )
        else:
            manifest = old
        return MirrorRefresh(
            str(table),
            manifest,
            rewritten=tuple(rewritten),
            rebuilt=tuple(sorted(rebuild)),
            batches=tuple(new_ids),
            records=changes.read,
        )

    def _records(
        self,
        table: TableId,
        plan: ChunkPlan,
        schema: TableSchema,
        view: MirrorView,
        data_schema: pa.Schema,
        new_batches: list[CommittedBatch],
        old_ids: list[int],
        rebuild: set[int],
        history: list[SchemaEvent],
    ) -> "_ChunkRecords":
        """Records after their chunk's HW, per chunk: of the new batches for every chunk, and of the batches
        applied before only for the chunks being rebuilt."""
        assigner = self._assigner(table, plan, schema)
        hws = {c.chunk_id: c.hw for c in view.chunks}
        new = _read_changes([f for b in new_batches for f in b.files], data_schema, min(hws.values()), history,
                            str(table))
        latest = pc.max(new.column(POSITION)).as_py() if new.num_rows else None
        per_new = dict(_slices(self._assign(assigner, new, plan, hws)))
        read = new.num_rows
        per_old: dict[int, pa.Table] = {}
        if rebuild and old_ids:
            files = [f for b in old_ids for f in read_batch(self.root, table, b).files]
            old = _read_changes(files, data_schema, min(hws[c] for c in rebuild), history, str(table))
            read += old.num_rows
            per_old = dict(_slices(_only_chunks(self._assign(assigner, old, plan, hws), rebuild)))
        per_chunk = {cid: t for cid, t in per_new.items() if t.num_rows}
        for cid, t in per_old.items():
            per_chunk[cid] = _concat_sorted([t, per_chunk.get(cid)])
        return _ChunkRecords(per_chunk, read, latest)

    # -- pieces ----------------------------------------------------------------------------------------------

    def _schema(self, table: TableId) -> TableSchema:
        schema = self.schemas.get(table)
        if schema is None:
            if self.conn_factory is None:
                raise CdcError(f"{table}: the mirror refresher needs MySQL settings to load the table schema")
            with contextlib.closing(self.conn_factory()) as conn:
                schema = load_schema(conn, table)
            self.schemas[table] = schema
        return schema

    def _assigner(self, table: TableId, plan: ChunkPlan, schema: TableSchema) -> ChunkAssigner:
        assigner = self._assigners.get((table, plan.generation))
        if assigner is None:
            assigner = ChunkAssigner(plan, schema, self.conn_factory)
            self._assigners[(table, plan.generation)] = assigner
        return assigner

    def _assign(
        self, assigner: ChunkAssigner, changes: pa.Table, plan: ChunkPlan, hws: dict[int, BinlogPosition]
    ) -> pa.Table:
        """``changes`` after their chunk's HW, with their chunk id, sorted by chunk and position."""
        index = assigner.indexes(changes)
        ids = pa.array(np.asarray(assigner.chunk_ids, dtype=np.int32)[index], pa.int32())
        bounds = pa.array([after_bound(hws[c.chunk_id]) for c in plan.chunks]).take(pa.array(index))
        keep = pc.greater(changes.column(POSITION), bounds)
        tagged = changes.append_column(CHUNK, ids).filter(keep)
        return tagged.sort_by([(CHUNK, "ascending"), (POSITION, "ascending")])

    def _data_schema(
        self, table: TableId, schema: TableSchema, view: MirrorView, old: MirrorManifest | None,
        history: list[SchemaEvent],
    ) -> pa.Schema:
        """The mirror's columns: the table's, as far as the snapshot files hold them (some excluded), after
        the DDL the stream followed since (a column the source has but the stream has not reached yet is
        left out until it does)."""
        full = values.arrow_schema(schema)
        if old is not None:
            names = set(old.columns)
        else:
            names = None
            for chunk in view.chunks:
                files = self._snapshot_files(table, view.generation, chunk)
                if files:
                    fs, inner = filesystem(files[0])
                    found = pq.read_schema(inner, filesystem=fs).names
                    names = set(columns_after(found, events_after(history, after_bound(chunk.hw))))
                    break
        return full if names is None else pa.schema([f for f in full if f.name in names])

    def _snapshot_files(self, table: TableId, generation: int, chunk: MirrorChunk) -> list[str]:
        version = chunk.output_version
        if version is None:
            return []
        if "/" in version:  # the writer recorded the version directory itself (the Spark snapshot does)
            return parquet_files(version)
        return parquet_files(snapshot_dir(self.root, table, generation, chunk.chunk_id, version))

    def _snapshot(
        self, table: TableId, view: MirrorView, chunk: MirrorChunk, data_schema: pa.Schema,
        history: list[SchemaEvent],
    ) -> pa.Table:
        files = self._snapshot_files(table, view.generation, chunk)
        events = events_after(history, after_bound(chunk.hw))
        if events:  # the chunk was read before some DDL: its rows in the newer columns
            parts = [conform(_read_file(f), events, data_schema, str(table)) for f in files]
            state = pa.concat_tables(parts) if parts else data_schema.empty_table()
        else:
            state = _read_files(files, data_schema)
        if state.num_rows != chunk.rows:
            version = chunk.output_version or "?"
            where = (
                version
                if "/" in version
                else snapshot_dir(self.root, table, view.generation, chunk.chunk_id, version)
            )
            raise CdcError(
                f"{table} chunk {chunk.chunk_id}: the snapshot files ({where}) hold {state.num_rows} rows, "
                f"the chunk store committed {chunk.rows}: wrong output root, or the files were changed"
            )
        return state

    def _write_chunk(
        self, table: TableId, chunk: MirrorChunk, state: pa.Table, through: int | None
    ) -> MirrorChunkEntry:
        version = new_version()
        directory = mirror_dir(self.root, table, chunk.chunk_id, version)
        fs, inner = filesystem(directory)
        fs.create_dir(inner, recursive=True)
        pq.write_table(state, posixpath.join(inner, PART_FILE), filesystem=fs)
        relative = posixpath.join(directory[len(table_dir(self.root, table)) + 1 :], PART_FILE)
        return MirrorChunkEntry(
            chunk.chunk_id, version, (relative,), state.num_rows, chunk.hw, chunk.output_version, through
        )


# --- helpers ------------------------------------------------------------------------------------------------


def _needs_rebuild(entry: MirrorChunkEntry | None, chunk: MirrorChunk) -> bool:
    return entry is None or entry.snapshot_version != chunk.output_version or entry.high_watermark != chunk.hw


def _header_changed(old: MirrorManifest, new: MirrorManifest) -> bool:
    return (old.through_batch, old.stream_position, old.generation) != (
        new.through_batch,
        new.stream_position,
        new.generation,
    )


def _change_schema(data_schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(OP, pa.string()), pa.field(POSITION, pa.string()), *data_schema])


def _read_changes(
    files: list[str], data_schema: pa.Schema, after: BinlogPosition, history: list[SchemaEvent] | None = None,
    name: str = "",
) -> pa.Table:
    """``_op``, ``_position`` and the table columns of the records in ``files`` after ``after``, in the
    newest columns (``schema_history``) when the table's columns changed while the stream ran.

    The filter prunes row groups by their ``_position`` statistics, so batches wholly before the watermark
    cost a footer read."""
    schema = _change_schema(data_schema)
    if not files:
        return schema.empty_table()
    if history:
        parts = []
        for f in files:
            fs, inner = filesystem(f)
            part = ds.dataset(inner, format="parquet", filesystem=fs).to_table(
                filter=pc.field(POSITION) > after_bound(after)
            )
            if part.num_rows:
                parts.extend(_conformed_changes(part, history, data_schema, name))
        return pa.concat_tables(parts).cast(schema) if parts else schema.empty_table()
    fs, _ = filesystem(files[0])
    dataset = ds.dataset(
        [filesystem(f)[1] for f in files], schema=schema, format="parquet", filesystem=fs, partitioning=None
    )
    return dataset.to_table(filter=pc.field(POSITION) > after_bound(after))


def _conformed_changes(
    part: pa.Table, history: list[SchemaEvent], data_schema: pa.Schema, name: str
) -> Iterator[pa.Table]:
    """The records of one file in the newest columns: each record gets the DDL that came after it."""
    marks = np.array([e.position for e in history])  # fixed-width strings: they sort like the positions
    buckets = np.searchsorted(marks, part.column(POSITION).to_numpy(zero_copy_only=False), side="right")
    for i in np.unique(buckets):
        rows = part.filter(pa.array(buckets == i))
        yield conform(rows, history[int(i):], data_schema, name, keep=(OP, POSITION))


def _read_file(path: str) -> pa.Table:
    fs, inner = filesystem(path)
    return pq.read_table(inner, filesystem=fs)


def _read_files(files: list[str], schema: pa.Schema) -> pa.Table:
    if not files:
        return schema.empty_table()
    fs, _ = filesystem(files[0])
    dataset = ds.dataset(
        [filesystem(f)[1] for f in files], schema=schema, format="parquet", filesystem=fs, partitioning=None
    )
    return dataset.to_table().cast(schema)


def _only_chunks(table: pa.Table, chunk_ids: set[int]) -> pa.Table:
    return table.filter(pc.is_in(table.column(CHUNK), value_set=pa.array(sorted(chunk_ids), pa.int32())))


def _slices(table: pa.Table | None) -> Iterator[tuple[int, pa.Table]]:
    """(chunk id, its records) of a table sorted by chunk."""
    if table is None or table.num_rows == 0:
        return
    ids = table.column(CHUNK).to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], len(ids)]
    for start, end in zip(starts, ends):
        yield int(ids[start]), table.slice(int(start), int(end - start))


def _concat_sorted(parts: list[pa.Table | None]) -> pa.Table:
    present = [p for p in parts if p is not None]
    return pa.concat_tables(present).sort_by(POSITION)


def _stream_position(
    old: MirrorManifest | None, batches: list[CommittedBatch], latest: str | None, view: MirrorView
) -> tuple[BinlogPosition | None, bool]:
    """How far the applied changelog reaches: the last batch's ``end_offset``; else the latest record read."""
    position = old.stream_position if old is not None else None
    exact = old.stream_position_exact if old is not None else False
    if not batches:
        return position, exact
    end = batches[-1].end_offset
    if end is not None:
        return end.ordered_position, True  # in the order of ``_position`` and HWs, also after a failover
    latest = max([p for p in (latest, *(b.last_position for b in batches)) if p], default=None)
    if latest is not None:
        estimate = position_of(latest, view.chunks[0].hw)
        if position is None or estimate > position:
            return estimate, False
    return position, exact


def _with_seconds(result: MirrorRefresh, seconds: float) -> MirrorRefresh:
    return MirrorRefresh(
        result.table,
        result.manifest,
        result.rewritten,
        result.rebuilt,
        result.batches,
        result.records,
        seconds,
        result.reason,
    )


def _collect_garbage(root: str, table: TableId, keep: list[str]) -> None:
    """Delete mirror version directories named by neither the new nor the previous manifest.

    Works on the shape ``mirror/<chunk dir>/<version dir>/`` whatever the directories are called; names
    starting with ``_`` or ``.`` (the manifest, the lock) are left alone."""
    keep_dirs = {posixpath.dirname(f) for f in keep}
    mirror_root = posixpath.join(table_dir(root, table), MIRROR)
    fs, inner = filesystem(mirror_root)
    for chunk_info in fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True)):
        if chunk_info.type != pafs.FileType.Directory or chunk_info.base_name.startswith(("_", ".")):
            continue
        remaining = 0
        for version in fs.get_file_info(pafs.FileSelector(chunk_info.path, allow_not_found=True)):
            if f"{MIRROR}/{chunk_info.base_name}/{version.base_name}" in keep_dirs:
                remaining += 1
            elif version.type == pafs.FileType.Directory:
                fs.delete_dir(version.path)
            else:
                fs.delete_file(version.path)
        if not remaining:
            fs.delete_dir(chunk_info.path)


@contextlib.contextmanager
def _refresh_lock(root: str, table: TableId) -> Iterator[None]:
    """One refresher per table: an exclusive lock file on local file systems (elsewhere: the caller's job)."""
    directory = posixpath.join(table_dir(root, table), MIRROR)
    if "://" in directory and not directory.startswith("file://"):
        yield
        return
    local = directory[len("file://") :] if directory.startswith("file://") else directory
    os.makedirs(local, exist_ok=True)
    fd = os.open(os.path.join(local, "_refresh.lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
