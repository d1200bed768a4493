"""Delta commits that carry deletion vectors, written by the engine (delta-rs's Python ``AddAction`` has no
deletion-vector field), and the vectors a table's current version holds.

A commit is the JSON file ``_delta_log/<version>.json``, created put-if-absent as the protocol requires: on a
local file system the lines go to a temporary file that is then hard-linked to the version's name, which
fails when that version exists (another writer committed it: the commit is refused, never overwritten).
Object stores need their own conditional put: refused with an error naming the setting (``mirror_updates``).

The first such commit upgrades the protocol to reader 3 / writer 7 with the ``deletionVectors`` feature
(keeping every feature the table had). A data file's vector changes by a ``remove`` of the file with its old
vector and an ``add`` with the new one, in the same commit (the pair path + vector identifies a file).

Which vector each file carries now is read from the log (the last checkpoint, then the commits after it):
delta-rs reports a file's keep-mask (``deletion_vectors()``) but not its descriptor, which a ``remove`` must
name.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import DeletionVector
from airflow_provider_mysqlcdc.engine.lake.delta_log_writer import add_entry, remove_entry, write_entry
from airflow_provider_mysqlcdc.engine.lake.delta_log_writer import local_log_dir as writer_log_dir
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem

FEATURE = "deletionVectors"
# the features a legacy protocol version implies, which a table-features protocol must list
_LEGACY_WRITER = {2: ["appendOnly", "invariants"], 3: ["checkConstraints"],
                  4: ["changeDataFeed", "generatedColumns"], 5: ["columnMapping"], 6: ["identityColumns"]}
_LEGACY_READER = {2: ["columnMapping"]}


def local_log_dir(uri: str) -> str:
    """The table's ``_delta_log`` as a local directory; an error for object stores."""
    found = writer_log_dir(uri)
    if found is None:
        raise CdcError(
            f"mirror_updates=deletion_vectors writes Delta commits itself, put-if-absent, which this release "
            f"does on local file systems only; {uri} is not one: set mirror_updates=rewrite (the default)")
    return found


def protocol_upgrade(protocol: Any) -> dict[str, Any] | None:
    """The ``protocol`` action that adds the deletion-vector feature to ``protocol`` (delta-rs's
    ``ProtocolVersions``); None when the table has it."""
    readers = list(protocol.reader_features or [])
    writers = list(protocol.writer_features or [])
    if FEATURE in readers and FEATURE in writers:
        return None
    if protocol.min_reader_version < 3:
        readers = [f for v, fs in _LEGACY_READER.items() if v <= protocol.min_reader_version for f in fs]
    if protocol.min_writer_version < 7:
        writers = [f for v, fs in _LEGACY_WRITER.items() if v <= protocol.min_writer_version for f in fs]
    return {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                         "readerFeatures": sorted({*readers, FEATURE}),
                         "writerFeatures": sorted({*writers, FEATURE})}}


def add_action(path: str, size: int, mtime_ms: int, rows: int, vector: DeletionVector | None) -> dict:
    action = add_entry(path, size, mtime_ms, rows)
    if vector is not None:
        action["add"]["deletionVector"] = vector.to_delta()
    return action


def remove_action(path: str, size: int | None, vector: DeletionVector | None) -> dict:
    action = remove_entry(path, size)
    if vector is not None:
        action["remove"]["deletionVector"] = vector.to_delta()
    return action


def commit(uri: str, version: int, actions: list[dict], metadata: dict[str, Any]) -> None:
    """Write Delta version ``version`` (the next one) with ``actions``, put-if-absent."""
    if not write_entry(local_log_dir(uri), version, actions, metadata):
        raise CdcError(
            f"Delta version {version} of {uri} was committed by another writer meanwhile: one mirror "
            "refresher per table (the stream, or mysqlcdc mirror), not both")


def current_vectors(uri: str, version: int) -> dict[str, DeletionVector]:
    """The vector of each file of the table's version ``version`` that has one (relative paths, decoded)."""
    log_dir = posixpath.join(uri, "_delta_log")
    found: dict[str, DeletionVector] = {}
    last = _last_checkpoint(log_dir)
    start = 0
    if last is not None and int(last["version"]) <= version:
        if last.get("parts"):
            raise CdcError(f"{uri}: a multi-part checkpoint, which mysqlcdc does not write")
        start = int(last["version"])
        fs, inner = filesystem(posixpath.join(log_dir, f"{start:020d}.checkpoint.parquet"))
        checkpoint = pq.read_table(inner, filesystem=fs, columns=["add"]).column("add").to_pylist()
        for add in checkpoint:
            if add and add.get("deletionVector"):
                found[unquote(add["path"])] = DeletionVector.from_delta(add["deletionVector"])
        start += 1
    for v in range(start, version + 1):
        fs, inner = filesystem(posixpath.join(log_dir, f"{v:020d}.json"))
        with fs.open_input_stream(inner) as src:
            lines = src.read().decode().splitlines()
        for line in lines:
            if not line.strip():
                continue
            action = json.loads(line)
            if "remove" in action:
                found.pop(unquote(action["remove"]["path"]), None)
            elif "add" in action:
                add = action["add"]
                path = unquote(add["path"])
                found.pop(path, None)
                if add.get("deletionVector"):
                    found[path] = DeletionVector.from_delta(add["deletionVector"])
    return found


def _last_checkpoint(log_dir: str) -> dict[str, Any] | None:
    fs, inner = filesystem(posixpath.join(log_dir, "_last_checkpoint"))
    try:
        with fs.open_input_stream(inner) as src:
            return json.loads(src.read().decode())
    except FileNotFoundError:
        return None
