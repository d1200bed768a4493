"""A Delta log entry written by the engine itself, put-if-absent, as the protocol asks of every writer.

Why not delta-rs: a delta-rs commit lists the whole ``_delta_log`` (and refreshes the table's state, another
listing) before it writes one small JSON file, ~5-10 ms a commit per table; a stream batch commits every
changed table's changelog, so that listing was most of a batch's cost per changed table (issue 38, point 3).
A writer that is its table's only writer (the stream lock makes the stream so) knows the next version
already, and writes it without looking.

Put-if-absent: the lines go to a temporary file in ``_delta_log`` that is then hard-linked to the version's
name, which fails when that version exists (another writer took it: nothing is overwritten, the caller looks
again). Object stores need a conditional put of their own: ``local_log_dir`` says None there and the caller
commits through delta-rs.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any
from urllib.parse import quote


def local_log_dir(uri: str) -> str | None:
    """The table's ``_delta_log`` as a local directory; None for an object store."""
    if "://" in uri and not uri.startswith("file://"):
        return None
    return os.path.join(uri.removeprefix("file://"), "_delta_log")


def add_entry(path: str, size: int, mtime_ms: int, rows: int) -> dict[str, Any]:
    """An ``add`` action for a data file (path relative to the table), as delta-rs writes one."""
    return {"add": {"path": quote(path, safe="/="), "partitionValues": {}, "size": size,
                    "modificationTime": mtime_ms, "dataChange": True,
                    "stats": json.dumps({"numRecords": rows})}}


def remove_entry(path: str, size: int | None) -> dict[str, Any]:
    """A ``remove`` action for a data file the version no longer holds (kept as a tombstone)."""
    remove: dict[str, Any] = {"path": quote(path, safe="/="), "deletionTimestamp": int(time.time() * 1000),
                              "dataChange": True, "extendedFileMetadata": True, "partitionValues": {}}
    if size is not None:
        remove["size"] = size
    return {"remove": remove}


def transaction_entry(app_id: str, version: int) -> dict[str, Any]:
    """A ``txn`` action: the application's transaction version, what makes a replayed batch commit nothing."""
    return {"txn": {"appId": app_id, "version": version, "lastUpdated": int(time.time() * 1000)}}


def write_entry(log_dir: str, version: int, actions: list[dict[str, Any]], metadata: dict[str, Any]) -> bool:
    """Write Delta version ``version`` with ``actions`` and ``metadata`` in its ``commitInfo``; False, writing
    nothing, when that version exists."""
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE",
                           "operationParameters": {"mode": "Append"}, "engineInfo": "mysqlcdc",
                           **metadata}}
    text = "\n".join(json.dumps(a, separators=(",", ":")) for a in [info, *actions]) + "\n"
    target = os.path.join(log_dir, f"{version:020d}.json")
    fd, tmp = tempfile.mkstemp(prefix=".mysqlcdc-commit-", dir=log_dir)
    try:
        with os.fdopen(fd, "w") as out:  # no fsync: delta-rs's local commits make none either
            out.write(text)
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)
