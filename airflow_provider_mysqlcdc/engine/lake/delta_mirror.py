"""A table's mirror as a Delta Lake table, so any engine reads the current state without our manifest.

The Delta table is the mirror directory (``<root>/<database>/<table>/mirror``). After each refresh switches
``mirror/_manifest.json``, ``DeltaMirror.sync`` makes the Delta table hold exactly the manifest's files in one
commit: the chunk versions the refresh wrote are added and the ones they replace removed (a refresh applies a
batch's changes, or a chunk rerun's new snapshot, by rewriting the chunks they touch), so the Delta version
after a batch is the mirror as of that batch. The sync compares with the Delta table's own file list, not with
the previous manifest, so a refresh killed between its manifest and its Delta commit is made good by the next.

Schema changes (the DDL the stream follows, ``mirror_refresh._rewrite_reason`` decides):

- Columns added with NULL for existing rows (``ADD COLUMN`` without a default, or ``DEFAULT NULL``): Delta's
  own schema evolution, ``ALTER TABLE ADD COLUMNS`` (``table.alter.add_columns``), no file rewritten. Files
  written before lack the column and every Delta reader reads NULL there, which is the value the source gives
  those rows. When the same refresh also rewrote chunks, their files follow in a second commit, which alone
  carries the stream position (``mysqlcdc.schemaChange`` marks the first: it holds the previous rows).
- Anything else that changes the columns (a default existing rows hold, a rename, a drop, a new Arrow type)
  makes the refresh rewrite every chunk, and the commit replaces the whole table, schema and files in one.
  Delta renames and drops columns without a rewrite only with column mapping, which delta-rs 1.6.6 neither
  enables (``SET TBLPROPERTIES delta.columnMapping.mode`` is refused) nor reads with the readers we document:
  ``to_pyarrow_table``/``to_pandas``/``to_pyarrow_dataset`` (so DuckDB over it) refuse the ``columnMapping``
  reader feature, Polars refuses column mapping at any protocol version, and delta-rs reads a reader-version-2
  column-mapped table as all NULL. Delta's type widening is not written by delta-rs either.

Deletion vectors (``mirror_updates=deletion_vectors``, ``mirror_dv_refresh``): a file whose deleted rows
changed is removed with its old vector and added with its new one, in a commit the engine writes itself
(``delta_dv_commit``: delta-rs cannot add a file with a vector), which also upgrades the protocol to the
``deletionVectors`` feature the first time.

A batch's usual commit (chunk files added and removed, the columns unchanged, no vectors) is written by the
engine too on a local file system, from the version it committed last (``DeltaLog.append``): delta-rs would
list the whole log twice for it. Column changes, a new table and object stores go through delta-rs.

Each commit's ``commitInfo`` records where the mirror stands:
``mysqlcdc.throughBatch``, ``mysqlcdc.streamPosition`` and, once the mirror is consistent,
``mysqlcdc.asOf`` (the binlog position the whole table is exact at): a Delta version is a binlog position.
"""

from __future__ import annotations

import logging
import posixpath
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import DeletionVector
from airflow_provider_mysqlcdc.engine.lake.delta_dv_commit import (
    FEATURE,
    add_action,
    commit,
    current_vectors,
    protocol_upgrade,
    remove_action,
)
from airflow_provider_mysqlcdc.engine.lake.delta_log import CHECKPOINT_INTERVAL, DeltaLog
from airflow_provider_mysqlcdc.engine.lake.delta_log_writer import add_entry, remove_entry
from airflow_provider_mysqlcdc.engine.lake.file_types import delta_schema, same_type
from airflow_provider_mysqlcdc.engine.lake.layout import MIRROR, table_dir
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import MirrorManifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId

log = logging.getLogger(__name__)

THROUGH_BATCH, STREAM_POSITION, AS_OF = "mysqlcdc.throughBatch", "mysqlcdc.streamPosition", "mysqlcdc.asOf"
SCHEMA_CHANGE = "mysqlcdc.schemaChange"  # an ADD COLUMN commit that precedes the files of its refresh


def mirror_table_uri(root: str, table: TableId) -> str:
    """Where the table's mirror Delta table lives: the mirror directory (a path or URI)."""
    return posixpath.join(table_dir(root, table), MIRROR)


class DeltaMirror:
    """The Delta table of one table's mirror, kept equal to the mirror manifest."""

    def __init__(self, root: str, table: TableId, storage_options: dict[str, str] | None = None) -> None:
        self.table = table
        self.log = DeltaLog(mirror_table_uri(root, table), table, "mirror", storage_options)
        self._info: dict[str, tuple[int, int, int]] = {}  # size, modification time (ms) and rows of a file
        # the vectors of the version this object committed last (the refresher is the table's one writer,
        # under its lock): the next sync skips reading them back from the log when no one committed since
        self._committed: tuple[int, dict[str, DeletionVector]] | None = None
        self._files: tuple[int, dict[str, int]] | None = None  # a version's files and sizes, as last known

    def sync(self, manifest: MirrorManifest, data_schema: pa.Schema | None = None) -> bool:
        """Make the table hold exactly ``manifest``'s files in ``data_schema``'s columns (the mirror's, in
        engine types; None: the new files'): one commit, two when columns were added to kept files (the
        ``ADD COLUMN`` first, then the files). False when it already does."""
        from deltalake import CommitProperties, Schema

        prefix = MIRROR + "/"
        wanted = [f.removeprefix(prefix) for f in manifest.files]
        vectors = {f.removeprefix(prefix): v for f, v in manifest.deletion_vectors.items()}
        appended = None if vectors else self._append(manifest, data_schema, wanted)
        if appended is not None:
            return appended
        table = self.log.load(write=True)
        current = self.log.files() if table is not None else {}
        if table is not None and (vectors or _has_vectors(table)):
            have_vectors = self._vectors_of(table) if _has_vectors(table) else {}
            added_now = (_added_columns(self.log.schema(), delta_schema(data_schema))
                         if data_schema is not None else [])
            replace = not set(current) & set(wanted) and (added_now is None or bool(added_now))
            if not replace:  # else: a rewrite of every file in other columns, by delta-rs below
                return self._sync_vectors(manifest, data_schema, wanted, vectors, current, have_vectors)
        footers = {f: self.log.footer(f) for f in wanted if f not in current}
        if data_schema is not None:
            schema = delta_schema(data_schema)
        elif footers:
            schema = delta_schema(next(iter(footers.values())).schema.to_arrow_schema())
        else:
            schema = None
        properties = CommitProperties(custom_metadata=_position_metadata(manifest))
        adds = [self.log.add_action(f, m.num_rows) for f, m in footers.items()]
        if table is None:
            if not footers:  # an empty mirror: no file to take the columns from
                return False
            self.log.create(schema, adds, properties)
            return True
        have = self.log.schema()
        same_files = set(current) == set(wanted)
        kept = [f for f in wanted if f in current]
        added = _added_columns(have, schema) if schema is not None else []
        if added is None and kept:
            # not a rewrite (a rewrite gives every chunk new files), so no column was renamed, dropped or
            # retyped: the types only read differently (delta-rs reports some in other forms); add the new
            added = [f for f in schema if f.name not in set(have.names)] if schema is not None else []
        if same_files and not added:
            return False
        if added is None or (added and not kept):
            # every file new and other columns (a rewrite: a column renamed, dropped or of a new type, or
            # added with a default existing rows hold): the table is replaced, schema and files in one commit
            adds = [self.log.add_action(f, self.log.footer(f).num_rows) for f in wanted]
            table.create_write_transaction(adds, "overwrite", Schema.from_arrow(schema),
                                           commit_properties=properties)
            self.log.forget()  # delta-rs leaves the loaded table at the version before its commit
            log.info("mirror Delta table of %s: columns changed, table replaced", self.table)
            return True
        if added:
            # columns added with NULL for existing rows: kept files lack them and read NULL there, the true
            # value; no file is rewritten. When files change too, they follow in a second commit, which alone
            # carries the stream position (the ADD COLUMN version holds the previous version's rows)
            names = ", ".join(f.name for f in added)
            table.alter.add_columns(
                list(Schema.from_arrow(pa.schema(added)).fields),
                commit_properties=properties if same_files else CommitProperties(
                    custom_metadata={SCHEMA_CHANGE: f"added {names}"}),
            )
            log.info("mirror Delta table of %s: added column(s) %s, no file rewritten", self.table, names)
            if same_files:
                self.log.forget()
                return True
            table = self.log.load()
        removes = [self.log.remove_action(f, size) for f, size in current.items() if f not in set(wanted)]
        table.create_write_transaction([*adds, *removes], "append", Schema.from_arrow(self.log.schema()),
                                       commit_properties=properties)
        self.log.forget()  # delta-rs leaves the loaded table at the version before its commit
        return True

    def _append(self, manifest: MirrorManifest, data_schema: pa.Schema | None,
                wanted: list[str]) -> bool | None:
        """The common sync, a batch's rewritten chunks (files added and removed, the columns unchanged, no
        deletion vectors), committed by the engine from the version it knows (``DeltaLog.append``): no log
        listing. None when it does not apply (an object store, no table yet, deletion vectors, a column
        change, another writer meanwhile): ``sync`` goes on through delta-rs."""
        if data_schema is None or not self.log.writes_itself:
            return None
        head = self.log.head()
        if head is None or FEATURE in head.reader_features:
            return None
        if _added_columns(head.schema, delta_schema(data_schema)) != []:
            return None
        if self._files is None or self._files[0] != head.version:
            files = self.log.files()
            head = self.log.head()  # the same version: ``files`` brought the table up to date if needed
            if head is None:
                return None
            self._files = (head.version, files)
        current = self._files[1]
        keep = set(wanted)
        removes = [remove_entry(f, size) for f, size in current.items() if f not in keep]
        new = [f for f in wanted if f not in current]
        if not new and not removes:
            return False
        adds = [add_entry(f, *self._file_info(f)) for f in new]
        if len(self._info) > 2 * len(keep):  # files the table no longer holds
            self._info = {f: i for f, i in self._info.items() if f in keep}
        if not self.log.append([*adds, *removes], _position_metadata(manifest)):
            self._files = None
            return None
        self._files = (head.version + 1, {**{f: s for f, s in current.items() if f in keep},
                                          **{f: a["add"]["size"] for f, a in zip(new, adds)}})
        return True

    def _sync_vectors(self, manifest: MirrorManifest, data_schema: pa.Schema | None, wanted: list[str],
                      vectors: dict[str, DeletionVector], current: dict[str, int],
                      have_vectors: dict[str, DeletionVector]) -> bool:
        """The commit of a mirror with deletion vectors: columns added first (delta-rs, as above), then the
        files and vectors in one commit the engine writes."""
        from deltalake import CommitProperties, Schema

        table = self.log.loaded()
        if data_schema is not None:
            added = _added_columns(self.log.schema(), delta_schema(data_schema))
            if added is None:
                added = [f for f in delta_schema(data_schema) if f.name not in set(self.log.schema().names)]
            if added:
                names = ", ".join(f.name for f in added)
                table.alter.add_columns(list(Schema.from_arrow(pa.schema(added)).fields),
                                        commit_properties=CommitProperties(
                                            custom_metadata={SCHEMA_CHANGE: f"added {names}"}))
                log.info("mirror Delta table of %s: added column(s) %s, no file rewritten", self.table, names)
                table = self.log.load()
        actions: list[dict[str, Any]] = []
        keep = set(wanted)
        for f, size in current.items():
            if f not in keep or have_vectors.get(f) != vectors.get(f):
                actions.append(remove_action(f, size, have_vectors.get(f)))
        for f in wanted:
            if f in current and have_vectors.get(f) == vectors.get(f):
                continue
            actions.append(add_action(f, *self._file_info(f), vectors.get(f)))
        if len(self._info) > 2 * len(keep):  # files the table no longer holds
            self._info = {f: i for f, i in self._info.items() if f in keep}
        upgrade = protocol_upgrade(table.protocol()) if vectors else None
        if upgrade is not None:
            actions.insert(0, upgrade)
        if not actions:
            return False
        version = table.version() + 1
        commit(self.log.uri, version, actions, _position_metadata(manifest))
        self.log.forget()  # a version the loaded table lacks
        self._committed = (version, {f: v for f, v in vectors.items() if f in keep})
        if version % int(CHECKPOINT_INTERVAL) == 0:  # else the next sync loads the new version first
            table = self.log.load()
            # what delta-rs's post-commit hook does after its own commits: a checkpoint, then the log
            # entries older than delta.logRetentionDuration dropped (delta_log), so commits stay flat
            table.create_checkpoint()
            table.cleanup_metadata()
        return True

    def _file_info(self, path: str) -> tuple[int, int, int]:
        """A data file's size, modification time (ms) and rows: read once, as a data file never changes."""
        info = self._info.get(path)
        if info is None:
            info = self._info[path] = (*self.log.file_info(path), self.log.footer(path).num_rows)
        return info

    def _vectors_of(self, table: Any) -> dict[str, DeletionVector]:
        """The vectors of the table's loaded version: as this object committed them, else from the log."""
        version = table.version()
        if self._committed is not None and self._committed[0] == version:
            return dict(self._committed[1])
        found = current_vectors(self.log.uri, version)
        self._committed = (version, found)
        return dict(found)


def _has_vectors(table: Any) -> bool:
    return FEATURE in (table.protocol().reader_features or [])


def _position_metadata(manifest: MirrorManifest) -> dict[str, Any]:
    out = {THROUGH_BATCH: "" if manifest.through_batch is None else str(manifest.through_batch),
           STREAM_POSITION: "" if manifest.stream_position is None else str(manifest.stream_position)}
    if manifest.consistent and manifest.as_of is not None:
        out[AS_OF] = str(manifest.as_of)
    return out


def _added_columns(have: pa.Schema, want: pa.Schema) -> list[pa.Field] | None:
    """The columns of ``want`` the Delta table (``have``) lacks, when it holds every other one with its type;
    None when it does not (a column renamed, dropped or of a new type: the table must be replaced)."""
    wanted = {f.name: f for f in want}
    for f in have:
        other = wanted.get(f.name)
        if other is None or not same_type(f.type, other.type):
            return None
    return [f for f in want if f.name not in set(have.names)]
