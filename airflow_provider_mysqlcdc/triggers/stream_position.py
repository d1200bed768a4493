"""Waiting for the stream to pass a binlog position, in the triggerer: no worker slot is held.

The verify task takes its source digests, then defers on this trigger until the stream has committed past the
highest of their positions: it reads the stream's progress record in the output root
(``_mysqlcdc_stream_progress.json``, written at every committed batch) every ``poll_interval`` seconds and
fires ``passed`` once its end offset is at or after the position for every table, ``stalled`` once the record
has not changed for ``stall_after`` seconds (an idle stream rests before events that change no data, which
only the server can tell: the task asks it, and defers again if the stream is really behind), or ``timeout``
at ``deadline``. It needs no connection: no password in its arguments.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

PASSED, STALLED, TIMEOUT = "passed", "stalled", "timeout"


class StreamPositionTrigger(BaseTrigger):
    """Fires ``{"outcome", "detail", "reached", "echo"}``: ``outcome`` is ``passed``, ``stalled`` or
    ``timeout``; ``reached`` the stream's committed position (None: no stream covers the tables).

    :param output_path: the output root the stream writes.
    :param tables: ``db.table`` names the stream must capture.
    :param position: ``mysql-bin.000003:1234``: the position the stream's end offset must reach.
    :param deadline: when to give up (seconds since the epoch).
    :param stall_after: seconds without a new committed batch, while behind, before firing ``stalled``.
    :param poll_interval: seconds between looks at the progress record.
    :param echo: returned as it is in the event (``"echo"``): what the task needs back when it resumes.
    """

    def __init__(self, *, output_path: str, tables: Sequence[str], position: str, deadline: float,
                 stall_after: float = 30.0, poll_interval: float = 2.0, echo: Any = None) -> None:
        super().__init__()
        self.output_path, self.tables, self.position = output_path, list(tables), position
        self.deadline, self.stall_after = float(deadline), float(stall_after)
        self.poll_interval, self.echo = float(poll_interval), echo

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "output_path": self.output_path, "tables": self.tables, "position": self.position,
            "deadline": self.deadline, "stall_after": self.stall_after, "poll_interval": self.poll_interval,
            "echo": self.echo})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        wanted = BinlogPosition.parse(self.position)
        seen: Any = None
        changed_at = time.monotonic()
        while True:
            outcome, reached, record = await asyncio.to_thread(self._look, wanted)
            if record != seen:
                seen, changed_at = record, time.monotonic()
                self.log.info("the stream has committed up to %s; waiting for %s", reached or "(nothing yet)",
                              wanted)
            if outcome is None and reached is not None and time.monotonic() - changed_at >= self.stall_after:
                outcome = STALLED
            if outcome is None and time.time() >= self.deadline:
                outcome = TIMEOUT
            if outcome is not None:
                detail = {
                    PASSED: f"the stream has committed past {wanted} (at {reached})",
                    STALLED: f"the stream rests at {reached} for {self.stall_after:g} s, before {wanted}",
                    TIMEOUT: f"the stream has committed up to {reached or 'nothing'}, not past {wanted}"}
                yield TriggerEvent({"outcome": outcome, "detail": detail[outcome],
                                    "reached": None if reached is None else str(reached), "echo": self.echo})
                return
            await asyncio.sleep(self.poll_interval)

    def _look(self, wanted: BinlogPosition) -> tuple[str | None, BinlogPosition | None, Any]:
        """(``passed`` or None, the position the stream reached for all tables or None, what changed)."""
        progress = read_stream_progress(self.output_path)
        if progress is None or not all(progress.covers(t) for t in self.tables):
            return None, None, None if progress is None else progress.batch_id
        reached = progress.end_offset.ordered_position
        record = (progress.batch_id, str(reached))
        return (PASSED if reached >= wanted else None), reached, record
