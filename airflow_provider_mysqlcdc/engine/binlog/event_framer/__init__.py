"""The compiled reader of the binlog event stream: packets cut into events, and their headers and the fields
of the event types the reader acts on parsed, in C (``_frames.pyx``), straight off mysql-replication's
replication connection (``stream.FramedStream``).

mysql-replication keeps the connection, the replication protocol, its reconnects, and every event type the
framer does not parse (its objects reach the event loop as before). ``$MYSQLCDC_ROWS_DECODER`` chooses, as for
the rows decoder: ``compiled`` (default) and ``compare`` read through the framer, ``compare`` also parsing
every framed event with mysql-replication and stopping at the first difference (``compare.check_framed``);
``python`` reads with mysql-replication alone. Without the built extension (``framer_available()`` False,
said once per process in the log) every read takes mysql-replication's path.
"""
from __future__ import annotations

from typing import Any

from airflow_provider_mysqlcdc.engine.binlog.event_framer import compiled
from airflow_provider_mysqlcdc.engine.binlog.event_framer.compare import FramerMismatch, check_framed
from airflow_provider_mysqlcdc.engine.binlog.event_framer.stream import FramedStream

PASS_NONE, PASS_OVER, PASS_MARK = 0, 1, 2  # ``_frames.Framer.pass_over``: none, pass over, mark (compare)
PASS_BOUNDARY = 3  # ``_frames.Framer.pass_over``: only the events of transaction boundaries (a boundary scan)

FramedEvent: Any
if (_module := compiled.loaded()) is not None:
    FramedEvent = _module.FramedEvent
else:  # nothing is ever framed: a class no event is an instance of
    class FramedEvent:  # type: ignore[no-redef]
        """Stands in for the compiled class where it was not built."""


def framer_available() -> bool:
    """Whether the compiled framer is built and loaded (if not, the log says so once per process)."""
    return compiled.module() is not None


__all__ = ["PASS_BOUNDARY", "PASS_MARK", "PASS_NONE", "PASS_OVER", "FramedEvent", "FramedStream",
           "FramerMismatch", "check_framed", "framer_available"]
