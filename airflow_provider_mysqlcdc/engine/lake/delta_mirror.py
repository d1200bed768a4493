"""A table's mirror as a Delta Lake table, so any engine reads the current state without our manifest.

The Delta table is the mirror directory (``<root>/<database>/<table>/mirror``). After each refresh switches
``mirror/_manifest.json``, ``DeltaMirror.sync`` makes the Delta table hold exactly the manifest's files in one
commit: the chunk versions the refresh wrote are added and the ones they replace removed (a refresh applies a
batch's changes, or a chunk rerun's new snapshot, by rewriting the chunks they touch), so the Delta version
after a batch is the mirror as of that batch. The sync compares with the Delta table's own file list, not with
the previous manifest, so a refresh killed between its manifest and its Delta commit is made good by the next.

When the columns change (DDL: the refresh rewrites every chunk in the new columns) the commit replaces the
whole table, schema included. Each commit's ``commitInfo`` records where the mirror stands:
``mysqlcdc.throughBatch``, ``mysqlcdc.streamPosition`` and, once the mirror is consistent,
``mysqlcdc.asOf`` (the binlog position the whole table is exact at): a Delta version is a binlog position.
"""

from __future__ import annotations

import logging
import posixpath
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.lake.delta_log import DeltaLog
from airflow_provider_mysqlcdc.engine.lake.delta_types import delta_schema, same_type
from airflow_provider_mysqlcdc.engine.lake.layout import MIRROR, table_dir
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import MirrorManifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId

log = logging.getLogger(__name__)

THROUGH_BATCH, STREAM_POSITION, AS_OF = "mysqlcdc.throughBatch", "mysqlcdc.streamPosition", "mysqlcdc.asOf"


def mirror_table_uri(root: str, table: TableId) -> str:
    """Where the table's mirror Delta table lives: the mirror directory (a path or URI)."""
    return posixpath.join(table_dir(root, table), MIRROR)


class DeltaMirror:
    """The Delta table of one table's mirror, kept equal to the mirror manifest."""

    def __init__(self, root: str, table: TableId, storage_options: dict[str, str] | None = None) -> None:
        self.table = table
        self.log = DeltaLog(mirror_table_uri(root, table), table, "mirror", storage_options)

    def sync(self, manifest: MirrorManifest) -> bool:
        """One Delta commit that makes the table hold exactly ``manifest``'s files; False when it already
        does."""
        from deltalake import CommitProperties, Schema

        prefix = MIRROR + "/"
        wanted = [f[len(prefix):] if f.startswith(prefix) else f for f in manifest.files]
        table = self.log.load()
        current = self.log.files() if table is not None else {}
        if table is not None and set(current) == set(wanted):
            return False
        footers = {f: self.log.footer(f) for f in wanted if f not in current}
        schema = delta_schema(next(iter(footers.values())).schema.to_arrow_schema()) if footers else None
        properties = CommitProperties(custom_metadata=_position_metadata(manifest))
        adds = [self.log.add_action(f, m.num_rows) for f, m in footers.items()]
        if table is None:
            if schema is None:  # an empty mirror: no file to take the columns from
                return False
            self.log.create(schema, adds, properties)
        elif schema is not None and not _same_columns(self.log.schema(), schema):
            adds = [self.log.add_action(f, self.log.footer(f).num_rows) for f in wanted]
            table.create_write_transaction(adds, "overwrite", Schema.from_arrow(schema),
                                           commit_properties=properties)
            log.info("mirror Delta table of %s: columns changed, table replaced", self.table)
        else:
            removes = [self.log.remove_action(f, size) for f, size in current.items() if f not in set(wanted)]
            table.create_write_transaction([*adds, *removes], "append", Schema.from_arrow(self.log.schema()),
                                           commit_properties=properties)
        return True


def _position_metadata(manifest: MirrorManifest) -> dict[str, Any]:
    out = {THROUGH_BATCH: "" if manifest.through_batch is None else str(manifest.through_batch),
           STREAM_POSITION: "" if manifest.stream_position is None else str(manifest.stream_position)}
    if manifest.consistent and manifest.as_of is not None:
        out[AS_OF] = str(manifest.as_of)
    return out


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    return a.names == b.names and all(same_type(x.type, y.type) for x, y in zip(a, b))
