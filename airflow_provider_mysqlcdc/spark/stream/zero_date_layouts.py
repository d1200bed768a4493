"""How the changelog sink writes each table's zero dates: as its plan says (``ChunkPlan.zero_dates``), so the
stream's files have the layout of the table's snapshot files.

The driver refreshes the layouts before each batch; the batch's tables are fixed later, when the source's
executors read the chunk store (``binlog_source.captured_tables``). A table planned in between reaches a
writer unknown: the writer then reads its plan itself, as those executors do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema

Layout = tuple[str, tuple[str, ...]]  # a plan's zero_dates mode and key columns


@dataclass
class ZeroDateLayouts:
    chunk_store: str
    known: dict[str, Layout] = field(default_factory=dict)  # planned tables
    unplanned: set[str] = field(default_factory=set)  # streamed without a plan at the last refresh: "keep"

    def refresh(self, streamed: Iterable[str]) -> ZeroDateLayouts:
        """Before a batch: every planned table's layout (reading only new plans); of the ``streamed`` tables,
        those without a plan keep every companion."""
        self._load(None)
        self.unplanned = set(streamed) - set(self.known)
        return self

    def unwritten(self, schema: TableSchema) -> tuple[str, ...]:
        """The zero-date companions the changelog of ``schema``'s table leaves out."""
        name = str(schema.table)
        if name not in self.known and name not in self.unplanned:
            self._load({name})
        layout = self.known.get(name)
        return values.unwritten_companions(schema, *layout) if layout else ()

    def _load(self, names: set[str] | None) -> None:
        # imported here: executors unpickle this class with every changelog writer, and rarely load a plan
        from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
        from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan

        with ChunkStore(self.chunk_store) as store:
            planned = set(store.tables())
            for name in sorted(planned - set(self.known) if names is None else names & planned):
                plan = load_plan(store, TableId.parse(name))
                self.known[name] = (plan.zero_dates, tuple(plan.key_columns))
        if names is not None:
            self.unplanned |= names - planned
