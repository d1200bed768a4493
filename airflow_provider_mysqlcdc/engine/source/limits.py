"""What a snapshot may ask of the source server: concurrent chunk reads, rows per second, time per query.

A snapshot fans out over every Spark executor of every chunk group running at once; without limits it can take
all of a production server's I/O. Three limits, each per *server*:

* ``max_concurrent_reads`` (default 4): a chunk read first takes one of that many slots, a
  ``GET_LOCK('mysqlcdc.read.<n>', 0)`` on its own session (no privilege needed; released when the session
  ends, also when the task dies). Reads beyond it wait, polling with backoff, up to ``slot_wait_timeout_s``.
* ``rows_per_second`` (default none): the server-wide budget; each read streams at most
  ``rows_per_second / max_concurrent_reads`` rows per second, so all reads together stay within it.
* ``query_timeout_s`` (default 600 s): the chunk SELECT's server-side time limit (MariaDB
  ``max_statement_time``, MySQL ``max_execution_time``), so a read can never run away on the server.
"""
from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.common.retry import Backoff

log = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENT_READS = 4
DEFAULT_QUERY_TIMEOUT_S = 600.0
DEFAULT_SLOT_WAIT_TIMEOUT_S = 3600.0
QUERY_TIMEOUT_ERRORS = (1969, 3024)  # MariaDB max_statement_time, MySQL max_execution_time exceeded


class SlotWaitTimeout(CdcError):
    """Every read slot stayed taken for longer than the wait allows."""


@dataclass(frozen=True)
class SourceLimits:
    max_concurrent_reads: int | None = DEFAULT_MAX_CONCURRENT_READS  # None or 0: no cap
    rows_per_second: float | None = None  # None or 0: no rate limit
    query_timeout_s: float | None = DEFAULT_QUERY_TIMEOUT_S  # None or 0: no time limit
    slot_wait_timeout_s: float = DEFAULT_SLOT_WAIT_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("max_concurrent_reads", "rows_per_second", "query_timeout_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(f"{name} must be positive (or 0 for no limit), got {value}")

    @property
    def per_read_rows_per_second(self) -> float | None:
        if not self.rows_per_second:
            return None
        return self.rows_per_second / (self.max_concurrent_reads or 1)

    def to_options(self) -> dict[str, str]:
        """As Spark data source options (strings; empty: no limit)."""
        return {
            "max_concurrent_reads": str(self.max_concurrent_reads or 0),
            "rows_per_second": str(self.rows_per_second or 0),
            "query_timeout": str(self.query_timeout_s or 0),
        }

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> SourceLimits:
        def number(key: str, default: float | None) -> float | None:
            value = options.get(key)
            if value in (None, ""):
                return default
            try:
                return float(value)
            except (TypeError, ValueError):
                raise ConfigurationError(f"{key} must be a number, got {value!r}") from None

        cap = number("max_concurrent_reads", DEFAULT_MAX_CONCURRENT_READS)
        return cls(
            max_concurrent_reads=int(cap) if cap else None,
            rows_per_second=number("rows_per_second", None) or None,
            query_timeout_s=number("query_timeout", DEFAULT_QUERY_TIMEOUT_S) or None,
        )


@contextlib.contextmanager
def read_slot(
    conn: Any, limits: SourceLimits, what: str, *, sleep: Callable[[float], None] = time.sleep
) -> Iterator[int | None]:
    """Hold one of the server's ``max_concurrent_reads`` slots on ``conn`` (the read's own session)."""
    cap = limits.max_concurrent_reads
    if not cap:
        yield None
        return
    backoff = Backoff(limits.slot_wait_timeout_s, first_delay_s=0.05, max_delay_s=2.0, jitter=(0.5, 1.5),
                      sleep=sleep)
    waited = False
    first = random.randrange(cap)  # readers start at different slots: fewer failed tries
    while True:
        with conn.cursor() as cur:
            for i in range(cap):
                slot = (first + i) % cap
                cur.execute("SELECT GET_LOCK(%s, 0)", (f"mysqlcdc.read.{slot}",))
                if cur.fetchone()[0] == 1:
                    if waited:
                        log.info("%s: got read slot %d of %d", what, slot, cap)
                    try:
                        yield slot
                    finally:
                        with contextlib.suppress(Exception):  # a dead session has released it already
                            cur.execute("SELECT RELEASE_LOCK(%s)", (f"mysqlcdc.read.{slot}",))
                    return
        if backoff.exhausted():
            raise SlotWaitTimeout(
                f"{what}: all {cap} chunk read slots of the server stayed in use for "
                f"{limits.slot_wait_timeout_s:.0f}s (max_concurrent_reads={cap}); raise "
                "max_concurrent_reads, or run fewer chunk groups at once"
            )
        if not waited:
            log.info("%s: waiting for one of the server's %d chunk read slots (max_concurrent_reads)",
                     what, cap)
            waited = True
        backoff.wait()


class RateLimiter:
    """Keeps a read at or under ``rows_per_second`` on average since it started (sleeps when ahead)."""

    def __init__(
        self, rows_per_second: float | None, *, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate, self.clock, self.sleep = rows_per_second, clock, sleep
        self.started = clock()
        self.rows = 0

    def take(self, rows: int) -> None:
        self.rows += rows
        if not self.rate:
            return
        ahead = self.rows / self.rate - (self.clock() - self.started)
        if ahead > 0:
            self.sleep(ahead)


def set_query_timeout(conn: Any, flavor: str, seconds: float | None) -> None:
    """The session's per-statement time limit (reads only on MySQL); None or 0 turns it off."""
    with conn.cursor() as cur:
        if flavor == "mariadb":
            cur.execute("SET SESSION max_statement_time = %s", (float(seconds or 0),))
        else:
            cur.execute("SET SESSION max_execution_time = %s", (int((seconds or 0) * 1000),))


def is_query_timeout(exc: BaseException) -> bool:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return bool(args) and isinstance(args[0], int) and args[0] in QUERY_TIMEOUT_ERRORS
