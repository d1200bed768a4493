"""The stream phase in plain Python: binlog reader + stream filter, with chunk HWs from the chunk store.

The Spark streaming source calls this per micro-batch; tests and the CLI call it directly. ``read`` returns
the emitted records and the offset to resume from, which is exact (inside a transaction or a rows event too).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from airflow_provider_mysqlcdc.engine.binlog.changes import Heartbeat, RowBlock, SchemaChange
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, TableView
from airflow_provider_mysqlcdc.engine.chunks.key_order import KeyOrder
from airflow_provider_mysqlcdc.engine.chunks.locator import ChunkLocator
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.gc_pause import gc_paused
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.records import UPDATE_BEFORE, Record
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.stream.filter import (
    EmittedRows,
    GenerationFilter,
    StreamFilter,
    TableFilter,
    stream_start,
)


@dataclass
class StreamBatch:
    """What one read emits: ``rows`` (the filter's verdict on each rows event, columns kept as the decoder
    gave them: the Spark source makes Arrow of them) and the same as ``records`` (one Record per change, in
    binlog order, for callers that apply changes one by one)."""

    rows: list[EmittedRows]
    start: BinlogOffset
    end: BinlogOffset  # resume here; equals start when nothing was read
    rows_read: int = 0
    seconds: float = 0.0
    dropped: int = 0
    schemas: dict[str, TableSchema] = field(default_factory=dict)  # schema_id -> schema, of the records
    schema_changes: list[SchemaChange] = field(default_factory=list)  # DDL of captured tables, in order
    # the commit time of the last transaction read (any table's: what the stream's lag in seconds counts from)
    last_event_at: datetime | None = None
    _records: list[Record] | None = field(default=None, repr=False)

    @property
    def emitted(self) -> int:
        return sum(len(r) for r in self.rows)

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            records = [record for r in self.rows for record in r.records()]
            records.sort(key=lambda r: r.key)
            self._records = records
        return self._records


@dataclass
class _Locators:
    order: KeyOrder
    locator: ChunkLocator


@dataclass
class ChangeStream:
    settings: MySQLSettings
    store: ChunkStore
    tables: list[TableId]
    server_id: int
    schemas: dict[TableId, TableSchema] = field(default_factory=dict)
    _locators: dict[tuple[TableId, int], _Locators] = field(default_factory=dict, repr=False)
    _filter: StreamFilter | None = field(default=None, repr=False)
    _views: dict[str, TableView] = field(default_factory=dict, repr=False)
    _replanned: dict[TableId, BinlogPosition] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.schemas:
            with connect(self.settings) as conn:
                self.schemas = {t: _captured_schema(conn, t) for t in self.tables}
        self.refresh()

    def close(self) -> None:
        for item in self._locators.values():
            item.order.close()
        self._locators.clear()

    # -- chunk HWs -------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Reload chunk HWs and plans (reruns committed, tables re-planned) into the filter. A plan generation
        never changes once created, so each is read from the store once per stream (all new ones in one read
        transaction): a batch's refresh costs one ``stream_view`` read, not a read per table."""
        self._views = self.store.stream_view([str(t) for t in self.tables])
        self._load_plans()
        filters = [self._table_filter(t, self._views.get(str(t))) for t in self.tables]
        if self._filter is None:
            self._filter = StreamFilter(filters)
        else:
            for f in filters:
                self._filter.update(f)

    def _load_plans(self) -> None:
        """Locators for every plan generation in the views not seen yet, their plans read in one go."""
        wanted = []
        for table in self.tables:
            view = self._views.get(str(table))
            for gen_view in view.generations if view is not None else ():
                if (table, gen_view.generation) not in self._locators:
                    wanted.append((table, gen_view.generation))
        if not wanted:
            return
        for (table, generation), info in zip(wanted, self.store.plans([(str(t), g) for t, g in wanted])):
            plan = ChunkPlan.from_dict(info.plan)
            order = KeyOrder(lambda: connect(self.settings), self.schemas[table], plan.key_columns)
            self._locators[(table, generation)] = _Locators(order, ChunkLocator(plan, order))

    def _table_filter(self, table: TableId, view: TableView | None) -> TableFilter:
        schema = self.schemas[table]
        if view is None:
            return TableFilter(schema, [])  # not planned yet: everything is emitted
        generations = []
        newest = max(g.generation for g in view.generations) if view.generations else None
        for gen_view in view.generations:
            locators = self._locators[(table, gen_view.generation)]
            plan = locators.locator.plan
            if plan.planned_at is not None and gen_view.generation == newest:
                self._replanned[table] = plan.planned_at
            hws = {c.chunk_id: c.hw for c in gen_view.chunks}
            generations.append(GenerationFilter(gen_view.generation, plan.key_columns, locators.locator, hws))
        return TableFilter(schema, generations)

    def start_offset(self) -> BinlogOffset:
        """min(HW) over all committed chunks of the captured tables."""
        return BinlogOffset.at(stream_start(v.min_hw for v in self._views.values()))

    # -- reading ---------------------------------------------------------------------------------------------

    def read(
        self,
        start: BinlogOffset,
        end: BinlogPosition | None = None,
        *,
        max_rows: int | None = None,
        timeout: float | None = None,
        blocking: bool = False,
        on_batch: Callable[[list[Record]], None] | None = None,
        file_number_base: int = 0,
    ) -> StreamBatch:
        """Read from ``start`` up to ``end`` (default: the current end of the binlog), at most ``max_rows``
        row images (never cutting between the two images of an update).

        ``file_number_base`` is added to the binlog file number of every row's position before the stream
        filter sees it (a stream that failed over to another server: ``engine/stream/failover.py``).

        A read that does not wait for new events runs with the cyclic garbage collector paused
        (``common/gc_pause.py``: it made a third of an OLTP read's CPU)."""
        if blocking:
            return self._read(start, end, max_rows, timeout, blocking, on_batch, file_number_base)
        with gc_paused():
            return self._read(start, end, max_rows, timeout, blocking, on_batch, file_number_base)

    def _read(
        self,
        start: BinlogOffset,
        end: BinlogPosition | None,
        max_rows: int | None,
        timeout: float | None,
        blocking: bool,
        on_batch: Callable[[list[Record]], None] | None,
        file_number_base: int,
    ) -> StreamBatch:
        assert self._filter is not None
        started = time.monotonic()
        reader = BinlogReader(self.settings, self.server_id, set(self.tables), self.schemas, self._replanned)
        pending: list[RowBlock] = []
        ddl: list[SchemaChange] = []
        offset = start
        after: RowBlock | None = None  # the offset is right after this block (computed once, at the end)
        rows = 0
        last_event_at: datetime | None = None
        for item in reader.read_with_heartbeats(start, end, blocking=blocking, timeout=timeout, blocks=True):
            last_event_at = item.commit_ts or last_event_at
            if isinstance(item, SchemaChange):
                ddl.append(item)
                offset, after = item.offset, None
                continue
            if isinstance(item, Heartbeat):
                offset, after = item.offset, None
                if max_rows is not None and rows >= max_rows and not _open_update(pending):
                    break
                continue
            cut = _cut(item, max_rows - rows) if max_rows is not None else None
            if cut is not None:
                item = item.head(cut)
            pending.append(item)
            after = item
            rows += len(item)
            if cut is not None:
                break
        else:
            # Read to the end: the reader knows the exact resume point (past trailing foreign transactions).
            if reader.last_offset is not None:
                offset, after = reader.last_offset, None
        if after is not None:
            offset = after.offset_after(len(after) - 1)
        dropped_before = self._filter.dropped
        if file_number_base:
            pending = [_rebased(block, file_number_base) for block in pending]
            ddl = [dataclasses.replace(d, key=(file_number_base + d.key[0], *d.key[1:])) for d in ddl]
        schemas = {b.schema.schema_id: b.schema for b in pending}
        batch = StreamBatch(
            rows=self._filter.apply_blocks(pending), start=start, end=offset, rows_read=rows,
            seconds=time.monotonic() - started, dropped=self._filter.dropped - dropped_before,
            schemas=schemas, schema_changes=ddl, last_event_at=last_event_at,
        )
        if on_batch is not None:
            on_batch(batch.records)
        return batch


def _captured_schema(conn: object, table: TableId) -> TableSchema:
    try:
        return load_schema(conn, table)
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{exc}. If {table} was dropped or renamed for good, take it out of the pipeline (mysqlcdc "
            f"remove-table {table}, or the DAG param remove_tables) and restart the stream"
        ) from None


def _open_update(pending: list[RowBlock]) -> bool:
    return bool(pending) and pending[-1].ops[-1] == UPDATE_BEFORE


def _cut(block: RowBlock, budget: int) -> int | None:
    """How many images of ``block`` a read with ``budget`` row images left takes before it stops (None: all,
    and it goes on): at least the budget, never ending between the two images of an update."""
    for k in range(max(budget, 1), len(block) + 1):
        if block.ops[k - 1] != UPDATE_BEFORE:
            return k
    return None


def _rebased(block: RowBlock, base: int) -> RowBlock:
    return dataclasses.replace(block, key_base=(base + block.key_base[0], block.key_base[1]))
