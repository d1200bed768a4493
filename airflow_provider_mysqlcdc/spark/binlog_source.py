"""The stream phase on Spark: a streaming data source (``spark.readStream.format("mysql_cdc_binlog")``).

Offsets are the engine's ``BinlogOffset`` dicts (versioned JSON, stored by Spark in its checkpoint). Every
batch end is a transaction boundary chosen on the driver (``binlog_admission``), so a batch is a fixed,
exact range of the binlog: Spark replays a planned batch after a crash with the same offsets, and the read
returns the same changes, so a restart re-emits nothing and skips nothing, wherever the previous run was
killed. One partition per batch reads the range with the engine's ``ChangeStream`` (stream filter included,
refreshed from the chunk store at every read so reruns of chunks apply) and yields the changes as Arrow
batches of the generic stream schema (``stream_rows``), then one range row naming the batch's offsets.

Options (all strings; none of them is secret):

``mysql_url``           mysql://user@host:port[?ssl_ca=..&server_id=5400-5499] -- *without* a password
``password_file``       file holding the password, read where Spark creates the source (the driver host);
                        otherwise the environment variable named by ``password_env`` (default
                        ``MYSQLCDC_MYSQL_PASSWORD``) in the Spark driver's environment
``tables``              comma-separated ``database.table`` names
``chunk_store``         chunk store URL (without a password; else ``MYSQLCDC_CHUNK_STORE_URL``)
``max_bytes_per_batch`` binlog bytes per micro-batch (default 64 MiB), rounded to a transaction boundary
``server_id_slot``      which replica ``server_id`` of the configured range the reader uses (default 0)
``read_timeout``        seconds a batch read may take (default 600)
``reconnect_timeout``   seconds to wait out a MySQL outage (restart, failover, network cut) before the query
                        fails (default 300); a read cut by it is run again from its start
``checkpoint``          where the stream writes its committed position (``mysqlcdc/stream_position.json``)

The password travels to executors inside the pickled source, never in options, plans or logs.
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)

from ..engine.connection import PASSWORD_ENV, MySQLSettings, connect
from ..engine.errors import ConfigurationError
from ..engine.offsets import BinlogOffset
from ..engine.outages import DEFAULT_RECONNECT_TIMEOUT_S, retry_while_unavailable
from ..engine.positions import BinlogPosition
from ..engine.tables import TableId

if TYPE_CHECKING:
    import pyarrow as pa

# The heavy engine modules (chunk store, binlog reader, change stream) are imported where they are used: Spark
# unpickles this module in several short-lived Python workers per query start; most need none of them.

log = logging.getLogger(__name__)

SOURCE_NAME = "mysql_cdc_binlog"
CHUNK_STORE_URL_ENV = "MYSQLCDC_CHUNK_STORE_URL"
DEFAULT_MAX_BYTES_PER_BATCH = 64 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 600.0
POSITION_FILE = "mysqlcdc/stream_position.json"


def url_has_password(url: str) -> bool:
    return "://" in url and urlsplit(url).password is not None


def read_password_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the MySQL password file {path!r}: {exc.strerror}") from None


@dataclass(frozen=True)
class BinlogSourceOptions:
    """The parsed options of the source (see the module docstring)."""

    mysql_url: str
    tables: tuple[TableId, ...]
    chunk_store: str
    password_file: str | None = None
    password_env: str = PASSWORD_ENV
    max_bytes_per_batch: int | None = DEFAULT_MAX_BYTES_PER_BATCH
    server_id_slot: int = 0
    read_timeout: float = DEFAULT_READ_TIMEOUT
    reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT_S
    checkpoint: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "BinlogSourceOptions":
        def get(name: str) -> str | None:
            value = options.get(name)
            return value if value not in (None, "") else None

        url = get("mysql_url")
        if url is None:
            raise ConfigurationError(f"{SOURCE_NAME}: option mysql_url is required (mysql://user@host:port)")
        if url_has_password(url):
            raise ConfigurationError(
                f"{SOURCE_NAME}: mysql_url must not contain the password (options show up in plans, logs): "
                f"pass it in a file (option password_file) or in ${PASSWORD_ENV}"
            )
        tables = tuple(TableId.parse(t.strip()) for t in (get("tables") or "").split(",") if t.strip())
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
                password_env=get("password_env") or PASSWORD_ENV,
                max_bytes_per_batch=DEFAULT_MAX_BYTES_PER_BATCH
                if max_bytes is None
                else (int(max_bytes) or None),
                server_id_slot=int(get("server_id_slot") or 0),
                read_timeout=float(get("read_timeout") or DEFAULT_READ_TIMEOUT),
                reconnect_timeout=float(get("reconnect_timeout") or DEFAULT_RECONNECT_TIMEOUT_S),
                checkpoint=get("checkpoint"),
            )
        except ValueError as exc:
            raise ConfigurationError(f"{SOURCE_NAME}: invalid numeric option: {exc}") from None

    def to_options(self) -> dict[str, str]:
        options = {
            "mysql_url": self.mysql_url,
            "tables": ",".join(str(t) for t in self.tables),
            "chunk_store": self.chunk_store,
            "password_env": self.password_env,
            "max_bytes_per_batch": str(self.max_bytes_per_batch or 0),
            "server_id_slot": str(self.server_id_slot),
            "read_timeout": str(self.read_timeout),
            "reconnect_timeout": str(self.reconnect_timeout),
        }
        if self.password_file:
            options["password_file"] = self.password_file
        if self.checkpoint:
            options["checkpoint"] = self.checkpoint
        return options

    def resolve_password(self) -> str:
        if self.password_file:
            return read_password_file(self.password_file)
        return os.environ.get(self.password_env, "")


@dataclass
class BinlogPartition(InputPartition):
    """One batch's exact binlog range: ``[start, end)`` as offset dicts; ``end`` is a transaction boundary."""

    start: dict
    end: dict

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
        from .stream_rows import STREAM_SCHEMA_DDL

        return STREAM_SCHEMA_DDL

    def streamReader(self, schema: Any) -> "BinlogStreamReader":
        return BinlogStreamReader(self.config, self._password)

    def __repr__(self) -> str:  # never the password
        return f"BinlogSource(tables={[str(t) for t in self.config.tables]})"


@dataclass
class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side: offsets and admission control; executor side: ``read`` of one batch range."""

    config: BinlogSourceOptions
    password: str = field(repr=False)
    target: BinlogPosition | None = None  # AvailableNow: the binlog end observed at the start of the run
    _conn: Any = field(default=None, repr=False, compare=False)
    _server: Any = field(default=None, repr=False, compare=False)  # engine.server.ServerInfo, once

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_conn"] = None  # a driver-side session never travels to executors
        return state

    # -- shared --

    def settings(self) -> MySQLSettings:
        return MySQLSettings.from_url(self.config.mysql_url, password=self.password)

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = connect(self.settings().with_database(None))
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
        """min(HW) over the committed chunks of the captured tables (``ChangeStream.start_offset``)."""
        from ..engine.chunk_store import ChunkStore
        from ..engine.stream_filter import stream_start

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
        from ..engine.server import current_binlog_status, server_info

        conn = self._connection()
        self._server = self._server or server_info(conn)
        return current_binlog_status(conn, self._server)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        from .binlog_admission import next_batch_end

        begin = BinlogOffset.from_dict(start)
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        if not isinstance(limit, (ReadMaxBytes, ReadAllAvailable)):
            max_bytes = self.config.max_bytes_per_batch  # row/file limits do not apply to a binlog
        admission = self._while_available(
            f"planning the batch after {begin}",
            lambda: next_batch_end(self._connection(), begin, max_bytes=max_bytes, until=self.target),
        )
        if admission.end.key == begin.key:
            return start
        log.info("next batch: %s -> %s (%d binlog bytes)", begin, admission.end, admission.bytes)
        return admission.end.to_dict()

    def reportLatestOffset(self) -> dict | None:
        status = self._while_available("reading the binlog end", self._binlog_status)
        return BinlogOffset(status.file, status.position).to_dict()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if BinlogOffset.from_dict(start).key == BinlogOffset.from_dict(end).key:
            return []
        return [BinlogPartition(start, end)]

    def commit(self, end: dict) -> None:
        """Spark finished every batch up to ``end``: record the stream's position for ``status``."""
        if self.config.checkpoint:
            from ..engine.output_layout import write_json_atomic

            write_json_atomic(
                posixpath.join(self.config.checkpoint.rstrip("/"), POSITION_FILE),
                {"offset": end, "committed_at": datetime.now(timezone.utc).isoformat()},
            )

    def stop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a dead session
                pass
            self._conn = None

    # -- executor: one batch --

    def read(self, partition: InputPartition) -> Iterator["pa.RecordBatch"]:
        from ..engine.binlog_reader import allocate_server_id
        from ..engine.change_stream import ChangeStream
        from ..engine.chunk_store import ChunkStore
        from .stream_rows import range_batch, stream_batches

        assert isinstance(partition, BinlogPartition)
        start, end = BinlogOffset.from_dict(partition.start), BinlogOffset.from_dict(partition.end)
        if not end.at_boundary:
            raise ConfigurationError(
                f"batch end {end} is not a transaction boundary: the checkpoint is corrupt"
            )
        settings = self.settings()

        def read_range() -> Any:
            # Nothing is yielded before the whole range is read, so a read cut by an outage simply runs again.
            with ChunkStore(self.config.chunk_store) as store:
                # A fresh ChangeStream loads the chunk HWs now: reruns committed since the last batch apply.
                stream = ChangeStream(
                    settings,
                    store,
                    list(self.config.tables),
                    allocate_server_id(settings, self.config.server_id_slot),
                )
                try:
                    return stream.read(start, end.position, timeout=self.config.read_timeout)
                finally:
                    stream.close()

        batch = retry_while_unavailable(
            read_range,
            what=f"reading the batch {start} -> {end}",
            where=f"{settings.host}:{settings.port}",
            budget_s=self.config.reconnect_timeout,
        )
        log.info("read %s -> %s: %d row images, %d emitted", start, end, batch.rows_read, len(batch.records))
        yield from stream_batches(batch.records)
        yield range_batch(partition.start, partition.end)
