"""The views the stream filter and the mirror read: per table, the chunks, their HWs and committed results."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from airflow_provider_mysqlcdc.engine.chunk_store.database import StoreDatabase
from airflow_provider_mysqlcdc.engine.chunk_store.records import (
    ChunkState,
    MirrorChunk,
    MirrorView,
    TableView,
    chunk_state_of,
    table_name_of,
    table_view_of,
)
from airflow_provider_mysqlcdc.engine.chunk_store.schema import (
    chunks_table,
    committed_generations,
    tables_table,
)


class StoreViews(StoreDatabase):
    """Read-only views over many chunks, in one transaction each."""

    # --- views for the stream filter and the mirror ---------------------------------------------------------

    def stream_view(self, tables: Iterable[Any] | None = None) -> dict[str, TableView]:
        """Per table (None: every table in the store), the chunks and HWs the stream filter must respect."""
        requested = None if tables is None else list(dict.fromkeys(table_name_of(t) for t in tables))

        def read(conn: Connection) -> tuple[list[str], dict[str, int], dict[str, int],
                                            list[RowMapping]]:
            if requested is None:
                names = list(conn.execute(sa.select(tables_table.c.table_name)).scalars())
            else:
                names = requested
            latest: dict[str, int] = {}
            committed: dict[str, int] = {}
            rows: list[RowMapping] = []
            for batch in in_batches(names, 200):
                latest.update(conn.execute(
                    sa.select(tables_table.c.table_name, tables_table.c.latest_generation)
                    .where(tables_table.c.table_name.in_(batch))
                ).all())
                committed.update(committed_generations(conn, batch))
                wanted = [(t, {g for g in (latest.get(t), committed.get(t)) if g is not None}) for t in batch]
                conditions = [sa.and_(chunks_table.c.table_name == t, chunks_table.c.generation.in_(gens))
                              for t, gens in wanted if gens]
                if conditions:
                    rows.extend(conn.execute(sa.select(chunks_table).where(sa.or_(*conditions))
                                             .order_by(chunks_table.c.chunk_id)).mappings().all())
            return names, latest, committed, rows

        names, latest, committed, rows = self._read_tx(read)
        by_table: dict[str, dict[int, list[ChunkState]]] = {}
        for row in rows:
            state = chunk_state_of(row)
            by_table.setdefault(state.table, {}).setdefault(state.generation, []).append(state)
        return {name: table_view_of(name, latest.get(name), committed.get(name), by_table.get(name, {}))
                for name in names}

    def snapshot_marks(self, tables: Iterable[Any]) -> dict[str, tuple[int, int, str]]:
        """Per table with a fully committed generation: ``(generation, chunks, latest commit)`` of it, values
        that change whenever its snapshot does (a new generation, a chunk rerun committing). A few queries
        for any number of tables: the stream asks after every batch which mirrors need its snapshot."""
        names = list(dict.fromkeys(table_name_of(t) for t in tables))
        c = chunks_table.c

        def read(conn: Connection) -> dict[str, tuple[int, int, str]]:
            marks: dict[str, tuple[int, int, str]] = {}
            for batch in in_batches(names, 200):
                committed = committed_generations(conn, batch)
                for table, generation, count, latest in conn.execute(
                    sa.select(c.table_name, c.generation, sa.func.count(), sa.func.max(c.committed_at))
                    .where(c.table_name.in_(batch)).group_by(c.table_name, c.generation)
                ):
                    if committed.get(table) == generation:
                        marks[table] = (int(generation), int(count), str(latest))
            return marks

        return self._read_tx(read)

    def mirror_view(self, table: Any) -> MirrorView | None:
        """The latest fully committed generation's chunks with their committed HW and output version (None if
        no generation is fully committed). Reruns in progress do not change it until they commit."""
        return self.mirror_views([table])[table_name_of(table)]

    def mirror_views(self, tables: Iterable[Any]) -> dict[str, MirrorView | None]:
        """``mirror_view`` of many tables in one read transaction (a few queries per 200 tables): what the
        stream's mirror hook reads once per batch for every table it looks at."""
        names = list(dict.fromkeys(table_name_of(t) for t in tables))
        c = chunks_table.c

        def read(conn: Connection) -> dict[str, tuple[int, list[RowMapping]]]:
            found: dict[str, tuple[int, list[RowMapping]]] = {}
            for batch in in_batches(names, 200):
                committed = committed_generations(conn, batch)
                for name, generation in committed.items():
                    found[name] = (generation, [])
                if not committed:
                    continue
                wanted = sa.or_(*(sa.and_(c.table_name == name, c.generation == generation)
                                  for name, generation in committed.items()))
                for row in conn.execute(sa.select(chunks_table).where(wanted)
                                        .order_by(c.table_name, c.chunk_id)).mappings():
                    found[row["table_name"]][1].append(row)
            return found

        found = self._read_tx(read)
        return {name: _mirror_view(name, *found[name]) if name in found else None for name in names}


def _mirror_view(name: str, generation: int, rows: Sequence[RowMapping]) -> MirrorView:
    states = [chunk_state_of(r) for r in rows]
    return MirrorView(name, generation, tuple(
        MirrorChunk(s.chunk_id, s.start_key, s.end_key, int(s.rows or 0), s.lw, s.hw,  # type: ignore
                    s.output_version, s.committed_at)
        for s in states
    ))


def in_batches(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i:i + size])
