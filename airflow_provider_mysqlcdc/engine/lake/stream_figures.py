"""What the stream's batches did, as its progress record keeps them: the latest batch's figures and totals.

The batch commit (``changelog_commit``) records them with each batch (``stream_progress``) and
anything that watches the output root reads them back: ``status`` shows them, and the Airflow stream task
turns them into metrics. Totals are cumulative over the stream of the output root (batch ids of one
checkpoint), so a watcher that looks now and then derives exact counts from two looks; a replayed batch id is
counted once. Every field is optional when read: a record of an earlier release has none of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _counts(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, (int, float))}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class BatchFigures:
    """One committed batch: what it wrote and read, and how long it took."""

    batch_id: int
    rows: dict[str, int] = field(default_factory=dict)  # changes written per table ("db.table")
    bytes: dict[str, int] = field(default_factory=dict)  # bytes of changelog files written per table
    rows_read: int = 0  # row images of captured tables decoded
    dropped: int = 0  # of those, dropped by the stream filter (a committed chunk snapshot covers them)
    read_seconds: float = 0.0  # the binlog reads (summed over the batch's partitions)
    seconds: float | None = None  # the whole batch in the sink, mirror refresh included (None: not known yet)
    mirror_refresh_seconds: float | None = None  # the batch hook: mirror refresh (and garbage collection)
    replay: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id, "rows": dict(self.rows), "bytes": dict(self.bytes),
            "rows_read": self.rows_read, "dropped": self.dropped, "read_seconds": round(self.read_seconds, 3),
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "mirror_refresh_seconds": (None if self.mirror_refresh_seconds is None
                                       else round(self.mirror_refresh_seconds, 3)),
            "replay": self.replay,
        }

    @classmethod
    def from_dict(cls, data: Any) -> BatchFigures | None:
        if not isinstance(data, dict) or not isinstance(data.get("batch_id"), int):
            return None
        return cls(data["batch_id"], _counts(data.get("rows")), _counts(data.get("bytes")),
                   int(_number(data.get("rows_read")) or 0), int(_number(data.get("dropped")) or 0),
                   _number(data.get("read_seconds")) or 0.0, _number(data.get("seconds")),
                   _number(data.get("mirror_refresh_seconds")), bool(data.get("replay")))


@dataclass(frozen=True)
class StreamTotals:
    """Running totals over every batch the stream committed into the output root."""

    batches: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    dropped: int = 0

    def plus(self, batch: BatchFigures, sign: int = 1) -> StreamTotals:
        """The totals with ``batch`` added (``sign=-1``: taken out, for a batch id that is replayed)."""
        def add(into: dict[str, int], more: dict[str, int]) -> dict[str, int]:
            out = dict(into)
            for table, n in more.items():
                out[table] = max(out.get(table, 0) + sign * n, 0)
            return out

        return StreamTotals(max(self.batches + sign, 0), add(self.rows, batch.rows),
                            add(self.bytes, batch.bytes), max(self.dropped + sign * batch.dropped, 0))

    def to_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "rows": dict(self.rows), "bytes": dict(self.bytes),
                "dropped": self.dropped}

    @classmethod
    def from_dict(cls, data: Any) -> StreamTotals | None:
        if not isinstance(data, dict):
            return None
        return cls(int(_number(data.get("batches")) or 0), _counts(data.get("rows")),
                   _counts(data.get("bytes")), int(_number(data.get("dropped")) or 0))
