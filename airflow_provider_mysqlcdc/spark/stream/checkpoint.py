"""What the stream keeps in its checkpoint besides Spark's own files: its identity (the output root belongs to
one stream) and where a new checkpoint's stream begins (its startup mode, resolved once)."""

from __future__ import annotations

import logging
import posixpath
import uuid
from datetime import datetime, timezone
from typing import Any

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.layout import read_json, stream_owner_path, write_json_atomic
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.stream.startup import StartupMode, resolve_start
from airflow_provider_mysqlcdc.spark.stream.binlog_source import POSITION_FILE

log = logging.getLogger(__name__)

STREAM_ID_FILE = "mysqlcdc/stream_id.json"  # in the checkpoint: this stream's identity
STARTUP_FILE = "mysqlcdc/startup.json"  # in the checkpoint: its startup mode and resolved start


def claim_output(checkpoint: str, output: str, startup: dict[str, Any] | None = None) -> str:
    """Tie the output root to this stream: batch ids restart at 0 in a new checkpoint, so a second stream
    writing into the same output would overwrite the first one's changelog batches. Records the stream's
    ``startup`` (mode and start, for ``status``). Returns the stream id."""
    identity_path = posixpath.join(checkpoint.rstrip("/"), STREAM_ID_FILE)
    identity = read_json(identity_path)
    if identity is None:
        identity = {"stream_id": uuid.uuid4().hex, "created_at": datetime.now(timezone.utc).isoformat()}
        write_json_atomic(identity_path, identity)
    owner_path = stream_owner_path(output)
    owner = read_json(owner_path)
    if owner is None or (owner.get("stream_id") == identity["stream_id"] and startup and "startup" not in owner):
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
    HW meanwhile: changes of the other chunks in between would then be skipped. None: a checkpoint of an
    earlier release, which asks the chunk store each time."""
    path = posixpath.join(checkpoint.rstrip("/"), STARTUP_FILE)
    recorded = read_json(path)
    if recorded is not None:
        if recorded.get("mode") != str(mode):
            log.warning("checkpoint %s began with startup mode %s; it resumes from its own position (%s "
                        "applies to new checkpoints only)", checkpoint, recorded.get("mode"), mode)
        start = recorded.get("start")
        return BinlogOffset.from_dict(start) if start else None
    started = read_json(posixpath.join(checkpoint.rstrip("/"), POSITION_FILE))
    offset = resolve_start(settings, mode) if mode.from_offset and started is None else None
    if offset is None and not mode.from_offset and started is None and chunk_store is not None:
        from airflow_provider_mysqlcdc.engine.stream.filter import stream_start

        with ChunkStore(chunk_store) as store:
            views = store.stream_view([str(t) for t in tables or []])
        offset = BinlogOffset.at(stream_start(v.min_hw for v in views.values()))
    if offset is not None:
        log.info("startup mode %s: the stream begins at %s", mode, offset)
    write_json_atomic(path, {"mode": str(mode), "start": offset.to_dict() if offset else None,
                             "resolved_at": datetime.now(timezone.utc).isoformat()})
    return offset
