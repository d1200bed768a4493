"""What the stream keeps in its checkpoint besides Spark's own files: its identity (the output root belongs to
one stream) and where a new checkpoint's stream begins (its startup mode, resolved once).

Where the stream stands is not kept here: ``status`` reads the sink's own record in the output (batch markers,
``_mysqlcdc_stream_progress.json``), the batches consumers can read. Earlier releases also wrote
``mysqlcdc/stream_position.json`` when Spark committed a batch to the source, one batch behind the sink; a
start removes that file (it still tells a checkpoint without ``startup.json`` that it has streamed)."""

from __future__ import annotations

import logging
import posixpath
import uuid
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.layout import (
    filesystem,
    read_json,
    stream_owner_path,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.stream.snapshot_server import snapshot_start
from airflow_provider_mysqlcdc.engine.stream.startup import StartupMode, resolve_start

log = logging.getLogger(__name__)

STREAM_ID_FILE = "mysqlcdc/stream_id.json"  # in the checkpoint: this stream's identity
STARTUP_FILE = "mysqlcdc/startup.json"  # in the checkpoint: its startup mode and resolved start
LEGACY_POSITION_FILE = "mysqlcdc/stream_position.json"  # written by earlier releases; removed at start


def claim_output(checkpoint: str, output: str, startup: dict[str, Any] | None = None) -> str:
    """Tie the output root to this stream: batch ids restart at 0 in a new checkpoint, so a second stream
    writing into the same output would overwrite the first one's changelog batches. Records the stream's
    ``startup`` (mode and start, for ``status``). Returns the stream id."""
    identity_path = posixpath.join(checkpoint.rstrip("/"), STREAM_ID_FILE)
    identity = read_json(identity_path)
    if identity is None:
        identity = {"stream_id": uuid.uuid4().hex, "created_at": datetime.now(UTC).isoformat()}
        write_json_atomic(identity_path, identity)
    owner_path = stream_owner_path(output)
    owner = read_json(owner_path)
    if owner is None or (owner.get("stream_id") == identity["stream_id"] and startup
                         and "startup" not in owner):
        write_json_atomic(owner_path, {"stream_id": identity["stream_id"], "checkpoint": checkpoint,
                                       **({"startup": startup} if startup else {})})
    elif owner.get("stream_id") != identity["stream_id"]:
        raise ConfigurationError(
            f"the output {output} already holds the changelog of another stream (checkpoint "
            f"{owner.get('checkpoint')}, stream id {owner.get('stream_id')}); this checkpoint ({checkpoint}) "
            "would restart its batch ids at 0 and overwrite that changelog. Resume the stream with its own "
            f"checkpoint, or write to a new output path (or delete {owner_path} after removing the old "
            "changelog)"
        )
    return str(identity["stream_id"])


def startup_offset(
    checkpoint: str, settings: MySQLSettings, mode: StartupMode, chunk_store: str | None = None,
    tables: list[TableId] | None = None,
) -> BinlogOffset | None:
    """Where a new checkpoint's stream begins, resolved once and recorded in the checkpoint
    (``mysqlcdc/startup.json``), so a restart, or a retry of a failed start, begins at the very same point; a
    checkpoint that already streamed keeps its own start (the mode applies to new checkpoints).

    ``initial``: the chunks' smallest HW when the stream first starts. Spark does not keep a stream's first
    start in its checkpoint (it asks the source again), and a chunk rerun or a new plan may raise the smallest
    HW meanwhile: changes of the other chunks in between would then be skipped. It refuses to start on
    another server than the one the snapshot read (``engine/stream/snapshot_server.py``). None: a checkpoint
    of an earlier release, which asks the chunk store each time."""
    path = posixpath.join(checkpoint.rstrip("/"), STARTUP_FILE)
    recorded = read_json(path)
    if recorded is not None:
        if recorded.get("mode") != str(mode):
            log.warning("checkpoint %s began with startup mode %s; it resumes from its own position (%s "
                        "applies to new checkpoints only)", checkpoint, recorded.get("mode"), mode)
        _remove_legacy_position(checkpoint)
        start = recorded.get("start")
        return BinlogOffset.from_dict(start) if start else None
    started = _has_streamed(checkpoint)
    offset = resolve_start(settings, mode) if mode.from_offset and not started else None
    if offset is None and not mode.from_offset and not started and chunk_store is not None:
        # refuses HWs of another server than this one; the offset records this server
        offset = snapshot_start(settings, chunk_store, [str(t) for t in tables or []])
    if offset is not None:
        log.info("startup mode %s: the stream begins at %s", mode, offset)
    write_json_atomic(path, {"mode": str(mode), "start": offset.to_dict() if offset else None,
                             "resolved_at": datetime.now(UTC).isoformat()})
    _remove_legacy_position(checkpoint)
    return offset


def _has_streamed(checkpoint: str) -> bool:
    """A checkpoint of an earlier release without ``startup.json`` that already planned a batch (Spark's
    offset log) keeps its own start; one that wrote the old position file did too."""
    if read_json(posixpath.join(checkpoint.rstrip("/"), LEGACY_POSITION_FILE)) is not None:
        return True
    fs, inner = filesystem(posixpath.join(checkpoint.rstrip("/"), "offsets"))
    try:
        return any(info.is_file for info in fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True)))
    except FileNotFoundError:
        return False


def _remove_legacy_position(checkpoint: str) -> None:
    """The old position file lagged the sink by a batch and nothing reads it any more: remove it, so nobody
    takes it for where the stream stands."""
    fs, inner = filesystem(posixpath.join(checkpoint.rstrip("/"), LEGACY_POSITION_FILE))
    try:
        fs.delete_file(inner)
        log.info("removed %s from checkpoint %s (earlier releases; status reads the output's batch markers)",
                 LEGACY_POSITION_FILE, checkpoint)
    except FileNotFoundError:
        pass
