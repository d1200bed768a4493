"""DDL on a table while one of its chunks is being read: a change that rebuilds the table after the chunk's read
view opened makes the server refuse that view, and the chunk is read again in a fresh one (a later HW), with
every row; DDL that keeps coming fails the chunk with an error that says so, and nothing is committed."""
from __future__ import annotations

import logging

import pytest

from airflow_provider_mysqlcdc.engine import chunk_reader
from airflow_provider_mysqlcdc.engine.chunk_reader import ChunkRead, TableChangedDuringRead
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.snapshot import plan_tables
from airflow_provider_mysqlcdc.engine.tables import TableId, load_schema

ROWS = 300


@pytest.fixture
def table(mysql_server, mysql_db) -> TableId:
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i * 7) for i in range(ROWS)])
    return TableId(mysql_db, "t")


def _read_under_ddl(mysql_server, table: TableId, tmp_path, monkeypatch, alters: int):
    """Read chunk 0 while the first ``alters`` read views see the table rebuilt right after they open."""
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with ChunkStore(str(tmp_path / "chunks.db")) as store:
        plan = plan_tables(settings, store, [str(table)], chunk_size=10_000)[0]
    with connect(settings) as conn:
        schema = load_schema(conn, table)
    real = chunk_reader.open_consistent_snapshot
    opened: list = []

    def open_then_alter(conn):
        position = real(conn)
        opened.append(position)
        if len(opened) <= alters:  # another session rebuilds the table before the chunk's SELECT starts
            with mysql_server.admin(table.database) as admin, admin.cursor() as cur:
                cur.execute("ALTER TABLE t MODIFY v BIGINT NOT NULL" if len(opened) % 2 else
                            "ALTER TABLE t MODIFY v INT NOT NULL")
        return position

    monkeypatch.setattr(chunk_reader, "open_consistent_snapshot", open_then_alter)
    read = ChunkRead(settings, schema, plan, plan.chunk(0))
    rows = [row for batch in read.batches() for row in batch.to_pylist()]
    return read, rows, opened


def test_a_chunk_is_read_again_after_ddl_rebuilt_its_table(mysql_server, table, tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING):
        read, rows, opened = _read_under_ddl(mysql_server, table, tmp_path, monkeypatch, alters=1)
    assert len(opened) == 2 and opened[1].key > opened[0].key, "read again in a new, later read view"
    assert read.result.high_watermark == opened[1] and read.result.rows == ROWS
    assert sorted((r["id"], r["v"]) for r in rows) == [(i, i * 7) for i in range(ROWS)]
    assert "definition changed after the read view opened" in caplog.text


def test_ddl_that_keeps_coming_fails_the_chunk_clearly(mysql_server, table, tmp_path, monkeypatch):
    with pytest.raises(TableChangedDuringRead, match=r"DDL changed the table .* rerun it"):
        _read_under_ddl(mysql_server, table, tmp_path, monkeypatch, alters=10)
