"""Incremental refresh of a table's materialized mirror from its snapshot and changelog Parquet files.

The mirror rule (``tests/support/reference_mirror.py``) over Arrow tables, chunk by chunk: a chunk's state is
its *current* committed snapshot plus the changelog records of its key range whose position is after its
*current* HW, latest record per primary key by position, deletes removed (a multiset of whole rows without a
primary key).

Incremental, because every record of batch n+1 is later in the binlog than every record of batches <= n:
applying a new batch's records to a chunk's previous mirror state gives what applying all records to its
snapshot gives. So a refresh rewrites only the chunks that received records after their HW; the rest keep
their files. A chunk whose committed snapshot changed since the last refresh (a rerun: new version and HW; or
a new plan generation) is rebuilt from the new snapshot and every committed batch's records after the new HW:
records the new snapshot covers are ignored, never resurrected.

DDL the stream followed (``schema_history``): a chunk's files stay valid when the DDL only added columns whose
value for existing rows is NULL (no default, or ``DEFAULT NULL``), or changed a column without changing its
Arrow type (INT to BIGINT, a longer VARCHAR): a file without the column reads NULL there (``read_files`` and
every Delta reader), so no chunk is rewritten for it, and the mirror's Delta table adds the column
(``delta_mirror``). Any other column change rewrites every chunk from its snapshot in the new columns: an
added column with a default existing rows hold (no file holds it, and Delta has no per-file default), a
rename or a drop (Delta does either without a rewrite only with column mapping, which delta-rs, Polars and
pyarrow-based readers cannot read), a new Arrow type (FLOAT to DOUBLE, a DECIMAL's precision).

Key-changing updates: each row image is located in the chunk of its *own* key and applied there (a before
image retracts, an after image asserts), which is exactly what splitting ``-U``/``+U`` into ``-D``/``+I``
(``engine/model/key_changes.py``) achieves, so no separate pass is needed.

Commit protocol: new files go into fresh version directories, then the manifest is switched atomically, then
the Delta table follows in one commit. Nothing is deleted here: superseded versions stay for readers of older
versions (Delta time travel, an older manifest) until garbage collection (``engine/lake/gc``) deletes them
once their Delta ``remove`` is older than the retention. One refresher per table at a time: on a local file
system a lock file enforces it; on object stores the caller must (the stream's driver is the natural single
writer).

Here the refresher (which chunks to rebuild or update, which batches to apply, the manifest switch); the
pieces: ``mirror_records`` (the records per chunk after its HW), ``chunk_assigner`` (each record's chunk),
``mirror_apply`` (latest per key, or multiset), ``mirror_files`` (snapshot reads, chunk writes, lock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import posixpath
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Self

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, MirrorChunk, MirrorView
from airflow_provider_mysqlcdc.engine.chunks.key_order import ConnFactory
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.common.gc_pause import gc_paused
from airflow_provider_mysqlcdc.engine.lake.changelog import CommittedBatch, committed_batch_ids, read_batch
from airflow_provider_mysqlcdc.engine.lake.chunk_assigner import ChunkAssigner
from airflow_provider_mysqlcdc.engine.lake.concurrent_commits import concurrently
from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import DeletionVector
from airflow_provider_mysqlcdc.engine.lake.file_types import file_schema, same_type
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem, table_dir
from airflow_provider_mysqlcdc.engine.lake.mirror_apply import apply_latest, apply_multiset
from airflow_provider_mysqlcdc.engine.lake.mirror_dv_refresh import Compaction, dv_entries
from airflow_provider_mysqlcdc.engine.lake.mirror_files import (
    read_files,
    read_snapshot,
    refresh_lock,
    snapshot_files,
    write_chunk,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import (
    ManifestCache,
    MirrorChunkEntry,
    MirrorManifest,
    now_text,
    read_manifest,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_records import ChunkRecords, chunk_records
from airflow_provider_mysqlcdc.engine.lake.schema_history import (
    SchemaEvent,
    columns_after,
    events_after,
    excluded_after,
    read_schema_history,
    schema_version,
)
from airflow_provider_mysqlcdc.engine.lake.table_format import MirrorTable, mirror_table
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.position_text import after_bound, position_of
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.outages import (
    DEFAULT_RECONNECT_TIMEOUT_S,
    retry_while_unavailable,
)

log = logging.getLogger(__name__)

REWRITE, DELETION_VECTORS = "rewrite", "deletion_vectors"
MIRROR_UPDATES = (REWRITE, DELETION_VECTORS)  # the ``mirror_updates`` setting: how a batch updates the mirror


def check_mirror_updates(value: str) -> str:
    """The ``mirror_updates`` setting, checked."""
    if value not in MIRROR_UPDATES:
        raise ConfigurationError(
            f"mirror_updates={value!r}: use 'rewrite' (the default: a batch rewrites each chunk it touches; "
            "every documented reader reads the mirror) or 'deletion_vectors' (a batch writes its changes and "
            "Delta deletion vectors; see docs/output.md for the readers that read them)")
    return value


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
    compacted: tuple[int, ...] = ()  # deletion-vector mode: chunks rewritten into one clean file
    bytes_written: int = 0  # deletion-vector mode: data and vector files written


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
    _snapshot_marks: dict[str, tuple[int, int, str]] = field(default_factory=dict, repr=False)
    _tables: dict[TableId, MirrorTable] = field(default_factory=dict, repr=False)
    _manifests: ManifestCache = field(default_factory=ManifestCache, repr=False)
    _plans: dict[tuple[TableId, int], ChunkPlan] = field(default_factory=dict, repr=False)
    # views ``on_batch_committed`` read for this batch, in one go; each used once (a retry reads its own)
    _views: dict[str, MirrorView | None] = field(default_factory=dict, repr=False)
    outage_budget_s: float = DEFAULT_RECONNECT_TIMEOUT_S  # a MySQL outage during a refresh is waited out
    # how a batch updates the mirror: rewrite each touched chunk (default), or deletion vectors and one
    # overlay file per batch (``mirror_dv_refresh``); ``compaction`` bounds the latter's overlays
    updates: str = REWRITE
    compaction: Compaction = field(default_factory=Compaction)

    def __post_init__(self) -> None:
        check_mirror_updates(self.updates)
        if self.conn_factory is None and self.settings is not None:
            settings = self.settings
            self.conn_factory = lambda: connect(settings)

    def close(self) -> None:
        for assigner in self._assigners.values():
            assigner.close()
        self._assigners.clear()

    def __enter__(self) -> Self:
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

        The tables' refreshes are independent (each its own lock, files, manifest and Delta log), so they
        run at once in a small thread pool (``concurrent_commits``); every table's view of the chunk store
        is read in one go first (the changed tables', and on the first batch the quiet tables', whose
        snapshot is checked against their mirror).

        A MySQL outage (a restart, KILLed sessions, a failover) while a mirror is refreshed is waited out for
        ``outage_budget_s``, like the stream's own reads: a refresh is safe to run again (new file versions,
        then the manifest), and the table's collation sessions are opened anew."""
        marks = self.store.snapshot_marks(self.store.active_tables())
        changed = {str(t) for t in tables}
        quiet = [(name, mark) for name, mark in marks.items() if name not in changed]
        # every view this batch looks at, in one read (after the marks: a snapshot committing in between is
        # in the view, and its mark differs next batch, which refreshes again; never the other way round)
        first_seen = [name for name, _ in quiet if name not in self._snapshot_marks]
        self._views = self.store.mirror_views([*changed, *first_seen])
        try:
            self._refresh_batch(batch_id, tables, marks, quiet)
        finally:
            self._views = {}  # a later refresh reads its own

    def _refresh_batch(self, batch_id: int, tables: list[TableId], marks: dict[str, tuple[int, int, str]],
                       quiet: list[tuple[str, tuple[int, int, str]]]) -> None:
        where = f"{self.settings.host}:{self.settings.port}" if self.settings is not None else "MySQL"
        # one after another: with the views read above, a check is one small file read, cheaper than a thread
        stale = [TableId.parse(name) for name, mark in quiet if self._snapshot_stale(name, mark)]

        def refresh(table: TableId) -> None:
            retry_while_unavailable(  # runs at once: the partial only binds this table for the retries
                functools.partial(self.refresh, table, [batch_id]),
                what=f"refreshing the mirror of {table}",
                where=where,
                budget_s=self.outage_budget_s,
                on_retry=functools.partial(self.close_table, table),
            )
            if str(table) in marks:
                self._snapshot_marks[str(table)] = marks[str(table)]

        concurrently([functools.partial(refresh, table) for table in [*tables, *stale]])

    def close_table(self, table: TableId) -> None:
        """Close the collation sessions of one table's chunk assigners (a retry after an outage opens them
        anew), leaving the other tables' alone: their refreshes may be running."""
        for key in [k for k in self._assigners if k[0] == table]:
            assigner = self._assigners.pop(key, None)
            if assigner is not None:
                assigner.close()

    def _snapshot_stale(self, table: str, mark: tuple[int, int, str]) -> bool:
        """Whether the table's mirror is behind its committed snapshot though the batch had no change of it: a
        quiet table whose snapshot (or a chunk rerun) committed would otherwise have no mirror, or an old one,
        until its next change. Known marks say it at once; a table first seen here is compared with its
        manifest (generation and each chunk's snapshot version), once per stream run."""
        seen = self._snapshot_marks.get(table)
        if seen is not None:
            return seen != mark
        manifest = read_manifest(self.root, TableId.parse(table))
        view = self._views[table] if table in self._views else self.store.mirror_view(table)
        current = manifest is not None and view is not None and manifest.generation == view.generation and (
            {c.chunk_id: c.snapshot_version for c in manifest.chunks}
            == {c.chunk_id: c.output_version for c in view.chunks})
        if current:
            self._snapshot_marks[table] = mark
        return not current

    # -- one table -------------------------------------------------------------------------------------------

    def refresh(self, table: TableId | str, batch_ids: Iterable[int] | None = None) -> MirrorRefresh:
        """Bring the mirror up to date with the committed snapshot and the committed changelog batches.

        ``batch_ids``: the batches just committed (a hint that bounds the work: batches after the largest are
        left for the next refresh); None applies every committed batch not applied yet.
        """
        table = TableId.parse(table) if isinstance(table, str) else table
        started = time.monotonic()
        # the collector paused: a refresh makes many short-lived acyclic objects per chunk (manifest entries,
        # parts, Delta actions), which would start collections that walk the whole process (gc_pause)
        with refresh_lock(self.root, table), gc_paused():
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
        name = str(table)
        view = self._views.pop(name) if name in self._views else self.store.mirror_view(name)
        old = self._manifests.read(self.root, table)
        if view is None:
            planned = str(table) in self.store.tables()
            return MirrorRefresh(
                str(table),
                old,
                reason="no plan generation of this table is fully committed "
                "yet: the mirror is built once every chunk of a plan has a committed snapshot" if planned else
                "not in the pipeline: this chunk store has no plan for it (add it: mysqlcdc plan --tables "
                f"{table}, or to the DAG's tables param)",
            )
        build = self._build(table, view, old)
        batches = _Batches.of(committed_batch_ids(self.root, table), batch_ids, old)
        new_batches = [read_batch(self.root, table, b) for b in batches.new_ids]
        changes = chunk_records(
            self.root, table, self._assigner(table, build.plan, build.schema), build.plan, view,
            build.data_schema, new_batches, batches.old_ids, build.rebuild, build.history,
        )
        compacted: list[int] = []
        written = 0
        vectors: dict[str, DeletionVector] = {}
        vectored = old is not None and old.uses_deletion_vectors and bool(build.previous)
        if self.updates == DELETION_VECTORS or vectored:
            # rewrite mode over a mirror that has vectors: each touched chunk is rewritten from its live rows
            compaction = self.compaction if self.updates == DELETION_VECTORS else Compaction(everything=True)
            done = dv_entries(self.root, build, changes, batches.through, old, compaction,
                              lambda chunk: read_snapshot(self.root, table, view.generation, chunk,
                                                          build.data_schema, build.history))
            entries, rewritten, vectors = done.entries, done.rewritten, done.vectors
            compacted, written = done.compacted, done.bytes_written
        else:
            entries, rewritten = self._chunk_entries(build, changes, batches.through)
        position, exact = _stream_position(old, new_batches, changes.latest_position, view)
        manifest = build.manifest(entries, batches.through, position, exact, vectors)
        if rewritten or old is None or _header_changed(old, manifest):
            self._manifests.write(self.root, table, manifest)
            self._delta(table).sync(manifest, build.data_schema)  # after the manifest: readers never see less
            # nothing is deleted here: readers of older versions (Delta time travel, an older manifest) keep
            # their files until garbage collection (``lake.gc``) finds them unreferenced past the retention
        else:
            manifest = old
            self._delta(table).sync(manifest, build.data_schema)  # nothing new; catches up a missed sync
        return MirrorRefresh(
            str(table),
            manifest,
            rewritten=tuple(rewritten),
            rebuilt=tuple(sorted(build.rebuild)),
            batches=tuple(batches.new_ids),
            records=changes.read,
            compacted=tuple(compacted),
            bytes_written=written,
        )

    def build_of(self, table: TableId) -> MirrorBuild:
        """What a refresh would build ``table``'s mirror from now (plan, columns, schema history), for readers
        that derive a chunk's state by the mirror rule themselves (``engine/verify``)."""
        view = self.store.mirror_view(str(table))
        if view is None:
            raise CdcError(f"{table}: no plan generation is fully committed yet, so the lake holds no mirror "
                           "of it to verify: finish its snapshot first (mysqlcdc status)")
        return self._build(table, view, read_manifest(self.root, table))

    def assigner_of(self, build: MirrorBuild) -> ChunkAssigner:
        """The chunk assigner of ``build``'s plan (collation-aware for string keys)."""
        return self._assigner(build.table, build.plan, build.schema)

    def _delta(self, table: TableId) -> MirrorTable:
        """The table's mirror in the table format (``bench/mirror_refresh.py`` times its ``sync`` by this
        method's name)."""
        found = self._tables.get(table)
        if found is None:
            found = self._tables[table] = mirror_table(self.root, table)
        return found

    def _build(self, table: TableId, view: MirrorView, old: MirrorManifest | None) -> MirrorBuild:
        """The plan, the columns, and which chunks are rebuilt from their snapshot (new snapshot, new plan,
        first build, changed columns) or updated from their previous files."""
        plan = self._plan(table, view.generation)
        history = read_schema_history(self.root, table)
        schema_mark = history[-1].position if history else None
        if self._schema_marks.get(table, schema_mark) != schema_mark:
            self.schemas.pop(table, None)  # the stream followed DDL since: the table's newest columns
        self._schema_marks[table] = schema_mark
        schema = self._schema(table)
        # DDL the stream followed since the last refresh: the chunks keep their files when it only added
        # columns whose value for existing rows is NULL (``_rewrite_reason``); otherwise every chunk is built
        # again from its snapshot in the new columns
        since = old.extra.get("schema_position") if old is not None else None
        ddl = events_after(history, since or "") if old is not None and since != schema_mark else []
        data_schema = None
        keep = old is not None and old.generation == view.generation
        if keep and old is not None and since != schema_mark:
            data_schema = self._data_schema(table, schema, view, old, history, ddl)
            why = (_rewrite_reason(ddl, old, data_schema, lambda names: self._file_types(table, old, names))
                   if ddl else "the schema history no longer holds the DDL the mirror followed")
            if why is None:
                log.info("mirror %s: %s; no chunk rewritten for it", table, _describe_added(old, data_schema))
            else:
                keep, data_schema = False, None
                log.info("mirror %s: every chunk is rebuilt from its snapshot: %s", table, why)
        previous = {c.chunk_id: c for c in old.chunks} if keep and old is not None else {}
        rebuild = {c.chunk_id for c in view.chunks if _needs_rebuild(previous.get(c.chunk_id), c)}
        if data_schema is None:
            data_schema = self._data_schema(table, schema, view, old if previous else None, history)
        missing = [c for c in (*schema.primary_key, *plan.key_columns) if c not in data_schema.names]
        if missing:
            raise CdcError(
                f"{table}: key columns {missing} are not in the output columns: they cannot be excluded"
            )
        return MirrorBuild(table, view, plan, schema, history, schema_mark, data_schema, previous, rebuild)

    def _chunk_entries(
        self, build: MirrorBuild, changes: ChunkRecords, through: int | None
    ) -> tuple[list[MirrorChunkEntry], list[int]]:
        """Every chunk's manifest entry: new files for the chunks rebuilt or with new records, the previous
        entry for the rest; and the ids of the chunks that got new files."""
        table, view, data_schema, primary_key = build.table, build.view, build.data_schema, build.primary_key
        entries: list[MirrorChunkEntry] = []
        rewritten: list[int] = []
        for chunk in view.chunks:
            cid = chunk.chunk_id
            if cid in build.rebuild:
                state = read_snapshot(self.root, table, view.generation, chunk, data_schema, build.history)
            elif cid in changes.per_chunk:
                state = read_files(
                    [posixpath.join(table_dir(self.root, table), f) for f in build.previous[cid].files],
                    data_schema,
                )
            else:
                entries.append(build.previous[cid])  # nothing new: keep its files
                continue
            records = changes.per_chunk.get(cid)
            if records is not None:
                state = (
                    apply_latest(state, records, primary_key)
                    if primary_key
                    else apply_multiset(state, records)
                )
            entries.append(write_chunk(self.root, table, chunk, state, through))
            rewritten.append(cid)
        return entries, rewritten

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

    def _plan(self, table: TableId, generation: int) -> ChunkPlan:
        """A plan generation, read from the store once (a generation never changes once created)."""
        plan = self._plans.get((table, generation))
        if plan is None:
            plan = self._plans[(table, generation)] = ChunkPlan.from_dict(
                self.store.plan(str(table), generation).plan)
        return plan

    def _assigner(self, table: TableId, plan: ChunkPlan, schema: TableSchema) -> ChunkAssigner:
        assigner = self._assigners.get((table, plan.generation))
        if assigner is None:
            assigner = ChunkAssigner(plan, schema, self.conn_factory)
            self._assigners[(table, plan.generation)] = assigner
        return assigner

    def _data_schema(
        self, table: TableId, schema: TableSchema, view: MirrorView, old: MirrorManifest | None,
        history: list[SchemaEvent], since_old: list[SchemaEvent] | None = None,
    ) -> pa.Schema:
        """The mirror's columns: the table's, as far as the snapshot files hold them (some excluded), after
        the DDL the stream followed since (a column the source has but the stream has not reached yet is
        left out until it does). ``since_old``: the DDL followed since the ``old`` manifest."""
        full = values.arrow_schema(schema)
        if old is not None:
            names = set(columns_after(list(old.columns), since_old or []))
        else:
            names = None
            for chunk in view.chunks:
                files = snapshot_files(self.root, table, view.generation, chunk)
                if files:
                    fs, inner = filesystem(files[0])
                    found = pq.read_schema(inner, filesystem=fs).names
                    names = set(columns_after(found, events_after(history, after_bound(chunk.hw))))
                    break
        if names is not None and history and (old is None or since_old):
            names -= self._excluded(table, view.generation, history)  # never added back by DDL
        return full if names is None else pa.schema([f for f in full if f.name in names])

    def _excluded(self, table: TableId, generation: int, history: list[SchemaEvent]) -> set[str]:
        """The columns the snapshot left out (``exclude_columns``, recorded with each chunk), under every name
        DDL gave them since: a column added or renamed under such a name stays out of the mirror too, as the
        changelog never holds it (``schema_history.excluded_after``)."""
        recorded = {
            str(name)
            for chunk in self.store.chunks(str(table), generation)
            for name in (chunk.extra or {}).get("excluded_columns") or ()
        }
        return excluded_after(recorded, history) if recorded else set()

    def _file_types(self, table: TableId, old: MirrorManifest, names: set[str]) -> dict[str, pa.DataType]:
        """The Arrow types the previous mirror files hold ``names`` in (file types: TIME as int64): a footer
        is read until each has been seen (one, usually; every file of a mirror has the same types, as a type
        change rewrites them all)."""
        found: dict[str, pa.DataType] = {}
        base = table_dir(self.root, table)
        for path in old.files:
            fs, inner = filesystem(posixpath.join(base, path))
            for f in pq.read_schema(inner, filesystem=fs):
                if f.name in names:
                    found.setdefault(f.name, f.type)
            if set(found) >= names:
                break
        return found


@dataclass(frozen=True)
class _Batches:
    """The committed changelog batches of a table as one refresh sees them."""

    new_ids: list[int]  # committed, not applied yet (up to the caller's latest)
    old_ids: list[int]  # applied before: read again for the chunks being rebuilt
    through: int | None  # the latest batch the mirror reflects after this refresh

    @classmethod
    def of(cls, committed: list[int], batch_ids: list[int] | None, old: MirrorManifest | None) -> _Batches:
        if batch_ids:
            committed = [b for b in committed if b <= max(batch_ids)]
        applied = old.through_batch if old is not None else None
        new_ids = [b for b in committed if applied is None or b > applied]
        old_ids = [b for b in committed if applied is not None and b <= applied]
        through = max([*committed, *([applied] if applied is not None else [])], default=None)
        return cls(new_ids, old_ids, through)


@dataclass(frozen=True)
class MirrorBuild:
    """What one refresh builds a table's mirror from."""

    table: TableId
    view: MirrorView
    plan: ChunkPlan
    schema: TableSchema
    history: list[SchemaEvent]
    schema_mark: str | None  # the position of the latest DDL the stream followed
    data_schema: pa.Schema  # the mirror's columns
    previous: dict[int, MirrorChunkEntry]  # entries of the previous manifest still valid
    rebuild: set[int]  # chunks rebuilt from their snapshot

    @property
    def primary_key(self) -> tuple[str, ...]:
        """The Arrow columns that identify a row: the key's, each temporal one with its zero-date companion
        where the files hold it (two zero dates differ only there)."""
        names = values.identity_names(self.schema, self.schema.primary_key)
        return tuple(n for n in names if n in self.data_schema.names)

    def manifest(
        self, entries: list[MirrorChunkEntry], through: int | None, position: BinlogPosition | None,
        exact: bool, vectors: dict[str, DeletionVector] | None = None,
    ) -> MirrorManifest:
        history = self.history
        return MirrorManifest(
            table=str(self.table),
            generation=self.view.generation,
            key_columns=tuple(self.plan.key_columns),
            primary_key=self.primary_key,
            columns=tuple(self.data_schema.names),
            chunks=tuple(entries),
            through_batch=through,
            stream_position=position,
            stream_position_exact=exact,
            refreshed_at=now_text(),
            extra={"schema_position": self.schema_mark, "schema_version": schema_version(history)}
            if history
            else {},
            deletion_vectors=dict(vectors or {}),
        )


# --- helpers ------------------------------------------------------------------------------------------------


def _needs_rebuild(entry: MirrorChunkEntry | None, chunk: MirrorChunk) -> bool:
    return entry is None or entry.snapshot_version != chunk.output_version or entry.high_watermark != chunk.hw


def _header_changed(old: MirrorManifest, new: MirrorManifest) -> bool:
    """Whether the manifest says something new though no chunk has new files: the stream moved on, or DDL
    changed the columns (an ADD COLUMN no chunk is rewritten for) or the schema history."""
    return (old.through_batch, old.stream_position, old.generation, old.columns, _schema_mark(old)) != (
        new.through_batch,
        new.stream_position,
        new.generation,
        new.columns,
        _schema_mark(new),
    )


def _schema_mark(manifest: MirrorManifest) -> tuple[Any, Any]:
    return manifest.extra.get("schema_position"), manifest.extra.get("schema_version")


def _rewrite_reason(
    ddl: list[SchemaEvent], old: MirrorManifest, data_schema: pa.Schema,
    file_types: Callable[[set[str]], dict[str, pa.DataType]],
) -> str | None:
    """Why the DDL the stream followed since the ``old`` manifest makes every chunk's files wrong; None when
    they stay right as they are: the DDL only added columns whose value for existing rows is NULL (a file
    without the column reads NULL there, in our readers and every Delta reader), or changed a column in a way
    the files do not show (INT to BIGINT, a longer VARCHAR: the same Arrow type).

    Anything else rewrites the mirror: a non-NULL default (existing rows hold it, no file does), a rename or a
    drop (Delta without column mapping can neither, and delta-rs 1.6 cannot read column mapping with
    pyarrow, Polars or DuckDB), a new Arrow type (FLOAT to DOUBLE, a DECIMAL's precision), or DDL that needs a
    new snapshot."""
    had = set(old.columns)
    new_names = set(data_schema.names)
    target = file_schema(data_schema)
    for event in ddl:
        c = event.changes
        if event.resnapshot:
            return f"{event.verb} needs a new snapshot ({event.resnapshot})"
        renamed = [f"{a} to {b}" for a, b in c.renamed.items() if a in had]
        if renamed:
            return f"column {renamed[0]} was renamed"
        dropped = [n for n in c.dropped if n in had]
        if dropped:
            return f"column {dropped[0]} was dropped"
        for name, literal in c.added.items():
            if name in new_names and not (literal is None or literal.strip().upper() == "NULL"):
                return f"column {name} was added with default {literal}, which existing rows hold"
        changed = {n for n in c.modified if n in had and n in new_names}
        if changed:
            types = file_types(changed)
            for name in sorted(changed):
                kind = types.get(name)
                if kind is not None and not same_type(kind, target.field(name).type):  # None: in no file
                    return f"column {name} changed type ({kind} to {target.field(name).type})"
    return None


def _describe_added(old: MirrorManifest, data_schema: pa.Schema) -> str:
    added = [n for n in data_schema.names if n not in set(old.columns)]
    if not added:
        return "the DDL changed nothing its files hold"
    return f"column(s) {', '.join(added)} added, NULL in existing rows"


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
    return dataclasses.replace(result, seconds=seconds)
