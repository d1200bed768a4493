"""The options of one snapshot job (one table, one plan generation, some chunk ids), as Spark sees them.

Spark data source options are strings and show up in query plans and the UI, so they never carry a secret:
``mysql_url`` must not contain a password (executors take it from ``$MYSQLCDC_MYSQL_PASSWORD`` or from the
file named by ``password_file``), and a chunk store URL with a password must come from
``$MYSQLCDC_CHUNK_STORE_URL`` instead of the ``chunk_store`` option. The password is resolved on the host
that connects, at the moment it connects; it is never pickled into tasks.
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from airflow_provider_mysqlcdc.engine.chunks.groups import format_chunk_ids, parse_chunk_ids
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import DEFAULT_BATCH_ROWS, ChunkReadOptions
from airflow_provider_mysqlcdc.engine.chunk_store.store import normalize_url
from airflow_provider_mysqlcdc.engine.source.connection import PASSWORD_ENV, URL_ENV, MySQLSettings
from airflow_provider_mysqlcdc.engine.source.limits import DEFAULT_MAX_CONCURRENT_READS, DEFAULT_QUERY_TIMEOUT_S, SourceLimits
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.tables import TableId

CHUNK_STORE_ENV = "MYSQLCDC_CHUNK_STORE_URL"
READ_VIEW_MODES = ("auto", "consistent_snapshot", "watermark_table")
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
        if _has_password(self.mysql_url):
            raise ConfigurationError(
                "mysql_url must not contain a password (Spark options show in plans and logs): set "
                f"${PASSWORD_ENV} on the driver and executors, or pass password_file"
            )
        if self.chunk_store and _store_has_password(self.chunk_store):
            raise ConfigurationError(
                f"the chunk store URL must not contain a password in Spark options: set ${CHUNK_STORE_ENV} "
                "on the driver instead"
            )
        TableId.parse(self.table)
        if self.read_view_mode not in READ_VIEW_MODES:
            raise ConfigurationError(f"read_view_mode must be one of {READ_VIEW_MODES}, got {self.read_view_mode!r}")
        if not self.output:
            raise ConfigurationError("output (the root path of the snapshot output) is required")
        if self.batch_rows < 1 or self.rows_per_file < 1:
            raise ConfigurationError("batch_rows and rows_per_file must be positive")

    @property
    def table_id(self) -> TableId:
        return TableId.parse(self.table)

    def store_url(self) -> str:
        url = self.chunk_store or os.environ.get(CHUNK_STORE_ENV)
        if not url:
            raise ConfigurationError(f"no chunk store: pass chunk_store or set ${CHUNK_STORE_ENV}")
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

    def with_(self, **changes: object) -> "SnapshotOptions":
        return replace(self, **changes)  # type: ignore[arg-type]

    # --- Spark options (strings) -----------------------------------------------------------------------------

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
            "attempts": json.dumps({str(k): v for k, v in sorted(self.attempts.items())}) if self.attempts else None,
        }
        opts.update({k: v for k, v in optional.items() if v is not None})
        return opts

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "SnapshotOptions":
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
            exclude_columns=_split_columns(o.get("exclude_columns")),
            run_id=o.get("run_id") or None,
            reader_slot_base=int(o.get("reader_slot_base") or DEFAULT_READER_SLOT_BASE),
            backfill_timeout=float(o.get("backfill_timeout") or 120.0),
            attempts={int(k): int(v) for k, v in json.loads(o["attempts"]).items()} if o.get("attempts") else {},
            test_fault=o.get("test_fault") or None,
            limits=SourceLimits.from_options(o),
        )


# --- command-line arguments shared by `mysqlcdc snapshot` and spark_apps/snapshot_chunks.py ---------------------


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mysql-url", default=os.environ.get(URL_ENV),
                        help=f"mysql://user@host:port (default ${URL_ENV}); the password comes from "
                        f"${PASSWORD_ENV} or --password-file, never from the command line")
    parser.add_argument("--password-file", help="a file holding the MySQL password (readable on every executor)")
    parser.add_argument("--chunk-store", default=os.environ.get(CHUNK_STORE_ENV),
                        help=f"chunk store URL or SQLite path (default ${CHUNK_STORE_ENV})")


def add_read_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, help="root of the output (local path or a pyarrow URI)")
    parser.add_argument("--read-view-mode", choices=READ_VIEW_MODES, default="auto")
    parser.add_argument("--watermark-table", help="db.table for the watermark_table read view mode")
    parser.add_argument("--skip-backfill", action="store_true",
                        help="at-least-once chunks filtered at their LW (no binlog correction)")
    parser.add_argument("--batch-rows", type=int, default=DEFAULT_BATCH_ROWS)
    parser.add_argument("--rows-per-file", type=int, default=DEFAULT_ROWS_PER_FILE)
    parser.add_argument("--reader-slot-base", type=int, default=DEFAULT_READER_SLOT_BASE,
                        help="first watermark slot/server_id offset of this job; concurrent jobs need disjoint "
                        "ranges (a job uses one slot per parallel chunk)")
    parser.add_argument("--run-id", help="recorded with each chunk in the chunk store")
    parser.add_argument("--max-concurrent-reads", type=int, default=DEFAULT_MAX_CONCURRENT_READS,
                        help="chunk reads the source server serves at once, over all jobs (0: no cap; "
                        "default %(default)s)")
    parser.add_argument("--rows-per-second", type=float, default=0,
                        help="rows per second the source server serves to all chunk reads together (0: no limit)")
    parser.add_argument("--query-timeout", type=float, default=DEFAULT_QUERY_TIMEOUT_S,
                        help="server-side time limit of each chunk SELECT in seconds (0: none; default %(default)s)")


def _has_password(url: str) -> bool:
    try:
        return urlsplit(url).password is not None
    except ValueError:
        return False


def _store_has_password(url: str) -> bool:
    try:
        return normalize_url(url).password is not None
    except Exception:  # noqa: BLE001 - an invalid URL is reported when the store opens
        return False


def _split_columns(text: str | None) -> tuple[str, ...]:
    return tuple(c.strip() for c in (text or "").split(",") if c.strip())


def read_password_file(path: str | None) -> str | None:
    """The password in ``path``; on executors also a file shipped with ``spark-submit --files``."""
    if not path:
        return None
    candidate = Path(path)
    if not candidate.exists():
        try:
            from pyspark import SparkFiles

            shipped = Path(SparkFiles.get(candidate.name))
            candidate = shipped if shipped.exists() else candidate
        except Exception:  # noqa: BLE001 - not inside Spark, or no SparkFiles root
            pass
    try:
        return candidate.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the password file {path}: {exc.strerror}") from None


def add_table_arguments(parser: argparse.ArgumentParser) -> None:
    """One chunk group of one table (spark_apps/snapshot_chunks.py)."""
    parser.add_argument("--table", required=True, help="db.table (planned in the chunk store)")
    parser.add_argument("--generation", type=int, help="plan generation (default: the latest)")
    parser.add_argument("--chunks", help="chunk ids, e.g. 3,7 or 0-15 (default: every chunk of the plan)")
    parser.add_argument("--exclude-columns", default="", help="columns never written, e.g. secret,blob")


def options_from_args(args: argparse.Namespace, table: str, *, chunk_ids: tuple[int, ...] | None = None,
                      exclude_columns: tuple[str, ...] = ()) -> SnapshotOptions:
    """SnapshotOptions from the shared arguments; a URL password is refused (use the env or a file)."""
    if not args.mysql_url:
        raise ConfigurationError(f"no MySQL server given: pass --mysql-url or set ${URL_ENV}")
    return SnapshotOptions(
        mysql_url=args.mysql_url, table=table, output=args.output, chunk_store=args.chunk_store or None,
        generation=getattr(args, "generation", None), chunk_ids=chunk_ids, password_file=args.password_file,
        read_view_mode=args.read_view_mode, watermark_table=args.watermark_table,
        skip_backfill=args.skip_backfill, batch_rows=args.batch_rows, rows_per_file=args.rows_per_file,
        exclude_columns=exclude_columns, run_id=args.run_id, reader_slot_base=args.reader_slot_base,
        limits=SourceLimits(max_concurrent_reads=args.max_concurrent_reads or None,
                            rows_per_second=args.rows_per_second or None, query_timeout_s=args.query_timeout or None),
    )
