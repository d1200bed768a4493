"""The captured tables of a binlog read: their schema at each event (TABLE_MAP), and what DDL does to them.

A stream that replays old binlog, or runs behind a table's DDL, decodes each rows event with the columns its
TABLE_MAP names (``table_map``), not with today's schema. DDL on a captured table is followed (a column
change becomes a ``SchemaChange``) or stops the read (``ResnapshotRequired``: TRUNCATE, RENAME, partition DDL
that no plan made after it covers); statement-based changes of a captured table stop it too.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pymysqlreplication.row_event import TableMapEvent

from airflow_provider_mysqlcdc.engine.binlog.ddl import (
    DDL_VERBS,
    DML_VERBS,
    TableDdl,
    TableRef,
    statement_tables,
    table_ddl,
)
from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import layout_for
from airflow_provider_mysqlcdc.engine.binlog.errors import (
    ResnapshotRequired,
    SchemaChangeError,
    UnsupportedEvent,
    dummy_event,
)
from airflow_provider_mysqlcdc.engine.binlog.table_map import (
    decode_member_names,
    schema_from_table_map,
    table_map_signature,
)
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.charsets import CharsetDecoder
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.model.values import binlog_normalizer

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.binlog.transaction import Transaction

Decoders = Callable[[str], CharsetDecoder]  # charset name -> its decoder (source.charset_tables)


@dataclass
class CapturedVersion:
    """One schema version of a captured table, with the function that normalizes its binlog row images, and
    the compiled decoder's layout of its TABLE_MAP (None: mysql-replication decodes its events)."""

    table: TableId
    schema: TableSchema
    normalize: Callable[..., dict]
    column_names: list[str]
    layout: Any = None  # rows_decoder.EventLayout
    # the layout decodes exactly these columns: a framed rows event of its column count goes straight to it
    layout_matches: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.layout_matches = self.layout is not None and list(self.layout.column_names) == self.column_names

    @classmethod
    def of(cls, schema: TableSchema, decoders: Decoders | None = None) -> CapturedVersion:
        return cls(schema.table, schema, binlog_normalizer(schema, decoders), schema.column_names)


class CapturedTables:
    """The tables a reader captures, their schema versions seen in TABLE_MAPs, and DDL not yet emitted."""

    def __init__(self, tables: set[TableId] | None, schemas: dict[TableId, TableSchema],
                 replanned: dict[TableId, BinlogPosition] | None = None,
                 decoders: Decoders | None = None) -> None:
        captured = set(schemas) if tables is None else set(tables)
        missing = sorted(str(t) for t in captured if t not in schemas)
        if missing:
            raise ConfigurationError(f"no schema given for captured table(s) {missing}")
        self.decoders = decoders
        self.latest = {t: CapturedVersion.of(schemas[t], decoders) for t in captured}
        self.versions: dict[tuple[TableId, tuple], CapturedVersion] = {}
        self.replanned = dict(replanned or {})
        self.pending_ddl: list[tuple[TableId, TableDdl]] = []
        self._by_folded_name = {(t.database.lower(), t.table.lower()): t for t in captured}

    def table_map(self, event: TableMapEvent, cur_file: str, event_start: int) -> CapturedVersion | None:
        """The captured table's schema as this TABLE_MAP gives it: the one in force at its rows events."""
        table = TableId(event.schema, event.table)
        known = self.latest.get(table)
        if known is None:
            return None
        decode_member_names(event, table, known.schema, self.decoders)
        signature = table_map_signature(event)
        version = self.versions.get((table, signature))
        if version is not None:
            return version
        names = [c.name for c in event.columns]
        if names == known.column_names and all(n for n in names):
            derived = schema_from_table_map(event, table, known.schema)
            # schema_id names the Arrow layout; a column's charset (how its bytes decode) is not part of it
            same = derived.columns == known.schema.columns
            version = known if same else CapturedVersion.of(derived, self.decoders)
        elif any(not n or str(n).startswith("UNKNOWN_COL") for n in names):
            raise SchemaChangeError(
                f"the binlog at {cur_file}:{event_start} has no column names for captured table {table}: set "
                "binlog_row_metadata=FULL on the server (mysqlcdc check says how), then re-snapshot the table"
            )
        else:
            version = CapturedVersion.of(schema_from_table_map(event, table, known.schema), self.decoders)
        version = dataclasses.replace(version, layout=layout_for(event, version.schema, self.decoders))
        self.versions[(table, signature)] = version
        return version

    def query(self, query: str, schema: str | bytes | None, end_pos: int, txn: Transaction | None,
              cur_file: str, event_start: int) -> str:
        """Classify a query event (its statement, default database and end position): "begin", "commit",
        "end" (the group ends, nothing to emit), "continue"."""
        sql = query.strip()
        if sql.startswith("# Dummy event"):
            raise dummy_event(f"{cur_file}:{event_start}")
        head = sql[:16].upper()
        if head.startswith(("BEGIN", "XA START")):
            return "begin"
        if head.startswith("COMMIT"):
            return "commit"
        if head.startswith(("SAVEPOINT", "XA END")):
            return "continue"
        if head.startswith("ROLLBACK"):
            to_savepoint = head.split()[1:2] == ["TO"]
            if txn is not None and txn.captured:
                raise UnsupportedEvent(
                    f"{sql[:40]!r} at {cur_file}:{event_start} in the transaction at {txn.start}, which "
                    "changes a captured table: such groups are written only when non-transactional tables "
                    "are involved, and which rows took effect depends on each table's engine; re-snapshot "
                    "the captured tables"
                )
            return "continue" if to_savepoint else "end"
        if head.startswith(("XA COMMIT", "XA ROLLBACK")):
            return "end"
        verb, refs = statement_tables(sql)
        where = txn.start if txn is not None else f"{cur_file}:{event_start}"
        default_db = schema
        if isinstance(default_db, bytes):
            default_db = default_db.decode("utf-8", "replace")
        hits = self._refs(refs, default_db)
        if hits and verb in DDL_VERBS:
            end = BinlogPosition(cur_file, end_pos)
            for table in sorted(hits):
                ddl = table_ddl(sql, self.latest[table].schema.primary_key)
                planned = self.replanned.get(table)
                if ddl.resnapshot and (planned is None or planned.key < end.key):
                    raise ResnapshotRequired(
                        f"{verb} on captured table {table} at {where} (ending at {end}): {ddl.resnapshot}; "
                        f"{ddl.statement[:300]!r}. The changelog cannot follow this change: the table must "
                        "be snapshotted again. The stream does that by itself unless resnapshot is turned "
                        f"off; otherwise plan and snapshot {table} again (mysqlcdc plan --tables {table}, "
                        "then mysqlcdc snapshot; or rerun the DAG's plan and snapshot tasks for it) and "
                        f"restart the stream: it continues past this statement once the new plan exists "
                        f"[resnapshot table={table} position={end}]",
                        table, end, ddl.resnapshot, ddl.statement,
                    )
                self.pending_ddl.append((table, ddl))
        if hits and verb in DML_VERBS:
            raise UnsupportedEvent(
                f"statement-based change of captured table(s) {', '.join(sorted(map(str, hits)))} at "
                f"{where}: {sql[:300]!r}; mysqlcdc needs binlog_format=ROW for every session. "
                "Re-snapshot the table(s)"
            )
        return "continue" if txn is not None and txn.began else "end"

    def _refs(self, refs: list[TableRef], default_db: str | None) -> set[TableId]:
        hits: set[TableId] = set()
        for db, table in refs:
            db = db if db is not None else default_db
            if db is None:
                continue
            if table is None:  # a whole database
                hits.update(t for (d, _), t in self._by_folded_name.items() if d == db.lower())
            elif (found := self._by_folded_name.get((db.lower(), table.lower()))) is not None:
                hits.add(found)
        return hits
