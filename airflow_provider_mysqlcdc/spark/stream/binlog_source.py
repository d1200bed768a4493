"""The stream phase on Spark: a streaming data source (``spark.readStream.format("mysql_cdc_binlog")``).

Offsets are the engine's ``BinlogOffset`` dicts (versioned JSON, stored by Spark in its checkpoint). Every
batch end is a transaction boundary chosen on the driver (``binlog_admission``), so a batch is a fixed,
exact range of the binlog: Spark replays a planned batch after a crash with the same offsets, and the read
returns the same changes, so a restart re-emits nothing and skips nothing, wherever the previous run was
killed. A partition reads its range with the engine's ``ChangeStream`` (stream filter included, refreshed from
the chunk store at every read so reruns of chunks apply) and yields the changes as Arrow batches of the
generic stream schema (``stream_rows``), then one range row naming its offsets.

Parallel catch-up: a batch far behind the binlog end (at least twice ``catchup_partition_bytes``) is cut at
transaction boundaries into up to ``catchup_partitions`` contiguous ranges, decoded by as many tasks at once,
each a reader of its own ``server_id``. Every change keeps its binlog ``_position`` and the sink names files
by partition, so the batch's output is the same, in the same order, as one reader's; the batch's offsets do
not change, so resume stays exact. Once caught up, batches are small and read by one partition again. A
failover while a batch is read moves the batch as a whole, on the restart
(``engine/stream/batch_failover.py``).

The source keeps no position of its own (no ``commit``): Spark commits a batch to a source only when it plans
the next one, a batch behind the sink. Where the stream stands is what the sink committed (``status`` reads
its markers and ``_mysqlcdc_stream_progress.json``).

Options (all strings; none of them is secret):

``mysql_url``           mysql://user@host:port[?ssl_ca=..&server_id=5400-5499] -- *without* a password
``password_file``       file holding the password, read where Spark creates the source (the driver host);
                        otherwise the environment variable named by ``password_env`` (default
                        ``MYSQLCDC_MYSQL_PASSWORD``) in the Spark driver's environment
``tables``              comma-separated ``database.table`` names
``chunk_store``         chunk store URL (without a password; else ``MYSQLCDC_CHUNK_STORE_URL``)
``max_bytes_per_batch`` binlog bytes per micro-batch (default 64 MiB), rounded to a transaction boundary
``server_id_slot``      which replica ``server_id`` of the configured range the reader uses (default 0);
                        the other partitions of a parallel batch claim free ids of the range
``catchup_partitions``  at most this many partitions decode one batch (default 1: no parallel catch-up)
``catchup_partition_bytes`` binlog bytes a partition gets at least (default 4 MiB): a batch splits only when
                        it spans twice that
``rows_per_read``       row images a partition decodes and holds before it hands them on (default 100000):
                        bounds a partition's memory whatever its range
``read_timeout``        seconds a batch read may take (default 600)
``reconnect_timeout``   seconds to wait out a MySQL outage (restart, failover, network cut) before the query
                        fails (default 300); a part of a read cut by it is run again from its start
``starting_offset``     a new checkpoint's first offset (JSON of a ``BinlogOffset``; startup modes that take
                        no snapshot); without it, the smallest chunk HW

The password travels to executors inside the pickled source, never in options, plans or logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)

from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV, MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.common.gc_pause import gc_paused
from airflow_provider_mysqlcdc.engine.common.secrets import read_password_file, url_has_password
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset, OffsetFormatError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.table_names import (
    TablePattern,
    quote_table_name,
    split_table_list,
)
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.outages import (
    DEFAULT_RECONNECT_TIMEOUT_S,
    retry_while_unavailable,
)

if TYPE_CHECKING:
    import pyarrow as pa

# The heavy engine modules (chunk store, binlog reader, change stream) are imported where they are used: Spark
# unpickles this module in several short-lived Python workers per query start; most need none of them.

log = logging.getLogger(__name__)

SOURCE_NAME = "mysql_cdc_binlog"
DEFAULT_MAX_BYTES_PER_BATCH = 64 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 600.0
DEFAULT_CATCHUP_PARTITION_BYTES = 4 * 1024 * 1024
ROWS_PER_READ = 100_000  # row images a partition holds at once (about 100 MB of Python objects)
DRIVER_READ_TIMEOUT_S = 120.0  # the driver's MySQL session: a silent network is an outage after this long


@dataclass(frozen=True)
class BinlogSourceOptions:
    """The parsed options of the source (see the module docstring)."""

    mysql_url: str
    tables: tuple[TableId, ...]
    chunk_store: str
    password_file: str | None = None
    password_env: str = MYSQL_PASSWORD_ENV
    max_bytes_per_batch: int | None = DEFAULT_MAX_BYTES_PER_BATCH
    server_id_slot: int = 0
    catchup_partitions: int = 1
    catchup_partition_bytes: int = DEFAULT_CATCHUP_PARTITION_BYTES
    rows_per_read: int = ROWS_PER_READ
    read_timeout: float = DEFAULT_READ_TIMEOUT
    reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT_S
    starting_offset: BinlogOffset | None = None

    def __post_init__(self) -> None:
        if self.rows_per_read < 1:
            raise ConfigurationError(
                f"{SOURCE_NAME}: rows_per_read ({self.rows_per_read}) must be at least 1"
            )
        if self.catchup_partitions < 1 or self.catchup_partition_bytes < 1:
            raise ConfigurationError(
                f"{SOURCE_NAME}: catchup_partitions ({self.catchup_partitions}) and catchup_partition_bytes "
                f"({self.catchup_partition_bytes}) must be at least 1 (catchup_partitions=1 turns parallel "
                "catch-up off)"
            )

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> BinlogSourceOptions:
        def get(name: str) -> str | None:
            value = options.get(name)
            return value if value not in (None, "") else None

        url = get("mysql_url")
        if url is None:
            raise ConfigurationError(f"{SOURCE_NAME}: option mysql_url is required (mysql://user@host:port)")
        if url_has_password(url):
            raise ConfigurationError(
                f"{SOURCE_NAME}: mysql_url must not contain the password (options show up in plans, logs): "
                f"pass it in a file (option password_file) or in ${MYSQL_PASSWORD_ENV}"
            )
        tables = tuple(TablePattern.parse(t).exact for t in split_table_list(get("tables")))
        if not tables:
            raise ConfigurationError(
                f"{SOURCE_NAME}: option tables is required (database.table, comma-separated)"
            )
        store = get("chunk_store") or os.environ.get(CHUNK_STORE_URL_ENV)
        if not store:
            raise ConfigurationError(
                f"{SOURCE_NAME}: option chunk_store (or ${CHUNK_STORE_URL_ENV}) is required"
            )
        if get("chunk_store") and url_has_password(store):
            raise ConfigurationError(
                f"{SOURCE_NAME}: the chunk_store option must not contain a password: set "
                f"${CHUNK_STORE_URL_ENV} "
                "in the Spark driver's environment instead"
            )
        max_bytes = get("max_bytes_per_batch")
        try:
            return cls(
                mysql_url=url,
                tables=tables,
                chunk_store=store,
                password_file=get("password_file"),
                password_env=get("password_env") or MYSQL_PASSWORD_ENV,
                max_bytes_per_batch=DEFAULT_MAX_BYTES_PER_BATCH
                if max_bytes is None
                else (int(max_bytes) or None),
                server_id_slot=int(get("server_id_slot") or 0),
                catchup_partitions=int(get("catchup_partitions") or 1),
                catchup_partition_bytes=int(
                    get("catchup_partition_bytes") or DEFAULT_CATCHUP_PARTITION_BYTES
                ),
                rows_per_read=int(get("rows_per_read") or ROWS_PER_READ),
                read_timeout=float(get("read_timeout") or DEFAULT_READ_TIMEOUT),
                reconnect_timeout=float(get("reconnect_timeout") or DEFAULT_RECONNECT_TIMEOUT_S),
                starting_offset=_offset_option(get("starting_offset")),
            )
        except ValueError as exc:
            raise ConfigurationError(f"{SOURCE_NAME}: invalid numeric option: {exc}") from None

    def to_options(self) -> dict[str, str]:
        options = {
            "mysql_url": self.mysql_url,
            "tables": ",".join(quote_table_name(t) for t in self.tables),
            "chunk_store": self.chunk_store,
            "password_env": self.password_env,
            "max_bytes_per_batch": str(self.max_bytes_per_batch or 0),
            "server_id_slot": str(self.server_id_slot),
            "catchup_partitions": str(self.catchup_partitions),
            "catchup_partition_bytes": str(self.catchup_partition_bytes),
            "rows_per_read": str(self.rows_per_read),
            "read_timeout": str(self.read_timeout),
            "reconnect_timeout": str(self.reconnect_timeout),
        }
        if self.password_file:
            options["password_file"] = self.password_file
        if self.starting_offset is not None:
            options["starting_offset"] = json.dumps(self.starting_offset.to_dict())
        return options

    def resolve_password(self) -> str:
        if self.password_file:
            return read_password_file(self.password_file) or ""
        return os.environ.get(self.password_env, "")


def _offset_option(text: str | None) -> BinlogOffset | None:
    if text is None:
        return None
    try:
        return BinlogOffset.from_dict(json.loads(text))
    except (ValueError, TypeError, OffsetFormatError) as exc:
        raise ConfigurationError(
            f"{SOURCE_NAME}: option starting_offset is not a binlog offset: {exc}"
        ) from None


@dataclass
class BinlogPartition(InputPartition):
    """An exact binlog range of a batch: ``[start, end)`` as offset dicts; ``end`` is a transaction boundary.
    ``index`` of ``count``: its place among the batch's partitions (parallel catch-up), in binlog order."""

    start: dict
    end: dict
    index: int = 0
    count: int = 1
    batch_start: dict | None = None  # the batch's first offset (what a restart after a failover resumes from)

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.start, self.end))


class BinlogSource(DataSource):
    """Registered as ``mysql_cdc_binlog``; streaming reads only."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        self.config = BinlogSourceOptions.from_options(options)
        self._password = self.config.resolve_password()  # on the driver host; pickled to executors

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        from airflow_provider_mysqlcdc.engine.stream.transport import STREAM_SCHEMA_DDL

        return STREAM_SCHEMA_DDL

    def streamReader(self, schema: Any) -> BinlogMicroBatchStream:
        return BinlogMicroBatchStream(self.config, self._password)

    def __repr__(self) -> str:  # never the password
        return f"BinlogSource(tables={[str(t) for t in self.config.tables]})"


@dataclass
class BinlogMicroBatchStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The binlog source's PySpark ``DataSourceStreamReader`` (not mysql-replication's
    ``BinLogStreamReader``): driver side, offsets and admission control; executor side, ``read`` of one batch
    range."""

    config: BinlogSourceOptions
    password: str = field(repr=False)
    target: BinlogPosition | None = None  # AvailableNow: the binlog end observed at the start of the run
    _conn: Any = field(default=None, repr=False, compare=False)
    _server: Any = field(default=None, repr=False, compare=False)  # engine.source.server.ServerInfo, once
    _resolved: dict = field(default_factory=dict, repr=False, compare=False)  # see _resolve_offsets
    _marks: dict = field(default_factory=dict, repr=False, compare=False)  # see _cuts

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_conn"] = None  # a driver-side session never travels to executors
        return state

    # -- shared --

    def settings(self) -> MySQLSettings:
        return MySQLSettings.from_url(self.config.mysql_url, password=self.password)

    def _connection(self) -> Any:
        if self._conn is None:
            # Only short statements run here (binlog status, pages of SHOW BINLOG EVENTS): a reply that takes
            # minutes means a dead network path, which would otherwise hang the stream without an error.
            self._conn = connect(self.settings().with_database(None), read_timeout=DRIVER_READ_TIMEOUT_S,
                                 write_timeout=DRIVER_READ_TIMEOUT_S,
                                 timeout_setting="the stream driver's fixed session budget; the session is "
                                 "replaced and an outage waited out for reconnect_timeout")
        else:
            self._conn.ping(reconnect=True)
        return self._conn

    def _while_available(self, what: str, work: Any) -> Any:
        """Run ``work`` (on the driver's session or a new one), waiting out an outage of the server."""
        settings = self.settings()
        return retry_while_unavailable(
            work,
            what=what,
            where=f"{settings.host}:{settings.port}",
            budget_s=self.config.reconnect_timeout,
            on_retry=self.stop,
        )

    # -- driver: offsets --

    def initialOffset(self) -> dict:
        """The startup mode's offset, else min(HW) over the committed chunks of the captured tables
        (``ChangeStream.start_offset``)."""
        from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore

        if self.config.starting_offset is not None:
            log.info("stream starts at the startup offset %s", self.config.starting_offset)
            return self.config.starting_offset.to_dict()
        from airflow_provider_mysqlcdc.engine.stream.filter import stream_start

        with ChunkStore(self.config.chunk_store) as store:
            views = store.stream_view([str(t) for t in self.config.tables])
        start = BinlogOffset.at(stream_start(v.min_hw for v in views.values()))
        log.info("stream starts at min(HW) %s", start)
        return start.to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.config.max_bytes_per_batch:
            return ReadMaxBytes(self.config.max_bytes_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        status = self._while_available("reading the binlog end", self._binlog_status)
        self.target = BinlogPosition(status.file, status.position)
        log.info("available-now: catching up to %s", self.target)

    def _binlog_status(self) -> Any:
        from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info

        conn = self._connection()
        self._server = self._server or server_info(conn)
        return current_binlog_status(conn, self._server)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The next batch end, planned on the server the stream talks to now: ``start`` is first resolved
        to that server (``engine.stream.failover``: the same server, or a move by GTID position after a
        failover); the end records that server and its GTID position."""
        from airflow_provider_mysqlcdc.engine.stream.admission import next_batch_end
        from airflow_provider_mysqlcdc.engine.stream.failover import end_offset

        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        if not isinstance(limit, (ReadMaxBytes, ReadAllAvailable)):
            max_bytes = self.config.max_bytes_per_batch  # row/file limits do not apply to a binlog

        def plan() -> tuple[BinlogOffset, BinlogOffset | None, int]:
            conn = self._connection()
            identity, (begin,) = self._resolve_offsets(conn, start)
            admission = next_batch_end(conn, begin, max_bytes=max_bytes, until=self.target,
                                       mark_bytes=self._mark_bytes, settings=self.settings())
            if admission.end.position == begin.position:
                return begin, None, 0
            self._remember_marks(identity.token, begin.position, admission)
            return begin, end_offset(conn, admission.end, begin, identity), admission.bytes

        begin, end, size = self._while_available(
            f"planning the batch after {BinlogOffset.from_dict(start)}", plan
        )
        if end is None:
            return start
        log.info("next batch: %s -> %s (%d binlog bytes)", begin, end, size)
        return end.to_dict()

    def _resolve_offsets(self, conn: Any, *offsets: dict) -> tuple[Any, list[BinlogOffset]]:
        """The offsets as offsets of the server behind ``conn`` (``engine.stream.failover.resolve_offset``),
        and that server's identity. Memoized per offset and server: a move by GTID scans binlog events, and
        gives the same answer every time (so a replayed batch reads the same range), but need not run every
        trigger."""
        from airflow_provider_mysqlcdc.engine.stream.failover import resolve_offset, server_identity

        identity = server_identity(conn)
        out = []
        for offset in offsets:
            key = (json.dumps(offset, sort_keys=True), identity.token)
            resolved = self._resolved.get(key)
            if resolved is None:
                resolved = resolve_offset(conn, BinlogOffset.from_dict(offset), identity, self._table_views)
                if len(self._resolved) >= 64:
                    self._resolved.clear()
                self._resolved[key] = resolved
            out.append(resolved)
        return identity, out

    def _table_views(self) -> Any:
        from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore

        with ChunkStore(self.config.chunk_store) as store:
            return store.stream_view([str(t) for t in self.config.tables])

    def reportLatestOffset(self) -> dict | None:
        status = self._while_available("reading the binlog end", self._binlog_status)
        return BinlogOffset(status.file, status.position).to_dict()

    @property
    def _mark_bytes(self) -> int:
        """Marks fine enough to cut partitions of about equal size (within an eighth of one)."""
        return max(1, self.config.catchup_partition_bytes // 8)

    def _remember_marks(self, token: str, begin: BinlogPosition, admission: Any) -> None:
        if len(self._marks) >= 16:
            self._marks.clear()
        self._marks[(token, begin.key, admission.end.position.key)] = (admission.marks, admission.bytes)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The partitions of the batch ``[start, end)``, both resolved to the server the stream talks to now
        (a batch planned before a failover and replayed after it reads the same transactions there): one, or
        several contiguous ones cut at transaction boundaries when the batch is large (parallel catch-up)."""
        if BinlogOffset.from_dict(start).key == BinlogOffset.from_dict(end).key:
            return []

        from airflow_provider_mysqlcdc.engine.stream.failover import end_offset

        def plan() -> list[BinlogOffset]:
            conn = self._connection()
            identity, (first, last) = self._resolve_offsets(conn, start, end)
            if first.position == last.position:
                return []
            cuts = self._cuts(conn, identity.token, first, last)
            return [first, *(end_offset(conn, BinlogOffset.at(c), first, identity) for c in cuts), last]

        bounds = self._while_available(
            f"resolving the batch {BinlogOffset.from_dict(start)} -> {BinlogOffset.from_dict(end)}", plan
        )
        count = len(bounds) - 1
        if count > 1:
            log.info("batch %s -> %s: %d partitions read in parallel", bounds[0], bounds[-1], count)
        return [
            BinlogPartition(a.to_dict(), b.to_dict(), index=i, count=count, batch_start=bounds[0].to_dict())
            for i, (a, b) in enumerate(itertools.pairwise(bounds))
        ]

    def _cuts(self, conn: Any, token: str, first: BinlogOffset, last: BinlogOffset) -> list[BinlogPosition]:
        """Where a batch splits (``engine/stream/admission.cut_points``), from the marks its planning scan
        left; a batch planned by an earlier run (replayed after a restart) is scanned again."""
        from airflow_provider_mysqlcdc.engine.stream.admission import cut_points, next_batch_end

        low, high = self.settings().server_id_range
        # the stream's own id, plus the range's ids a reader can claim (the top one is mysqlcdc check's)
        partitions = min(self.config.catchup_partitions, 1 + max(0, high - low - 1))
        if partitions < 2:
            return []
        known = self._marks.get((token, first.position.key, last.position.key))
        if known is None:
            admission = next_batch_end(conn, first, max_bytes=None, until=last.position,
                                       mark_bytes=self._mark_bytes, settings=self.settings())
            if admission.end.position != last.position:
                return []  # not the planned end (cannot happen on a healthy binlog): read it as one range
            known = (admission.marks, admission.bytes)
        marks, total = known
        return cut_points(marks, total, partitions=partitions, min_bytes=self.config.catchup_partition_bytes)

    def stop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001, S110 - closing a dead session
                pass
            self._conn = None

    # -- executor: one batch --

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id, claimed_server_id
        from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
        from airflow_provider_mysqlcdc.engine.stream.batch_failover import (
            failover_during_batch,
            server_changed,
            server_changed_after_error,
        )
        from airflow_provider_mysqlcdc.engine.stream.change_stream import ChangeStream
        from airflow_provider_mysqlcdc.engine.stream.transport import ReadFigures, range_batch, stream_batches

        assert isinstance(partition, BinlogPartition)
        start, end = BinlogOffset.from_dict(partition.start), BinlogOffset.from_dict(partition.end)
        if not end.at_boundary:
            raise ConfigurationError(
                f"batch end {end} is not a transaction boundary: the checkpoint is corrupt"
            )
        settings = self.settings()
        captured: list[TableId] = []  # fixed at the partition's first read

        def failover(planned_on: str | None, now: Any) -> Exception:
            """The error of a read that may not move to the server the URL reaches ``now``."""
            batch_start = partition.batch_start or (partition.start if partition.index == 0 else None)
            return failover_during_batch(
                where=f"{settings.host}:{settings.port}", planned_on=planned_on or "?", now=now,
                batch_id=_batch_id(), part=(start, end), partition=(partition.index, partition.count),
                batch_start=BinlogOffset.from_dict(batch_start) if batch_start else None,
            )

        def read_range(begin: BinlogOffset) -> Any:
            # Nothing of a part is yielded before the part is read, so a part cut by an outage runs again.
            with ChunkStore(self.config.chunk_store) as store:
                # The server behind the URL may have changed since the driver planned the batch (a failover
                # behind a virtual IP): a batch read by this task alone that has handed on nothing yet moves
                # to it by GTID position; any other read stops (engine/stream/batch_failover.py).
                movable = partition.count == 1 and begin == start
                first, last = _on_server_read(settings, store, self.config.tables, begin, end,
                                              movable=movable, failover=failover)
                with contextlib.ExitStack() as claims:
                    # The stream's own slot reads the first partition; the others of a parallel batch claim
                    # free ids (two readers with one server_id make the server drop one of them).
                    server_id = (
                        allocate_server_id(settings, self.config.server_id_slot)
                        if partition.index == 0
                        else claims.enter_context(claimed_server_id(settings, prefer=partition.index))
                    )
                    # A fresh ChangeStream loads the chunk HWs now: reruns committed since the last batch
                    # apply; and the pipeline's tables: one planned since is captured (its unread chunks emit
                    # all), a removed one is not.
                    captured[:] = captured or captured_tables(store, self.config.tables)
                    stream = ChangeStream(settings, store, list(captured), server_id)
                    try:
                        batch = stream.read(
                            first, last.position, max_rows=self.config.rows_per_read,
                            timeout=self.config.read_timeout, file_number_base=last.file_number_base,
                        )
                    except Exception as exc:
                        # the binlog dump has a connection of its own: it may have reached the new server
                        now = server_changed_after_error(settings, first.server)
                        if now is not None:
                            raise failover(first.server, now) from exc
                        raise
                    finally:
                        stream.close()
                    now = server_changed(settings, first.server)  # (unreachable: the part is read again)
                    if now is not None:
                        raise failover(first.server, now)
                    return first, last, batch, {str(t): s for t, s in stream.schemas.items()}

        # The range is read in parts of at most rows_per_read row images, each yielded before the next is
        # read: a partition's memory does not grow with its range. Each part resumes exactly where the last
        # one ended (inside a transaction too), on the server that one was read from.
        begin, previous, first, rows, emitted, seconds = start, start, None, 0, 0, 0.0
        dropped, last_event_at = 0, None
        while True:
            part_first, last, batch, known = retry_while_unavailable(
                functools.partial(read_range, begin),
                what=f"reading the batch {begin} -> {end}",
                where=f"{settings.host}:{settings.port}",
                budget_s=self.config.reconnect_timeout,
            )
            first = first or part_first
            rows, emitted = rows + batch.rows_read, emitted + batch.emitted
            seconds += batch.seconds
            dropped += batch.dropped
            last_event_at = batch.last_event_at or last_event_at
            with gc_paused():  # the part's Arrow batches, built without the collector (common/gc_pause.py)
                arrow = list(stream_batches(rows=batch.rows, schemas=batch.schemas,
                                            schema_changes=batch.schema_changes, table_schemas=known))
            yield from arrow
            reached = dataclasses.replace(batch.end, server=part_first.server, gtid_position=None,
                                          file_number_base=part_first.file_number_base)
            # a part that read fewer row images than it may hold read to the range's end
            if batch.rows_read < self.config.rows_per_read or (
                reached.at_boundary and reached.position == last.position
            ):
                break
            if reached.key <= max(part_first.key, previous.key):  # never loop on a read that does not advance
                raise CdcError(
                    f"the binlog read from {part_first} made no progress towards {last}: the binlog does not "
                    "match the batch's offsets; restart the stream (it replays the batch from its start) and "
                    "report this if it happens again"
                )
            previous = begin = reached
        log.info(
            "read %s -> %s (partition %d of %d): %d row images in %.1fs, %d emitted",
            first, last, partition.index + 1, partition.count, rows, seconds, emitted,
        )
        figures = ReadFigures(last_event_at.isoformat() if last_event_at else None, rows, dropped, seconds)
        yield range_batch(first.to_dict(), last.to_dict(), figures)


def _batch_id() -> str | None:
    """The micro-batch a read task belongs to (Spark passes it to tasks as a local property)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.getLocalProperty("streaming.sql.batchId") if context is not None else None


def captured_tables(store: Any, configured: Sequence[TableId]) -> list[TableId]:
    """The tables a batch captures: the stream's own, and every table planned into its chunk store since (the
    pipeline's registry), less those removed from the pipeline.

    Read by the executor after the driver fixed the batch's end: a table planned after that point is
    captured from the next batch on, and every change it misses here lies before its chunks' HWs."""
    entries = store.table_entries()
    active = {TableId.parse(e.table) for e in entries if e.active}
    removed = {TableId.parse(e.table) for e in entries if not e.active}
    return sorted((set(configured) - removed) | active)


def _on_server_read(
    settings: MySQLSettings, store: Any, tables: Sequence[TableId], start: BinlogOffset, end: BinlogOffset,
    *, movable: bool, failover: Callable[[str | None, Any], Exception],
) -> tuple[BinlogOffset, BinlogOffset]:
    """A batch's range as offsets of the server a read reaches (``engine.stream.failover.resolve_offset``):
    the planned range as it is on the server the driver planned it on, else (``movable``) moved there by GTID
    position; a range that may not move raises ``failover(planned_on, now)``."""
    from airflow_provider_mysqlcdc.engine.stream.failover import resolve_offset, server_identity

    def views() -> Any:
        return store.stream_view([str(t) for t in tables])

    with connect(settings.with_database(None)) as conn:
        identity = server_identity(conn)
        if not movable and start.server is not None and not identity.same_server(start.server):
            raise failover(start.server, identity)
        return (
            resolve_offset(conn, start, identity, views),
            resolve_offset(conn, end, identity, views),
        )
