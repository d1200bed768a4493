"""A Delta Lake table over Parquet files we already wrote: loading it, and the actions that add or remove
files, committed by delta-rs (the ``deltalake`` package) or, for a table on a local file system whose only
writer is this process, by the engine itself (``append``, ``delta_log_writer``: no log listing per commit).
The changelog and the mirror are each one.

Paths are relative to the Delta table's root, as the protocol wants them; the log holds them percent-encoded.
The table's own path must hold no ``%`` (delta-rs decodes it), which the layout's ``@`` escapes guarantee.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import time
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.common.environment import DELTA_LOG_RETENTION_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.delta_log_writer import (
    local_log_dir,
    transaction_entry,
    write_entry,
)
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.model.tables import TableId

log = logging.getLogger(__name__)

# A checkpoint every 10 commits (Delta's default: 100): each commit replays the log since the last checkpoint,
# and one commit per batch makes that replay the cost of a batch (measured: 22 ms a commit at 100, 10-13 ms
# at 10, over 250 commits)
CHECKPOINT_INTERVAL = "10"
# How long log entries are kept: the Delta time-travel horizon (by version, time or binlog position). delta-rs
# lists the whole ``_delta_log`` three to four times per commit (object_store's local file system stats every
# entry), so a commit costs ~12-20 us more per entry kept: at a 1 s trigger Delta's default (30 days, 2.6M
# entries) makes a commit cost seconds; 10 minutes keeps ~660 entries (600 commits and 60 checkpoints) at a
# 1 s trigger. delta-rs deletes the expired entries itself each time it writes a checkpoint (every
# CHECKPOINT_INTERVAL commits: ``delta.enableExpiredLogCleanup``), never one a kept version needs.
# MYSQLCDC_DELTA_LOG_RETENTION overrides it (a duration: 10m, 2h, 1d).
LOG_RETENTION = "10m"
# How long a removed file stays a tombstone in the table's state (and checkpoints): garbage collection reads
# when each mirror file was removed from them once the log entry that removed it has expired, so it must be at
# least the GC retention (``gc/retention.py``, default 3 days; Delta's own default is 1 week).
# An operator who keeps garbage longer (``--gc-retention`` above 3 days) sets a longer one on the mirror
# (``ALTER TABLE ... SET TBLPROPERTIES``, delta-rs ``alter.set_table_properties``): a longer one is kept.
TOMBSTONE_RETENTION = "3d"
TOMBSTONES = "delta.deletedFileRetentionDuration"


def table_properties() -> dict[str, str]:
    """The Delta table properties the package sets on its tables, at creation and on tables of an earlier
    release (``DeltaLog.load``: one ``SET TBLPROPERTIES`` commit the first time a process writes them)."""
    log_retention = os.environ.get(DELTA_LOG_RETENTION_ENV, "").strip() or LOG_RETENTION
    return {
        "delta.checkpointInterval": CHECKPOINT_INTERVAL,
        "delta.logRetentionDuration": delta_interval(log_retention, DELTA_LOG_RETENTION_ENV),
        TOMBSTONES: delta_interval(TOMBSTONE_RETENTION, "tombstone retention"),
        "delta.enableExpiredLogCleanup": "true",
    }


_UNITS = {"s": ("seconds", 1), "m": ("minutes", 60), "h": ("hours", 3600), "d": ("days", 86400),
          "w": ("weeks", 7 * 86400)}


def delta_interval(duration: str, setting: str) -> str:
    """``10m`` as Delta spells an interval (``interval 10 minutes``); anything else is refused, naming it."""
    text = duration.strip().lower()
    unit = _UNITS.get(text[-1:]) if text else None
    number = text[:-1].strip()
    if unit is None or not number.isdigit() or int(number) <= 0:
        raise ConfigurationError(
            f"{setting} {duration!r}: give a whole number and a unit (s, m, h, d or w), e.g. {LOG_RETENTION}"
        )
    return f"interval {int(number)} {unit[0]}"


def interval_seconds(value: str | None) -> float | None:
    """Seconds of a Delta interval (``interval 3 days``); None when it is not one (unset, unknown unit)."""
    parts = (value or "").strip().lower().split()
    if len(parts) != 3 or parts[0] != "interval":
        return None
    try:
        number = float(parts[1])
    except ValueError:
        return None
    for name, seconds in _UNITS.values():
        if parts[2] in (name, name[:-1]):
            return number * seconds
    return None


@dataclass(frozen=True)
class LogHead:
    """What a table's only writer knows of its latest version without listing the log."""

    version: int
    schema: pa.Schema
    reader_features: frozenset[str]
    apps: dict[str, int | None]  # transaction version by application id (None: none yet)


class DeltaLog:
    """One Delta table at ``uri`` (a path or URI), of which this process is the only writer: the loaded table
    is kept, brought up to date by each ``load``, and read as loaded in between; the engine's own commits
    (``append``) advance a ``head`` instead, and the table is loaded again only when something reads it."""

    def __init__(self, uri: str, table: TableId, what: str,
                 storage_options: dict[str, str] | None = None) -> None:
        self.uri, self.table, self.what = uri, table, what  # what: "changelog" or "mirror", for messages
        self.storage_options = storage_options
        self._loaded: Any = None
        self._stale = False  # the engine committed after ``_loaded`` was read
        self._head: LogHead | None = None
        self._properties_set = False  # the table's properties checked (and set) by this process
        self._log_dir = local_log_dir(uri)  # None: an object store, every commit through delta-rs

    def head(self, app_id: str | None = None) -> LogHead | None:
        """The table's latest version, schema, reader features and ``app_id``'s transaction version; None
        when there is no Delta table yet. Read from the log once, then advanced by this process's own
        ``append`` calls, which find out (and drop it) when another writer committed meanwhile."""
        if self._head is not None and (app_id is None or app_id in self._head.apps):
            return self._head
        # the table as last loaded will do: a version someone committed since makes ``append`` fail, and the
        # head is then read afresh
        table = self.loaded() if self._properties_set else self.load(write=True)
        if table is None:
            return None
        apps = {} if app_id is None else {app_id: table.transaction_version(app_id)}
        self._head = LogHead(table.version(), self.schema(),
                             frozenset(table.protocol().reader_features or ()), apps)
        return self._head

    def append(self, actions: list[dict[str, Any]], metadata: dict[str, Any],
               app: tuple[str, int] | None = None) -> bool:
        """Commit ``actions`` as the version after ``head``'s (with ``app``'s transaction version), written by
        the engine (a local table only: ``writes_itself``). False when another writer took that version: the
        head is dropped, the caller looks again (``head``) and decides anew."""
        head = self._head
        if head is None or self._log_dir is None:
            raise RuntimeError("DeltaLog.append needs a head (call head()) on a local table")
        version = head.version + 1
        entries = actions if app is None else [*actions, transaction_entry(*app)]
        if not write_entry(self._log_dir, version, entries, metadata):
            self._head, self._stale = None, True  # the next look lists the log
            return False
        self._stale = True
        self._head = replace(head, version=version,
                             apps=head.apps if app is None else {**head.apps, app[0]: app[1]})
        if version % int(CHECKPOINT_INTERVAL) == 0:
            # what delta-rs's post-commit hook does after its own commits: a checkpoint, then the log entries
            # older than delta.logRetentionDuration dropped, so a commit's cost stays flat
            kept = self._head
            table = self.load()
            table.create_checkpoint()
            table.cleanup_metadata()
            self._head = kept
        return True

    def forget(self) -> None:
        """Someone (this process by other means) committed a version: the next look lists the log."""
        self._head, self._stale = None, True

    @property
    def writes_itself(self) -> bool:
        """Whether ``append`` may commit (a local file system, where put-if-absent is a hard link)."""
        return self._log_dir is not None

    def load(self, write: bool = False) -> Any:
        """The ``deltalake.DeltaTable``, at its latest version; None when there is no Delta table yet.
        ``write``: the caller commits next (the table's writer), so the table gets the package's properties
        first if it lacks them (once per process); readers (status, GC) never commit."""
        from deltalake import DeltaTable

        self._head, self._stale = None, False
        if self._loaded is not None:
            self._loaded.update_incremental()
        elif DeltaTable.is_deltatable(self.uri, self.storage_options):
            self._loaded = DeltaTable(self.uri, storage_options=self.storage_options)
        else:
            return None
        if write and not self._properties_set:
            self._set_properties(self._loaded)
            self._properties_set = True
        return self._loaded

    def _set_properties(self, table: Any) -> None:
        """A table of an earlier release (or under another log retention setting) gets this release's
        properties: one commit, made once by the process that writes the table next. A longer tombstone
        retention than ours, set by an operator, is kept."""
        wanted = table_properties()
        have = table.metadata().configuration
        longer = interval_seconds(have.get(TOMBSTONES)) or 0.0
        if longer >= (interval_seconds(wanted[TOMBSTONES]) or 0.0):  # an operator's longer one stays
            wanted[TOMBSTONES] = have[TOMBSTONES]
        if any(have.get(key) != value for key, value in wanted.items()):
            table.alter.set_table_properties(wanted, raise_if_not_exists=False)
            table.update_incremental()
            log.info("%s Delta table of %s: table properties set to %s", self.what, self.table, wanted)

    def create(self, schema: pa.Schema, actions: list[Any], properties: Any) -> None:
        from deltalake import Schema
        from deltalake.transaction import create_table_with_add_actions

        create_table_with_add_actions(
            self.uri, Schema.from_arrow(schema), actions, mode="error", name=self.table.table,
            description=f"mysqlcdc {self.what} of {self.table}", configuration=table_properties(),
            storage_options=self.storage_options, commit_properties=properties,
        )
        self._loaded, self._head = None, None  # loaded afresh next time
        self._properties_set = True  # created with them

    def loaded(self) -> Any:
        """The table as the last ``load`` left it (no log listing): one ``load`` per commit is enough, as this
        process is the table's only writer (measured: each update lists ``_delta_log``, ~8 ms)."""
        return self._loaded if self._loaded is not None and not self._stale else self.load()

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
