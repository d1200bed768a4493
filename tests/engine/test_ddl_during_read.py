"""DDL on a table while one of its chunks is being read: the chunk is read again in a fresh read view.

Two kinds of DDL:

* DDL that rebuilds the table after the chunk's read view opened: the server refuses that view (error
  1412);
* DDL that only changes the table's columns (instant ADD/DROP/RENAME COLUMN, a widening MODIFY) after the
  schema the read uses was loaded but before the chunk's high watermark (HW): the view stays valid, so the
  read compares the table's columns with its schema once HW is fixed and reads again with the new columns.

Either way the chunk's records have the columns of the table as of HW (or later) and their values; DDL that
keeps coming fails the chunk with an error that says so, DDL that changes the key fails it asking for a
re-plan, and nothing of a discarded attempt reaches the chunk's files, the chunk store or the manifest.
"""
from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pyarrow.parquet as pq
import pymysql.cursors
import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunks.key_sql import plan_predicate
from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_READER_ENV
from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot import chunk_reader, gtid_window, read_view
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import (
    ChunkKeyChanged,
    ChunkRead,
    ChunkReadOptions,
    TableChangedDuringRead,
)
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.snapshot.read_view import WATERMARK_DDL
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect

ROWS = 300
# these inject DDL at the steps of the exact read-only views (the view's opening, its SELECT): MariaDB's
# consistent snapshot and Oracle MySQL's executed-GTID window (the test servers run with gtid_mode=ON); the
# watermark-table reads are tested on both flavors below
CONSISTENT_SNAPSHOT_ONLY = pytest.mark.both_flavors
CHUNK = 1  # of 3: ids [100, 200)
ADD_C = "ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 5"


@pytest.fixture(autouse=True)
def python_reader(monkeypatch):
    """These tests inject DDL at the pure-Python reader's steps (its view, its SELECT): they test the
    reference reader; the native reader's DDL handling is tested in test_native_chunk_reader.py."""
    monkeypatch.setenv(CHUNK_READER_ENV, "python")


@pytest.fixture
def table(mysql_server, mysql_db) -> TableId:
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(10) NOT NULL)")
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, i * 7, f"s{i}") for i in range(ROWS)])
    return TableId(mysql_db, "t")


def _watermark_table(mysql_server, table: TableId) -> TableId:
    """The watermark table (mode ``watermark_table``), writable by the CDC user."""
    wm = TableId(table.database, "mysqlcdc_watermark")
    with mysql_server.admin(table.database) as conn, conn.cursor() as cur:
        cur.execute(WATERMARK_DDL.format(table=wm.quoted))
        cur.execute(f"GRANT INSERT, UPDATE ON {wm.quoted} TO 'cdc'@'%'")
    return wm


def _plan(mysql_server, table: TableId, store_path: str):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with ChunkStore(store_path) as store:
        plan = plan_tables(settings, store, [str(table)], chunk_size=100)[0]
    assert len(plan.chunks) == 3
    with connect(settings) as conn:
        schema = load_schema(conn, table)
    return settings, plan, schema


def _inject(monkeypatch, mysql_server, table: TableId, where: str, ddl: list[str]) -> list:
    """Run ``ddl[i]`` from another session during the i-th read view, at ``where``:

    - ``before_open``: after the schema was loaded, just before the view opens (the DDL is before the HW);
    - ``after_open``: right after the view opened, before anything else (the DDL is after the HW);
    - ``before_select``: just before the chunk's SELECT (after the read compared the table's columns).

    Returns the binlog positions (HWs) of the views opened, one per view: MariaDB's consistent snapshot's own,
    or, in Oracle MySQL's executed-GTID window, the binlog end read right after the view opened."""
    opened: list = []
    selects: list = []

    def run(i: int) -> None:
        if i < len(ddl) and ddl[i]:
            with mysql_server.admin(table.database) as admin, admin.cursor() as cur:
                cur.execute(ddl[i])

    real_open = read_view.open_consistent_snapshot
    real_plain, real_view_end = read_view.open_plain_snapshot, gtid_window.view_end

    def open_view(conn):
        if where == "before_open":
            run(len(opened))
        position = real_open(conn)
        opened.append(position)
        if where == "after_open":
            run(len(opened) - 1)
        return position

    def open_plain(conn):  # the executed-GTID window's view: its HW is read by view_end, right after
        if where == "before_open":
            run(len(opened))
        real_plain(conn)

    def view_end(conn, info):
        position = real_view_end(conn, info)
        opened.append(position)
        if where == "after_open":
            run(len(opened) - 1)
        return position

    real_select = ChunkRead._select

    def select(self, conn):
        selects.append(1)
        if where == "before_select":
            run(len(selects) - 1)
        yield from real_select(self, conn)

    monkeypatch.setattr(read_view, "open_consistent_snapshot", open_view)
    monkeypatch.setattr(read_view, "open_plain_snapshot", open_plain)
    monkeypatch.setattr(gtid_window, "view_end", view_end)
    monkeypatch.setattr(ChunkRead, "_select", select)
    return opened


def _read(settings, schema, plan, options=None) -> tuple[ChunkRead, list[dict]]:
    read = ChunkRead(settings, schema, plan, plan.chunk(CHUNK), options)
    rows = [{k: v for k, v in r.items() if k not in METADATA_NAMES}
            for batch in read.batches() for r in batch.to_pylist()]
    return read, rows


def _fresh_select(mysql_server, table: TableId, plan) -> tuple[list[str], list[dict]]:
    """The table's columns now and the chunk's rows now, by a plain SELECT of the chunk's range."""
    with mysql_server.admin(table.database) as conn:
        schema = load_schema(conn, table)
        where, params = plan_predicate(plan, schema, plan.chunk(CHUNK))
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(f"SELECT * FROM {table.quoted} WHERE {where}", params)
            return schema.column_names, list(cur.fetchall())


def _assert_chunk_is_the_table_now(mysql_server, table, plan, read: ChunkRead, rows: list[dict]) -> None:
    names, fresh = _fresh_select(mysql_server, table, plan)
    assert read.schema.column_names == names, "the chunk has the table's columns, in the table's order"
    assert all(list(r) == names for r in rows), "every record has the table's columns"
    assert sorted(rows, key=lambda r: r["id"]) == sorted(fresh, key=lambda r: r["id"])
    assert read.result.rows == len(rows) == 100


# --- columns changed before the high watermark --------------------------------------------------------------


@CONSISTENT_SNAPSHOT_ONLY
@pytest.mark.parametrize("where", ["before_open", "after_open"])
@pytest.mark.parametrize("ddl", [ADD_C, ADD_C + " FIRST", ADD_C + " AFTER id"])
def test_a_column_added_during_the_read_is_in_every_record(mysql_server, table, tmp_path, monkeypatch, caplog,
                                                           where, ddl):
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    opened = _inject(monkeypatch, mysql_server, table, where, [ddl])
    with caplog.at_level(logging.WARNING):
        read, rows = _read(settings, schema, plan)
    assert len(opened) == 2 and read.result.high_watermark == opened[1], "read again in a new read view"
    if where == "after_open":  # the first view's HW was before the DDL, the second one's is after it
        assert opened[1].key > opened[0].key
    assert {r["c"] for r in rows} == {5}
    _assert_chunk_is_the_table_now(mysql_server, table, plan, read, rows)
    # after the view opened, Oracle MySQL refuses the view's SELECT on a table whose definition changed
    # since (even by an instant ADD COLUMN), before the column check can see it: read again all the same
    assert ("columns differ at the chunk's high watermark" in caplog.text
            or (where == "after_open" and "definition changed after the read view opened" in caplog.text))


@pytest.mark.parametrize(("ddl", "where"), [
    ("ALTER TABLE t DROP COLUMN v", "before_open"),
    ("ALTER TABLE t DROP COLUMN v", "before_select"),  # after HW, but the SELECT names v: it fails (1054)
    ("ALTER TABLE t RENAME COLUMN v TO w", "before_open"),
    ("ALTER TABLE t RENAME COLUMN v TO w", "before_select"),
    ("ALTER TABLE t MODIFY s VARCHAR(40) NOT NULL", "before_open"),  # instant: the view stays valid
])
@CONSISTENT_SNAPSHOT_ONLY
def test_a_column_dropped_renamed_or_widened_during_the_read(mysql_server, table, tmp_path, monkeypatch,
                                                             where, ddl):
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    opened = _inject(monkeypatch, mysql_server, table, where, [ddl])
    read, rows = _read(settings, schema, plan)
    assert len(opened) == 2 and read.result.high_watermark == opened[1]
    _assert_chunk_is_the_table_now(mysql_server, table, plan, read, rows)
    if "DROP" in ddl:
        assert "v" not in rows[0]
    elif "RENAME" in ddl:
        assert [r["w"] for r in rows] == [r["id"] * 7 for r in rows]
    else:
        assert read.schema.column("s").column_type == "varchar(40)"


@CONSISTENT_SNAPSHOT_ONLY
def test_a_column_widened_after_the_high_watermark_keeps_the_chunk_as_of_its_hw(
    mysql_server, table, tmp_path, monkeypatch
):
    """DDL after the view opened and after the column check (so after HW) that leaves the SELECT valid: the
    chunk is the table as of HW, with the type it had then; no reread."""
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    opened = _inject(monkeypatch, mysql_server, table, "before_select",
                     ["ALTER TABLE t MODIFY s VARCHAR(40) NOT NULL"])
    read, rows = _read(settings, schema, plan)
    assert len(opened) == 1 and read.schema is schema and read.schema.column("s").column_type == "varchar(10)"
    assert sorted(rows, key=lambda r: r["id"]) == [
        {"id": i, "v": i * 7, "s": f"s{i}"} for i in range(100, 200)
    ]


@CONSISTENT_SNAPSHOT_ONLY
def test_without_the_column_check_the_added_column_is_missing(mysql_server, table, tmp_path, monkeypatch):
    """The check is what makes the tests above pass: without it the chunk has the HW of a view that already
    holds the new column, but the records have the old columns (the mirror would show NULL instead of 5)."""
    monkeypatch.setattr(chunk_reader, "schema_changed", lambda conn, schema: None)
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    opened = _inject(monkeypatch, mysql_server, table, "before_open", [ADD_C])
    read, rows = _read(settings, schema, plan)
    assert len(opened) == 1 and "c" not in rows[0]
    with pytest.raises(AssertionError):
        _assert_chunk_is_the_table_now(mysql_server, table, plan, read, rows)


@CONSISTENT_SNAPSHOT_ONLY
def test_an_unchanged_table_costs_one_query_and_one_view(mysql_server, table, tmp_path, monkeypatch):
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    opened = _inject(monkeypatch, mysql_server, table, "before_open", [])
    reloads: list = []
    monkeypatch.setattr(chunk_reader, "load_schema", lambda *a: reloads.append(a) or load_schema(*a))
    read, rows = _read(settings, schema, plan)
    assert len(opened) == 1 and not reloads and read.schema is schema
    _assert_chunk_is_the_table_now(mysql_server, table, plan, read, rows)


@CONSISTENT_SNAPSHOT_ONLY
@pytest.mark.parametrize("ddl", ["ALTER TABLE t MODIFY id BIGINT NOT NULL",
                                 "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)"])
def test_ddl_on_the_key_fails_the_chunk_asking_for_a_new_plan(mysql_server, table, tmp_path, monkeypatch,
                                                               ddl):
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    _inject(monkeypatch, mysql_server, table, "before_open", [ddl])
    with pytest.raises(ChunkKeyChanged, match=rf"{table} chunk {CHUNK}: .*re-planned .*mysqlcdc plan"):
        _read(settings, schema, plan)


@CONSISTENT_SNAPSHOT_ONLY
def test_columns_that_keep_changing_fail_the_chunk_clearly(mysql_server, table, tmp_path, monkeypatch):
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    flip = [ADD_C, "ALTER TABLE t DROP COLUMN c"] * 5
    opened = _inject(monkeypatch, mysql_server, table, "before_open", flip)
    with pytest.raises(TableChangedDuringRead, match=r"DDL changed the table .* columns differ .* rerun it"):
        _read(settings, schema, plan)
    assert len(opened) == chunk_reader.DDL_REREADS + 1


# --- table rebuilt after the read view opened (the server refuses the view) ---------------------------------


@CONSISTENT_SNAPSHOT_ONLY
def test_a_chunk_is_read_again_after_ddl_rebuilt_its_table(mysql_server, table, tmp_path, monkeypatch,
                                                            caplog):
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    opened = _inject(monkeypatch, mysql_server, table, "before_select",
                     ["ALTER TABLE t MODIFY v BIGINT NOT NULL"])
    with caplog.at_level(logging.WARNING):
        read, rows = _read(settings, schema, plan)
    assert len(opened) == 2 and opened[1].key > opened[0].key, "read again in a new, later read view"
    assert read.result.high_watermark == opened[1]
    assert read.schema.column("v").column_type in ("bigint(20)", "bigint"), "with the rebuilt table's columns"
    _assert_chunk_is_the_table_now(mysql_server, table, plan, read, rows)
    assert "definition changed after the read view opened" in caplog.text


@CONSISTENT_SNAPSHOT_ONLY
def test_ddl_that_keeps_coming_fails_the_chunk_clearly(mysql_server, table, tmp_path, monkeypatch):
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    flip = ["ALTER TABLE t MODIFY v BIGINT NOT NULL", "ALTER TABLE t MODIFY v INT NOT NULL"] * 5
    _inject(monkeypatch, mysql_server, table, "before_select", flip)
    with pytest.raises(TableChangedDuringRead, match=r"DDL changed the table .* rerun it"):
        _read(settings, schema, plan)


# --- the watermark-table mode: the check runs once the HW marker committed ----------------------------------


@pytest.mark.both_flavors
def test_watermark_mode_reads_again_when_columns_changed_before_the_high_marker(
    mysql_server, table, tmp_path, monkeypatch
):
    wm = _watermark_table(mysql_server, table)
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    real_open = read_view.open_plain_snapshot
    views: list = []

    def open_then_add(conn):  # the view has the old columns; the DDL commits before the HW marker
        real_open(conn)
        views.append(1)
        if len(views) == 1:
            with mysql_server.admin(table.database) as admin, admin.cursor() as cur:
                cur.execute(ADD_C)

    monkeypatch.setattr(read_view, "open_plain_snapshot", open_then_add)
    options = ChunkReadOptions(mode="watermark_table", watermark_table=wm, server_id=5460,
                               backfill_timeout=30)
    read, rows = _read(settings, schema, plan, options)
    assert len(views) == 2 and read.result.mode == "watermark_table"
    assert {r["c"] for r in rows} == {5}
    _assert_chunk_is_the_table_now(mysql_server, table, plan, read, rows)


@pytest.mark.both_flavors
def test_watermark_mode_reads_again_after_a_truncate_between_its_watermarks(
    mysql_server, table, tmp_path, monkeypatch
):
    """TRUNCATE after the SELECT, before the HW marker: the backfill cannot correct the buffer (no row
    events), so the chunk is read again after it, and holds what the table holds (the writer refills it)."""
    wm = _watermark_table(mysql_server, table)
    settings, plan, schema = _plan(mysql_server, table, str(tmp_path / "chunks.db"))
    real_marker = read_view.write_marker
    markers: list = []

    def truncate_before_the_high_marker(conn, info, wm_table, slot):
        markers.append(1)
        if len(markers) == 2:  # the first read's HW marker: the SELECT is done
            with mysql_server.admin(table.database) as admin, admin.cursor() as cur:
                cur.execute(f"TRUNCATE TABLE {table.quoted}")
                cur.execute(f"INSERT INTO {table.quoted} (id, v, s) "
                            "VALUES (150, 1, 'after'), (151, 2, 'truncate')")
        return real_marker(conn, info, wm_table, slot)

    monkeypatch.setattr(read_view, "write_marker", truncate_before_the_high_marker)
    options = ChunkReadOptions(mode="watermark_table", watermark_table=wm, server_id=5460,
                               backfill_timeout=30)
    read, rows = _read(settings, schema, plan, options)
    assert len(markers) == 4, "the chunk was not read again after the TRUNCATE"
    assert sorted(r["id"] for r in rows) == [150, 151] and read.result.rows == 2
    assert sorted(rows, key=lambda r: r["id"]) == sorted(_fresh_select(mysql_server, table, plan)[1],
                                                        key=lambda r: r["id"])


# --- the chunk's Parquet output, chunk store row and manifest -----------------------------------------------


@CONSISTENT_SNAPSHOT_ONLY
def test_parquet_output_has_the_new_columns_and_nothing_of_the_discarded_view(
    mysql_server, table, tmp_path, monkeypatch
):
    """The Spark write task (no Spark needed): files written with the reloaded schema minus the excluded
    column, one version directory, one attempt in the chunk store, the manifest naming exactly those files."""
    from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import read_snapshot_manifest
    from airflow_provider_mysqlcdc.engine.snapshot.chunk_group_job import ChunkGroupJob
    from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
    from airflow_provider_mysqlcdc.spark.snapshot.writer import commit_written_chunks, write_chunk
    from airflow_provider_mysqlcdc.testing.mariadb import CDC_PASSWORD

    store_url, output = str(tmp_path / "chunks.db"), str(tmp_path / "lake")
    _plan(mysql_server, table, store_url)
    parts = urlsplit(mysql_server.cdc_url)
    password_file = tmp_path / "mysql.password"
    password_file.write_text(CDC_PASSWORD + "\n")
    password_file.chmod(0o600)
    options = SnapshotOptions(
        mysql_url=urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}")),
        password_file=str(password_file), table=str(table), output=output, chunk_store=store_url,
        exclude_columns=("s",), read_view_mode="auto",  # the exact read-only view of either flavor
    )
    with ChunkStore(store_url) as store:
        job = ChunkGroupJob.load(options, store)  # the driver's schema: id, v, s
        opened = _inject(monkeypatch, mysql_server, table, "before_open", [ADD_C + " AFTER id"])
        attempt = store.start_chunk(str(table), job.plan.generation, CHUNK).attempts
        job = ChunkGroupJob(job.options.with_(attempts={CHUNK: attempt}), job.plan, job.schema)
        written = write_chunk(job, CHUNK, slot=1)
        commit_written_chunks(store, job, [written])
        state = store.chunk(str(table), job.plan.generation, CHUNK)
    assert len(opened) == 2 and written.hw == str(opened[1])
    (version,) = [p for p in Path(written.directory).parent.iterdir()]
    assert str(version) == written.directory, "one version directory: the discarded view wrote nothing"
    data = pq.read_table(written.directory)
    assert [n for n in data.schema.names if n not in METADATA_NAMES] == ["id", "c", "v"]
    assert set(data.column("c").to_pylist()) == {5} and data.num_rows == 100
    assert (state.status, state.attempts, state.rows, state.hw) == ("committed", 1, 100, opened[1])
    manifest = read_snapshot_manifest(output, table)
    assert manifest is not None
    files = manifest.chunk_files(job.plan.generation)[CHUNK]
    assert files and all(f.startswith(written.directory) for f in files)
    assert pq.read_table(files[0]).schema.names == data.schema.names
