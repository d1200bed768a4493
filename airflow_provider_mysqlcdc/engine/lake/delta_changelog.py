"""A table's changelog as an append-only Delta Lake table, so any engine reads it without our code.

The Delta table is the changelog directory itself (``<root>/<database>/<table>/changelog``): its
``_delta_log/`` names the Parquet files the stream's executors already wrote, so a batch costs one small
commit, never a second copy of its data. One commit per micro-batch and table, made by the driver after the
batch's markers, carries the Delta *application transaction* ``(APP_ID, batch id)``: a replayed batch finds
its id already in the log and commits nothing (``commit`` returns False), so the log never holds a batch
twice, whatever our markers say. Readers that know nothing of markers (Spark with Delta, delta-rs, pandas,
Polars, DuckDB) see whole batches only, and files of killed attempts never.

Each commit's ``commitInfo`` records the batch id and the binlog offset the batch ended at
(``mysqlcdc.batchId``, ``mysqlcdc.endOffset``), so a Delta version can be matched to a stream position.

Types: Delta has no TIME type; a TIME column is a ``long`` of signed microseconds in the files and the Delta
schema (``file_types``). Every column is nullable in the Delta
schema: files written before an ADD COLUMN lack it. A column added by DDL is added to the Delta schema
(``ALTER TABLE ADD COLUMNS``, no rewrite); a renamed column appears under both names, each where it held, as
in the files. A column whose type changed to a different Arrow type cannot be appended: the commit fails,
naming the column (Delta's type widening is not written by delta-rs yet).

Delta tables written before this module existed are created on the first commit with every earlier committed
batch (from the markers), so an existing output root becomes readable as Delta without a re-snapshot.
"""

from __future__ import annotations

import json
import logging
import posixpath
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
from airflow_provider_mysqlcdc.engine.lake.delta_log import DeltaLog
from airflow_provider_mysqlcdc.engine.lake.delta_log_writer import add_entry
from airflow_provider_mysqlcdc.engine.lake.file_types import delta_schema, same_type
from airflow_provider_mysqlcdc.engine.lake.layout import CHANGELOG, changelog_dir, table_dir
from airflow_provider_mysqlcdc.engine.model.tables import TableId

log = logging.getLogger(__name__)

APP_ID = "mysqlcdc-changelog"  # the Delta application id whose transaction version is the last batch id
BATCH_ID, END_OFFSET = "mysqlcdc.batchId", "mysqlcdc.endOffset"  # keys of each commit's commitInfo


def changelog_table_uri(root: str, table: TableId) -> str:
    """Where the table's changelog Delta table lives: the changelog directory (a path or URI)."""
    return posixpath.join(table_dir(root, table), CHANGELOG)


def batch_files(root: str, table: TableId, batch_id: int, names: list[str]) -> list[str]:
    """A batch's files (base names, as the executors reported them) as paths relative to the Delta table."""
    prefix = posixpath.basename(changelog_dir(root, table, batch_id))
    return [f"{prefix}/{name}" for name in names]


def committed_batches(root: str, table: TableId, before: int) -> list[tuple[int, list[str]]]:
    """Batches before ``before`` that the markers name, with their files relative to the Delta table: what a
    Delta table created now must hold (an output root written before the changelog was a Delta table)."""
    base = changelog_table_uri(root, table).rstrip("/") + "/"
    out = []
    for batch_id in committed_batch_ids(root, table):
        if batch_id < before:
            files = read_batch(root, table, batch_id).files
            out.append((batch_id, [f.removeprefix(base) for f in files]))
    return out


class DeltaChangelog:
    """The Delta table of one table's changelog: which batch it last holds, and appending a batch to it (the
    ``table_format.ChangelogTable`` of Delta)."""

    def __init__(self, root: str, table: TableId, storage_options: dict[str, str] | None = None) -> None:
        self.root, self.table = root, table
        self.log = DeltaLog(changelog_table_uri(root, table), table, "changelog", storage_options)

    def last_batch(self) -> int | None:
        """The id of the last batch committed to the Delta table (None: no Delta table or no batch yet)."""
        table = self.log.load()
        return None if table is None else table.transaction_version(APP_ID)

    def holds(self, batch_id: int) -> bool:
        last = self.last_batch()
        return last is not None and last >= batch_id

    def files(self) -> set[str]:
        """The files the Delta table's current version adds, relative to it (empty: no Delta table yet)."""
        return set(self.log.files()) if self.log.load() is not None else set()

    def adopt(self, before: int) -> bool:
        """Create the Delta table from the batches before ``before`` the markers name, when there is none yet
        (an output root written before the changelog was a Delta table, read by a new stream): so a table
        with no new change is readable as Delta all the same. False when there is nothing to do."""
        if self.log.load() is not None:
            return False
        earlier = committed_batches(self.root, self.table, before)
        if not earlier:
            return False
        last, _ = earlier[-1]
        return self.commit(last, [])

    def commit_batch(self, batch_id: int, names: list[str], end_offset: dict | None = None) -> bool:
        """``table_format.ChangelogTable.commit_batch``: the batch's files by base name."""
        return self.commit(batch_id, batch_files(self.root, self.table, batch_id, names), end_offset)

    def commit(self, batch_id: int, files: list[str], end_offset: dict | None = None) -> bool:
        """Append a batch's files (relative paths) in one Delta transaction, unless the log already holds this
        batch id. A Delta table created now also takes the earlier batches the markers name. Returns whether a
        commit was made. On a local file system the engine writes the commit itself, knowing the next version
        from its own last one (``DeltaLog.append``): no log listing per batch."""
        metadata = {BATCH_ID: str(batch_id), END_OFFSET: json.dumps(end_offset, sort_keys=True)}
        for _ in range(3):  # another writer between our look and our commit: look again
            head = self.log.head(APP_ID) if self.log.writes_itself else None
            table = None if head is not None else self.log.load(write=True)
            if head is not None:
                last = head.apps[APP_ID]
            elif table is not None:
                last = table.transaction_version(APP_ID)
            else:
                return self._create(batch_id, files, metadata)
            if last is not None and last >= batch_id:  # batch 0 is a batch too: never ``last or -1``
                return False
            if not files:
                return False
            footers = {f: self.log.footer(f) for f in files}
            known = head.schema if head is not None else self.log.schema()
            schema = self._union_schema(known, [m.schema.to_arrow_schema() for m in footers.values()])
            if head is None or len(schema) != len(known):
                self._delta_rs_commit(batch_id, footers, schema, metadata, table)
                return True
            entries = [add_entry(f, *self.log.file_info(f), m.num_rows) for f, m in footers.items()]
            if self.log.append(entries, metadata, (APP_ID, batch_id)):
                return True
        raise CdcError(f"the changelog Delta table {self.log.uri} of {self.table} kept changing under its "
                       "commit: one stream per output root and table")

    def _create(self, batch_id: int, files: list[str], metadata: dict[str, str]) -> bool:
        """The Delta table's first commit: this batch's files and every earlier batch the markers name."""
        from deltalake import CommitProperties, Transaction

        earlier = committed_batches(self.root, self.table, batch_id + (0 if files else 1))
        files = [f for _, older in earlier for f in older] + files
        if not files:
            return False
        footers = {f: self.log.footer(f) for f in files}
        schema = self._union_schema(pa.schema([]), [m.schema.to_arrow_schema() for m in footers.values()])
        actions = [self.log.add_action(f, m.num_rows) for f, m in footers.items()]
        self.log.create(schema, actions, CommitProperties(app_transactions=[Transaction(APP_ID, batch_id)],
                                                          custom_metadata=metadata))
        return True

    def _delta_rs_commit(self, batch_id: int, footers: dict[str, Any], schema: pa.Schema,
                         metadata: dict[str, str], table: Any) -> None:
        """A commit through delta-rs: on an object store, and when the files add columns (the ``ALTER TABLE
        ADD COLUMNS`` goes first). ``table``: as just loaded (None: load it)."""
        from deltalake import CommitProperties, Schema, Transaction

        table = table if table is not None else self.log.load(write=True)
        self._add_columns(table, schema)
        actions = [self.log.add_action(f, m.num_rows) for f, m in footers.items()]
        properties = CommitProperties(app_transactions=[Transaction(APP_ID, batch_id)],
                                      custom_metadata=metadata)
        table.create_write_transaction(actions, "append", Schema.from_arrow(schema),
                                       commit_properties=properties)
        self.log.forget()  # delta-rs leaves the loaded table at the version before its commit

    def _union_schema(self, have: pa.Schema, file_schemas: list[pa.Schema]) -> pa.Schema:
        """The Delta table's schema (``have``) plus the columns the new files add; a changed type fails,
        naming it."""
        fields: dict[str, pa.Field] = {f.name: f for f in have}
        for file_schema in file_schemas:
            for f in delta_schema(file_schema):
                known = fields.get(f.name)
                if known is None:
                    fields[f.name] = f
                elif not same_type(known.type, f.type):
                    raise CdcError(
                        f"column {f.name!r} of {self.table} changed type from {known.type} to {f.type}, "
                        f"which the Delta changelog {self.log.uri} cannot append; re-snapshot the table into "
                        "a new output root, or move its changelog/_delta_log aside and restart the stream "
                        "(it is rebuilt from the batch markers)"
                    )
        return pa.schema(list(fields.values()))

    def _add_columns(self, table: Any, schema: pa.Schema) -> None:
        from deltalake import Schema

        known = set(self.log.schema().names)
        added = [f for f in schema if f.name not in known]
        if added:
            table.alter.add_columns(list(Schema.from_arrow(pa.schema(added)).fields))
            log.info("changelog Delta table of %s: added column(s) %s", self.table,
                     ", ".join(f.name for f in added))
