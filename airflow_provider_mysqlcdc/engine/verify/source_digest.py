"""A chunk's digest on the source, taken in a fresh read view whose binlog position is known.

* MariaDB (and Percona): ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` gives the read view's own binlog
  position (``Binlog_snapshot_position``): the digest is of the table exactly as of that position.
* Oracle MySQL has no such variable. With ``gtid_mode=ON`` the window is the chunk reads' own
  (``snapshot/gtid_window.py``): the view holds every transaction before LW (the binlog end once every GTID
  owned then has committed) and none after HW (the binlog end read right after the view opened). Without GTIDs
  the binlog end is read before the view opens (LW) and after the digest (HW); the view holds a prefix of the
  commit order (``binlog_order_commits``) that ends in that window, give or take the transactions of a group
  commit in flight at LW. The lake side compares the digest with the chunk's state at every position of
  the window where the chunk changed (``lake_chunks``), and a chunk that matches none is read again in a
  fresh view before it is called a mismatch (``verify_run``). Without GTIDs a table without a primary key is
  held at-least-once (its chunks may hold duplicates): its rows' hashes are read (8 bytes a row) and the lake
  must hold each of them at least as often.

The digest is one statement per chunk under the source's limits: a read slot (``max_concurrent_reads``), the
statement time limit (``query_timeout``), and ``rows_per_second`` kept on average by pausing between chunks.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.engine.chunks.key_sql import plan_predicate
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableSchema
from airflow_provider_mysqlcdc.engine.snapshot import gtid_window
from airflow_provider_mysqlcdc.engine.snapshot.read_view import (
    has_snapshot_status,
    open_consistent_snapshot,
    open_plain_snapshot,
)
from airflow_provider_mysqlcdc.engine.source.limits import is_query_timeout
from airflow_provider_mysqlcdc.engine.source.server import ServerInfo, current_binlog_status
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import Digest
from airflow_provider_mysqlcdc.engine.verify.canonical_sql import digest_select, hashes_select

GTID_WAIT_S = 120.0  # how long the window's start waits for transactions written before it to commit


@dataclass(frozen=True)
class SourceDigest:
    """A chunk's digest on the source and where in the binlog its read view stands: at ``low`` exactly
    (``exact``), or somewhere in ``[low, high]``."""

    chunk_id: int
    digest: Digest
    low: BinlogPosition
    high: BinlogPosition
    exact: bool
    seconds: float
    row_hashes: tuple[int, ...] | None = None  # each row's hash: a table the lake holds at-least-once


class VerifyQueryTimeout(CdcError):
    """A chunk's digest ran past the statement time limit."""


@dataclass
class SourceDigester:
    """Digests chunks of one table on one connection (which holds a read slot while it works)."""

    conn: Any
    info: ServerInfo
    schema: TableSchema
    plan: ChunkPlan
    columns: Sequence[Column]
    zero_dates_kept: Sequence[bool]
    read_view_mode: str = "auto"  # the source's: how its chunks were read, so what the lake holds

    def __post_init__(self) -> None:
        self.exact = has_snapshot_status(self.conn)
        # the chunk reads' own window where they use it (a source set to the watermark table is read with
        # it, and its tables without a primary key are held at-least-once)
        gtids = self.info.flavor == "mysql" and self.info.gtid_mode.upper() == "ON"
        self.gtid_window = not self.exact and gtids and self.read_view_mode in ("auto", "gtid_executed")
        # without a primary key and an exact read view the lake holds the table at-least-once (duplicates
        # are possible): the rows' hashes are compared as multisets instead of their sum. Oracle MySQL with
        # GTIDs reads such tables exactly (read_view_mode gtid_executed): their sums must match
        self.per_row = not self.exact and not self.gtid_window and not self.schema.primary_key

    def digest(self, chunk: Chunk) -> SourceDigest:
        where, params = plan_predicate(self.plan, self.schema, chunk)
        if self.per_row:
            sql = hashes_select(self.schema.table.quoted, self.columns, where, self.zero_dates_kept)
        else:
            sql = digest_select(self.schema.table.quoted, self.columns, where, self.zero_dates_kept)
        started = time.monotonic()
        high: BinlogPosition | None = None
        if self.exact:
            low = high = open_consistent_snapshot(self.conn)
        elif self.gtid_window:
            low = gtid_window.start_window(self.conn, self.info, GTID_WAIT_S).scan_from
            open_plain_snapshot(self.conn)
            high = gtid_window.view_end(self.conn, self.info)
        else:
            low = _binlog_end(self.conn, self.info)
            open_plain_snapshot(self.conn)
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                if self.per_row:
                    hashes = tuple(int(r[0]) for r in cur.fetchall())
                    rows, total = len(hashes), sum(hashes)
                else:
                    hashes = None
                    rows, total = cur.fetchone()
        except pymysql.err.MySQLError as exc:
            if is_query_timeout(exc):
                raise VerifyQueryTimeout(
                    f"{self.schema.table} chunk {chunk.chunk_id}: the digest ran past the statement time "
                    "limit (query_timeout): raise it, or split the table into smaller chunks (a new plan)"
                ) from None
            raise
        finally:
            self.conn.rollback()
        if high is None:
            high = _binlog_end(self.conn, self.info)
        return SourceDigest(chunk.chunk_id, Digest(int(rows), int(total)), low, high, self.exact,
                            time.monotonic() - started, hashes)


def _binlog_end(conn: Any, info: ServerInfo) -> BinlogPosition:
    status = current_binlog_status(conn, info)
    return BinlogPosition(status.file, status.position)
