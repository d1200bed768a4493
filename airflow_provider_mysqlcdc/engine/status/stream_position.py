"""Where the stream stands for one table: its latest committed batch and position, from the output root."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import MirrorManifest
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.position_text import position_of
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.status.stream_health import parse_time


class TableStreamPosition(NamedTuple):
    batch_id: int | None  # latest committed batch covering the table
    position: BinlogPosition | None  # in the stream's order (what HWs compare with)
    exact: bool  # from a marker's or the progress file's end_offset (else estimated)
    own_batch: int | None  # latest batch with changes of the table
    on_server: BinlogPosition | None  # the position on the server now (for lag)
    last_event_at: datetime | None = None  # commit time of the last transaction read up to it (lag in s)


_NOWHERE = TableStreamPosition(None, None, False, None, None)


def table_stream_position(
    root: str | None, table: TableId, manifest: MirrorManifest | None, like: BinlogPosition | None
) -> TableStreamPosition:
    """The position comes from the stream's progress file when the table has been idle since, else from the
    latest marker's ``end_offset``, else it is estimated from its ``last_position`` or the mirror. The two
    positions differ only after a failover (``BinlogOffset.ordered_position``)."""
    if not root:
        return _NOWHERE
    progress = read_stream_progress(root)
    if progress is not None and not progress.covers(table):
        progress = None
    ids = committed_batch_ids(root, table)
    own = ids[-1] if ids else None
    if progress is not None and (own is None or progress.batch_id >= own):
        end = progress.end_offset
        return TableStreamPosition(progress.batch_id, end.ordered_position, True, own, end.position,
                                   parse_time(progress.last_event_at))
    if own is None:
        return _NOWHERE
    latest = read_batch(root, table, own)
    if latest.end_offset is not None:
        end = latest.end_offset  # (markers keep no last event time: the lag in seconds is then unknown)
        return TableStreamPosition(own, end.ordered_position, True, own, end.position)
    candidates: list[BinlogPosition] = []
    if latest.last_position and like is not None:
        candidates.append(position_of(latest.last_position, like))
    if manifest is not None and manifest.stream_position is not None:
        candidates.append(manifest.stream_position)
    estimate = max(candidates, default=None)
    return TableStreamPosition(own, estimate, False, own, estimate)
