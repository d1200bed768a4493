"""The options of one snapshot job (one table, one plan generation, some chunk ids), as Spark sees them.

Spark data source options are strings and show up in query plans and the UI, so they never carry a secret:
``mysql_url`` must not contain a password (executors take it from ``$MYSQLCDC_MYSQL_PASSWORD`` or from the
file named by ``password_file``), and a chunk store URL with a password must come from
``$MYSQLCDC_CHUNK_STORE_URL`` instead of the ``chunk_store`` option. The password is resolved on the host
that connects, at the moment it connects; it is never pickled into tasks.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from airflow_provider_mysqlcdc.engine.chunks.groups import format_chunk_ids, parse_chunk_ids
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV, MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.common.secrets import read_password_file, url_has_password
from airflow_provider_mysqlcdc.engine.common.text import split_commas
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import DEFAULT_BATCH_ROWS, ChunkReadOptions
from airflow_provider_mysqlcdc.engine.source.connection import READ_VIEW_MODES, MySQLSettings
from airflow_provider_mysqlcdc.engine.source.limits import SourceLimits

DEFAULT_ROWS_PER_FILE = 1_000_000
DEFAULT_READER_SLOT_BASE = 1  # slot 0 (marker row id and binlog server_id) is left to the stream


@dataclass(frozen=True)
class SnapshotOptions:
    """Everything a chunk read and its commit need, minus secrets. ``chunk_ids`` None means every chunk."""

    mysql_url: str
    table: str
    output: str
    chunk_store: str | None = None  # None: $MYSQLCDC_CHUNK_STORE_URL on the driver
    generation: int | None = None  # None: the table's latest plan
    chunk_ids: tuple[int, ...] | None = None
    password_file: str | None = None
    read_view_mode: str = "auto"
    watermark_table: str | None = None
    skip_backfill: bool = False
    batch_rows: int = DEFAULT_BATCH_ROWS
    rows_per_file: int = DEFAULT_ROWS_PER_FILE
    exclude_columns: tuple[str, ...] = ()
    run_id: str | None = None
    reader_slot_base: int = DEFAULT_READER_SLOT_BASE
    backfill_timeout: float = 120.0
    attempts: dict[int, int] = field(default_factory=dict)  # chunk id -> chunk store attempt being run
    limits: SourceLimits = field(default_factory=SourceLimits)  # concurrent reads, rows/s, query time
    test_fault: str | None = None  # tests only: "raise|exit:<chunk id>:<rows>" fails a chunk's write there

    def __post_init__(self) -> None:
        if url_has_password(self.mysql_url):
            raise ConfigurationError(
                "mysql_url must not contain a password (Spark options show in plans and logs): set "
                f"${MYSQL_PASSWORD_ENV} on the driver and executors, or pass password_file"
            )
        if self.chunk_store and url_has_password(self.chunk_store):
            raise ConfigurationError(
                "the chunk store URL must not contain a password in Spark options: set "
                f"${CHUNK_STORE_URL_ENV} on the driver instead"
            )
        TableId.parse(self.table)
        if self.read_view_mode not in READ_VIEW_MODES:
            raise ConfigurationError(
                f"read_view_mode must be one of {READ_VIEW_MODES}, got {self.read_view_mode!r}"
            )
        if not self.output:
            raise ConfigurationError("output (the root path of the snapshot output) is required")
        if self.batch_rows < 1 or self.rows_per_file < 1:
            raise ConfigurationError("batch_rows and rows_per_file must be positive")

    @property
    def table_id(self) -> TableId:
        return TableId.parse(self.table)

    def store_url(self) -> str:
        url = self.chunk_store or os.environ.get(CHUNK_STORE_URL_ENV)
        if not url:
            raise ConfigurationError(f"no chunk store: pass chunk_store or set ${CHUNK_STORE_URL_ENV}")
        return url

    def settings(self) -> MySQLSettings:
        """Connection settings with the password from ``password_file`` or the environment of *this* host."""
        return MySQLSettings.from_url(self.mysql_url, password=read_password_file(self.password_file))

    def read_options(self, slot: int) -> ChunkReadOptions:
        """``slot`` tells concurrent readers apart (watermark row id, binlog server_id of the backfill)."""
        return ChunkReadOptions(
            mode=self.read_view_mode,  # type: ignore[arg-type]
            watermark_table=TableId.parse(self.watermark_table) if self.watermark_table else None,
            skip_backfill=self.skip_backfill, batch_rows=self.batch_rows, marker_slot=slot,
            backfill_timeout=self.backfill_timeout, limits=self.limits,
        )

    def with_(self, **changes: object) -> SnapshotOptions:
        return replace(self, **changes)  # type: ignore[arg-type]

    # --- Spark options (strings) ----------------------------------------------------------------------------

    def to_options(self) -> dict[str, str]:
        opts = {
            "mysql_url": self.mysql_url, "table": self.table, "output": self.output,
            "read_view_mode": self.read_view_mode, "skip_backfill": str(self.skip_backfill).lower(),
            "batch_rows": str(self.batch_rows), "rows_per_file": str(self.rows_per_file),
            "reader_slot_base": str(self.reader_slot_base), "backfill_timeout": str(self.backfill_timeout),
            **self.limits.to_options(),
        }
        optional = {
            "chunk_store": self.chunk_store, "password_file": self.password_file,
            "watermark_table": self.watermark_table, "run_id": self.run_id, "test_fault": self.test_fault,
            "generation": None if self.generation is None else str(self.generation),
            "chunk_ids": None if self.chunk_ids is None else format_chunk_ids(self.chunk_ids),
            "exclude_columns": ",".join(self.exclude_columns) or None,
            "attempts": (json.dumps({str(k): v for k, v in sorted(self.attempts.items())}) if self.attempts
                         else None),
        }
        opts.update({k: v for k, v in optional.items() if v is not None})
        return opts

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SnapshotOptions:
        o = {str(k).lower(): v for k, v in options.items()}  # Spark passes a case-insensitive dict

        def need(key: str) -> str:
            if not o.get(key):
                raise ConfigurationError(f"mysql_cdc_snapshot: option {key!r} is required")
            return str(o[key])

        return cls(
            mysql_url=need("mysql_url"), table=need("table"), output=need("output"),
            chunk_store=o.get("chunk_store") or None,
            generation=int(o["generation"]) if o.get("generation") else None,
            chunk_ids=parse_chunk_ids(o["chunk_ids"]) if o.get("chunk_ids") else None,
            password_file=o.get("password_file") or None,
            read_view_mode=o.get("read_view_mode") or "auto",
            watermark_table=o.get("watermark_table") or None,
            skip_backfill=str(o.get("skip_backfill", "false")).lower() in ("1", "true", "yes"),
            batch_rows=int(o.get("batch_rows") or DEFAULT_BATCH_ROWS),
            rows_per_file=int(o.get("rows_per_file") or DEFAULT_ROWS_PER_FILE),
            exclude_columns=tuple(split_commas(o.get("exclude_columns"))),
            run_id=o.get("run_id") or None,
            reader_slot_base=int(o.get("reader_slot_base") or DEFAULT_READER_SLOT_BASE),
            backfill_timeout=float(o.get("backfill_timeout") or 120.0),
            attempts=({int(k): int(v) for k, v in json.loads(o["attempts"]).items()} if o.get("attempts")
                      else {}),
            test_fault=o.get("test_fault") or None,
            limits=SourceLimits.from_options(o),
        )

