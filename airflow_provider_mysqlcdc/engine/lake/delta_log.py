"""A Delta Lake table over Parquet files we already wrote: loading it, and the actions that add or remove
files, committed by delta-rs (the ``deltalake`` package). The changelog and the mirror are each one.

Paths are relative to the Delta table's root, as the protocol wants them; the log holds them percent-encoded.
The table's own path must hold no ``%`` (delta-rs decodes it), which the layout's ``@`` escapes guarantee.
"""

from __future__ import annotations

import json
import posixpath
import time
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.model.tables import TableId

# A checkpoint every 10 commits (Delta's default: 100): each commit replays the log since the last checkpoint,
# and one commit per batch makes that replay the cost of a batch (measured: 22 ms a commit at 100, 10-13 ms
# at 10, over 250 commits)
TABLE_PROPERTIES = {"delta.checkpointInterval": "10"}


class DeltaLog:
    """One Delta table at ``uri`` (a path or URI), of which this process is the only writer: the loaded table
    is kept, brought up to date by each ``load`` (once per commit), and read as loaded in between."""

    def __init__(self, uri: str, table: TableId, what: str,
                 storage_options: dict[str, str] | None = None) -> None:
        self.uri, self.table, self.what = uri, table, what  # what: "changelog" or "mirror", for messages
        self.storage_options = storage_options
        self._loaded: Any = None

    def load(self) -> Any:
        """The ``deltalake.DeltaTable``, at its latest version; None when there is no Delta table yet."""
        from deltalake import DeltaTable

        if self._loaded is not None:
            self._loaded.update_incremental()
            return self._loaded
        if not DeltaTable.is_deltatable(self.uri, self.storage_options):
            return None
        self._loaded = DeltaTable(self.uri, storage_options=self.storage_options)
        return self._loaded

    def create(self, schema: pa.Schema, actions: list[Any], properties: Any) -> None:
        from deltalake import Schema
        from deltalake.transaction import create_table_with_add_actions

        create_table_with_add_actions(
            self.uri, Schema.from_arrow(schema), actions, mode="error", name=self.table.table,
            description=f"mysqlcdc {self.what} of {self.table}", configuration=TABLE_PROPERTIES,
            storage_options=self.storage_options, commit_properties=properties,
        )
        self._loaded = None  # loaded afresh next time

    def loaded(self) -> Any:
        """The table as the last ``load`` left it (no log listing): one ``load`` per commit is enough, as this
        process is the table's only writer (measured: each update lists ``_delta_log``, ~8 ms)."""
        return self._loaded if self._loaded is not None else self.load()

    def schema(self) -> pa.Schema:
        return pa.schema(self.loaded().schema().to_arrow())

    def files(self) -> dict[str, int]:
        """The files of the current version (relative paths, decoded) and their sizes."""
        actions = pa.table(self.loaded().get_add_actions(flatten=True))
        return dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()))

    def footer(self, path: str) -> pq.FileMetaData:
        fs, inner = filesystem(posixpath.join(self.uri, path))
        try:
            return pq.read_metadata(inner, filesystem=fs)
        except FileNotFoundError:
            raise CdcError(
                f"the {self.what} file {path} of {self.table} is missing under {self.uri}"
            ) from None

    def file_info(self, path: str) -> tuple[int, int]:
        """A file's size and modification time (epoch ms)."""
        fs, inner = filesystem(posixpath.join(self.uri, path))
        info = fs.get_file_info(inner)
        return info.size or 0, int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0

    def add_action(self, path: str, rows: int) -> Any:
        from deltalake.transaction import AddAction

        fs, inner = filesystem(posixpath.join(self.uri, path))
        info = fs.get_file_info(inner)
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0
        return AddAction(quote(path, safe="/="), info.size or 0, {}, mtime, True,
                         json.dumps({"numRecords": rows}))

    @staticmethod
    def remove_action(path: str, size: int | None) -> Any:
        from deltalake.transaction import RemoveAction

        return RemoveAction(quote(path, safe="/="), True, int(time.time() * 1000), size=size,
                            partition_values={})
