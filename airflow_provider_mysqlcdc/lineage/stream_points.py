"""Where a stream run starts and ends, as its run facet reports it: the stream's latest committed batch and
its end position (the output root's progress file), or, before the stream's first batch, the smallest chunk
HW it starts from."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

log = logging.getLogger(__name__)


def committed_point(output_root: str) -> dict[str, Any] | None:
    """The stream's latest committed batch in ``output_root`` and the binlog position it ends at."""
    try:
        progress = read_stream_progress(output_root)
    except Exception as exc:  # noqa: BLE001 - lineage must not fail the task
        log.warning("lineage: the stream's progress in %s could not be read (%s)", output_root, exc)
        return None
    if progress is None:
        return None
    offset = progress.end_offset
    point: dict[str, Any] = {"batch": progress.batch_id, "position": str(offset.ordered_position),
                             "committedAt": progress.committed_at}
    if offset.gtid:
        point["gtid"] = offset.gtid
    return point


def start_point(output_root: str, chunk_hws: Sequence[BinlogPosition]) -> dict[str, Any] | None:
    """Where this run reads from: after the latest committed batch, else (a new stream) the smallest HW."""
    committed = committed_point(output_root)
    if committed is not None:
        return {**committed, "from": "the latest committed batch"}
    if chunk_hws:
        return {"position": str(min(chunk_hws)), "from": "the smallest chunk HW"}
    return None
