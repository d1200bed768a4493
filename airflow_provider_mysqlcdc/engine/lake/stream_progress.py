"""The stream's progress record: the latest batch committed into an output root, and the tables it reads.

``<root>/_mysqlcdc_stream_progress.json``, written by the batch commit (``changelog_commit``) with the batch's
markers, and again with the batch's duration and mirror refresh time; read by ``status``, the mirror reader,
garbage collection, ``verify``, the stream's startup, the Airflow trigger, lineage and metrics.

Markers exist only for tables a batch changed: this record holds every committed batch's end offset and the
tables the stream covers, so an idle table's position still advances (none of its changes lies before that
offset outside the batches already committed). It also carries ``last_event_at`` (the commit time of the last
transaction the stream read up to ``end_offset``: the stream's lag in seconds counts from it), the latest
batch's figures and running totals (``stream_figures``); all three are optional, a record of an earlier
release has none (lag in seconds unknown). Version 0 (no ``format_version``): what earlier releases wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.lake.layout import read_json, stream_progress_path, write_json_atomic
from airflow_provider_mysqlcdc.engine.lake.record_format import FORMAT_VERSION, parse_offset, record_version
from airflow_provider_mysqlcdc.engine.lake.stream_figures import BatchFigures, StreamTotals
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId

PROGRESS_VERSION = 1  # 1: format_version added (version 0: the same fields without it)


@dataclass(frozen=True)
class StreamProgress:
    """The latest batch the stream committed into an output root, and the tables it reads."""

    batch_id: int
    end_offset: BinlogOffset
    tables: tuple[str, ...]
    committed_at: str | None = None
    last_event_at: str | None = None  # ISO time (UTC) of the last transaction read up to end_offset
    batch: BatchFigures | None = None  # the figures of batch ``batch_id``
    totals: StreamTotals | None = None  # over every batch committed into the output root
    version: int = PROGRESS_VERSION  # as read; always written as PROGRESS_VERSION

    def covers(self, table: TableId | str) -> bool:
        return str(table) in self.tables

    def to_dict(self) -> dict[str, Any]:
        return {
            FORMAT_VERSION: PROGRESS_VERSION,
            "batch_id": self.batch_id,
            "end_offset": self.end_offset.to_dict(),
            "tables": list(self.tables),
            "committed_at": self.committed_at,
            "last_event_at": self.last_event_at,
            "batch": None if self.batch is None else self.batch.to_dict(),
            "totals": None if self.totals is None else self.totals.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamProgress | None:
        """The record as stored (any version this release reads), or None when it names no batch or no
        readable end offset."""
        version = record_version(data, "the stream's progress record", PROGRESS_VERSION)
        offset = parse_offset(data.get("end_offset"))
        if offset is None or not isinstance(data.get("batch_id"), int):
            return None
        last = data.get("last_event_at")
        committed = data.get("committed_at")
        return cls(
            data["batch_id"], offset, tuple(map(str, data.get("tables") or ())),
            committed if isinstance(committed, str) else None, last if isinstance(last, str) else None,
            BatchFigures.from_dict(data.get("batch")), StreamTotals.from_dict(data.get("totals")), version,
        )


def write_stream_progress(root: str, progress: StreamProgress) -> None:
    write_json_atomic(stream_progress_path(root), progress.to_dict())


def read_stream_progress(root: str, storage_options: dict[str, str] | None = None) -> StreamProgress | None:
    """The stream's progress record, or None (no stream yet, or a record naming no readable offset); a record
    of a newer release is refused (``StoredFormatError``)."""
    data = read_json(stream_progress_path(root), storage_options)
    return StreamProgress.from_dict(data) if data else None
