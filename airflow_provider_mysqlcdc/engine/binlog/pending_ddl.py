"""DDL the binlog holds after a point, per captured table, read from event headers (``SHOW BINLOG EVENTS``:
the server decodes no rows for it).

A stream that starts again after DDL it has not read yet (a column renamed or dropped after its last batch)
checks its configuration against today's schema *and* the DDL between where it resumes and now: the column
changes the stream will follow once it reads them. Only column changes matter here; DDL that needs a new
snapshot is the stream's business when it reaches it.
"""
from __future__ import annotations

import re
from collections.abc import Collection

import pymysql

from airflow_provider_mysqlcdc.engine.binlog.ddl import DDL_VERBS, ColumnChanges, statement_tables, table_ddl
from airflow_provider_mysqlcdc.engine.binlog.events_pager import binary_logs, iter_events
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

# SHOW BINLOG EVENTS shows a query event's default database as a ``use `db`; `` prefix
_USE = re.compile(r"^\s*use\s+`((?:[^`]|``)*)`\s*;\s*", re.IGNORECASE)


def column_changes_since(
    conn: pymysql.connections.Connection, start: BinlogPosition, tables: Collection[TableId]
) -> dict[TableId, list[ColumnChanges]] | None:
    """The column changes of DDL on ``tables`` from ``start`` (an event start) to the binlog's end, per table
    in binlog order; None when the binlog no longer holds ``start`` (purged, or another server's file)."""
    names = [name for name, _ in binary_logs(conn)]
    if start.file not in names:
        return None
    by_name = {(t.database.lower(), t.table.lower()): t for t in tables}
    out: dict[TableId, list[ColumnChanges]] = {}
    for event in iter_events(conn, names, start.file, start.pos):
        if str(event.event_type).lower() != "query":
            continue
        info = event.info
        info = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info or "")
        use = _USE.match(info)
        default_db = use.group(1).replace("``", "`") if use else None
        sql = info[use.end():] if use else info
        verb, refs = statement_tables(sql)
        if verb not in DDL_VERBS:
            continue
        hits = {by_name[(db.lower(), name.lower())] for db, name in
                ((db if db is not None else default_db, name) for db, name in refs)
                if db is not None and name is not None and (db.lower(), name.lower()) in by_name}
        for table in sorted(hits):
            changes = table_ddl(sql).changes
            if changes.renamed or changes.added or changes.dropped or changes.modified:
                out.setdefault(table, []).append(changes)
    return out
