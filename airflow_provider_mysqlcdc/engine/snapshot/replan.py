"""Plan a table again after DDL that changed its rows without row events (TRUNCATE, RENAME, partition DDL).

The new plan keeps what the user chose for the table's current one: its chunk size, its chunk key where it is
not the primary key (a table without one cannot be planned otherwise), and its zero-date layout (the files
the stream keeps writing). A table the stream captures without a plan gets the defaults.
"""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan, plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect


def replan_table(settings: MySQLSettings, store: ChunkStore, table: TableId,
                 run_id: str | None = None) -> ChunkPlan:
    """A new plan generation of ``table`` with its current plan's settings (raises ConfigurationError when
    the table cannot be planned, e.g. it was dropped)."""
    options: dict = {}
    if str(table) in set(store.tables()):
        current = load_plan(store, table)
        options = {"chunk_size": current.chunk_size, "zero_dates": current.zero_dates}
        with connect(settings) as conn:
            primary_key = load_schema(conn, table).primary_key
        if tuple(current.key_columns) != tuple(primary_key) and len(current.key_columns) == 1:
            options["chunk_keys"] = {str(table): current.key_columns[0]}
    plans = [p for p in plan_tables(settings, store, [str(table)], run_id=run_id, **options)
             if p.table == table]
    if not plans:
        raise ConfigurationError(f"table {table} is not in the source any more (or not visible to this user)")
    return plans[0]
