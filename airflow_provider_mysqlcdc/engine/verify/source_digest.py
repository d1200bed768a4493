"""A chunk's digest on the source, taken in a fresh read view whose binlog position is known.

* MariaDB (and Percona): ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` gives the read view's own binlog
  position (``Binlog_snapshot_position``): the digest is of the table exactly as of that position.
* Oracle MySQL has no such variable. The binlog end is read before the view opens (LW) and after the digest
  (HW); the view holds a prefix of the commit order (``binlog_order_commits``) that ends in that window, give
  or take the transactions of a group commit in flight at LW. The lake side compares the digest with the
  chunk's state at every position of the window where the chunk changed (``lake_chunks``), and a chunk
  that matches none is read again in a fresh view before it is called a mismatch (``verify_run``). A table
  without a primary key is held at-least-once there (its chunks may hold duplicates): its rows' hashes are
  read (8 bytes a row) and the lake must hold each of them at least as often.

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
from airflow_provider_mysqlcdc.engine.snapshot.read_view import has_snapshot_status, open_consistent_snapshot
from airflow_provider_mysqlcdc.engine.source.limits import is_query_timeout
from airflow_provider_mysqlcdc.engine.source.server import ServerInfo, current_binlog_status
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import Digest
from airflow_provider_mysqlcdc.engine.verify.canonical_sql import digest_select, hashes_select


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

    def __post_init__(self) -> None:
        self.exact = has_snapshot_status(self.conn)
        # without a primary key and an exact read view the lake holds the table at-least-once (duplicates
        # are possible): the rows' hashes are compared as multisets instead of their sum
        self.per_row = not self.exact and not self.schema.primary_key

    def digest(self, chunk: Chunk) -> SourceDigest:
        where, params = plan_predicate(self.plan, self.schema, chunk)
        if self.per_row:
            sql = hashes_select(self.schema.table.quoted, self.columns, where, self.zero_dates_kept)
        else:
            sql = digest_select(self.schema.table.quoted, self.columns, where, self.zero_dates_kept)
        started = time.monotonic()
        if self.exact:
            low = high = open_consistent_snapshot(self.conn)
        else:
            low = _binlog_end(self.conn, self.info)
            with self.conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
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
        if not self.exact:
            high = _binlog_end(self.conn, self.info)
        return SourceDigest(chunk.chunk_id, Digest(int(rows), int(total)), low, high, self.exact,
                            time.monotonic() - started, hashes)


def _binlog_end(conn: Any, info: ServerInfo) -> BinlogPosition:
    status = current_binlog_status(conn, info)
    return BinlogPosition(status.file, status.position)
