"""How far behind the server the stream is in seconds, and how long until the binlog it needs is purged.

**Lag in seconds** is the server's clock now minus the commit time of the last transaction the stream has read
(``last_event_at`` of its progress record), as Debezium's ``MilliSecondsBehindSource``: the age of the newest
change the output has, while changes are waiting. An idle stream is not lagging: a position at the server's
binlog end is 0 s however old its last transaction is, and so is one followed only by file bookkeeping (the
server rotated: a stream stays at its last transaction's end until a new one comes; ``ServerBinlog.at_end``).
Unknown (None) without the server, or when the record was written by a release that did not keep the time.

**Headroom** is the time until the server purges the oldest binlog file the pipeline still needs. Needed is
the stream's position once it has committed a batch (a running stream re-reads nothing before it; a chunk
re-read later bounds its own binlog read by its own low and high watermark, read at once); before that, the
smallest chunk high watermark, where a new stream starts. A file is purged once its modification time (when
the server rotated to the next file: the first event time of that file, ``binlog.file_start``) is older than
the server's expiry (``binlog_expiry``). The server's current file is never purged while current: its headroom
is at least the expiry (``at_least``). A server that never purges by age gives no headroom (None, with a
note). Purges happen at a rotation (or FLUSH, or a restart), so a file past its time may linger until then:
its headroom is 0. Times are the server's clock.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from airflow_provider_mysqlcdc.engine.lake.stream_progress import StreamProgress
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number
from airflow_provider_mysqlcdc.engine.status.server_binlog import ServerBinlog

FileStarted = Callable[[str, int], datetime | None]  # (file, size) -> when it was started


def parse_time(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def lag_seconds(server: ServerBinlog | None, behind: BinlogPosition | None,
                last_event_at: datetime | None) -> float | None:
    """Seconds the stream at ``behind`` is behind ``server`` (0 at its end; None: unknown)."""
    if server is None or behind is None:
        return None
    if server.at_end(behind):
        return 0.0
    if last_event_at is None or server.now is None:
        return None
    return max((server.now - last_event_at).total_seconds(), 0.0)


@dataclass(frozen=True)
class BinlogHeadroom:
    """The oldest binlog file the pipeline needs, and how long the server keeps it."""

    file: str
    seconds: float | None  # None: the server never purges it by age, or unknown (see note)
    purge_at: datetime | None = None  # the server's clock
    at_least: bool = False  # the server's current file: its clock starts when the server rotates
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "seconds": None if self.seconds is None else round(self.seconds, 1),
                "purge_at": None if self.purge_at is None else self.purge_at.isoformat(timespec="seconds"),
                "at_least": self.at_least, "note": self.note}


def binlog_headroom(server: ServerBinlog, needed: BinlogPosition,
                    started: FileStarted | None) -> BinlogHeadroom:
    """How long the server keeps the file of ``needed`` (module docstring)."""
    expiry = server.expiry
    file = needed.file
    if expiry is None:
        return BinlogHeadroom(file, None, note="the server's binlog expiry is unknown")
    if expiry.seconds is None:
        return BinlogHeadroom(file, None, note=f"{expiry.setting}: the server purges no binlog by age")
    if server.files is None:
        return BinlogHeadroom(file, None, note="SHOW BINARY LOGS not allowed (REPLICATION CLIENT): unknown")
    names = [name for name, _ in server.files]
    if file not in names:
        if names and file_number(file) < file_number(names[0]):
            return BinlogHeadroom(file, 0.0, note=f"{file} is purged already: the tables need a new snapshot")
        return BinlogHeadroom(file, None, note=f"the server has no binlog file {file}")
    index = names.index(file)
    if index == len(names) - 1:
        return BinlogHeadroom(file, expiry.seconds, at_least=True,
                              note=f"{file} is the server's current file: kept {expiry.setting} after "
                                   "the server rotates")
    following, size = server.files[index + 1]
    rotated = started(following, size) if started is not None else None
    if rotated is None or server.now is None:
        return BinlogHeadroom(file, None, note=f"when {following} was started is unknown")
    purge_at = rotated + timedelta(seconds=expiry.seconds)
    return BinlogHeadroom(file, max((purge_at - server.now).total_seconds(), 0.0), purge_at)


@dataclass(frozen=True)
class StreamHealth:
    """The stream's lag and the binlog headroom of a pipeline (``status`` and the stream task's metrics)."""

    needed: BinlogPosition | None  # the oldest position the pipeline needs on the server
    needed_by: str | None  # "stream" (its position), or "min_hw" (no batch yet: a new stream starts there)
    last_event_at: datetime | None
    lag_seconds: float | None
    lag_bytes: int | None
    lag_files: int | None
    headroom: BinlogHeadroom | None
    expiry: str | None = None  # the setting that decides the expiry
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "needed": None if self.needed is None else str(self.needed), "needed_by": self.needed_by,
            "last_event_at": None if self.last_event_at is None else self.last_event_at.isoformat(),
            "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 1),
            "lag_bytes": self.lag_bytes, "lag_files": self.lag_files,
            "headroom_seconds": (None if self.headroom is None or self.headroom.seconds is None
                                 else round(self.headroom.seconds, 1)),
            "headroom": None if self.headroom is None else self.headroom.as_dict(),
            "expiry": self.expiry, "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Needed:
    """The oldest position the pipeline needs on the server, and what needs it."""

    position: BinlogPosition
    by: str  # "stream" or "min_hw"
    last_event_at: datetime | None = None  # the stream's: the commit time of the last change read

    @classmethod
    def of(cls, progress: StreamProgress | None, min_hw: BinlogPosition | None,
           streaming: Sequence[tuple[BinlogPosition, datetime | None]] = ()) -> Needed | None:
        """From the stream's progress record; without one (a stream of an earlier release) from the tables'
        stream positions (``streaming``: position and last event time of each); else the smallest HW."""
        if progress is not None:
            return cls(progress.end_offset.position, "stream", parse_time(progress.last_event_at))
        if streaming:
            position, last = min(streaming, key=lambda p: p[0].key)
            return cls(position, "stream", last)
        return cls(min_hw, "min_hw") if min_hw is not None else None


def stream_health(server: ServerBinlog | None, needed: Needed | None,
                  started: FileStarted | None = None) -> StreamHealth:
    """The health of a pipeline from the server and the position it needs."""
    if needed is None:
        return StreamHealth(None, None, None, None, None, None, None)
    by, last = needed.by, needed.last_event_at
    if server is None:
        return StreamHealth(needed.position, by, last, None, None, None, None)
    lag_bytes, lag_files = server.lag(needed.position)
    lag = lag_seconds(server, needed.position, last) if by == "stream" else None
    notes = list(server.expiry.notes) if server.expiry is not None else []
    if by == "stream" and lag is None:
        notes.append("lag in seconds unknown: the stream's progress record has no last event time (written "
                     "by an earlier release)")
    headroom = binlog_headroom(server, needed.position, started)
    return StreamHealth(needed.position, by, last, lag, lag_bytes, lag_files, headroom,
                        server.expiry.setting if server.expiry is not None else None, tuple(notes))
