"""Bad and odd input: identifiers with backticks, quotes, spaces, dots and non-ASCII letters go through the
whole pipeline (plan, Spark snapshot, Spark stream, mirror) exactly; input that cannot work fails early with
an error that names the thing and the fix, and writes nothing."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.tables import TableId, quote_ident
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_chunk_group
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import run_stream
from tests.support.engine_harness import assert_mirror_equals_source, password_file

ODD_DB = "odd `db` ü"
ODD_TABLE = "we'ird \"t\" `x`.y"
ODD_COLUMNS = ("ïd `k`", "na'me \"q\"", "a.b c", "Größe")


@pytest.fixture
def odd_table(mysql_server):
    q = quote_ident
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {q(ODD_DB)}")
        cur.execute(f"CREATE DATABASE {q(ODD_DB)}")
        cur.execute(f"GRANT SELECT ON {q(ODD_DB)}.* TO 'cdc'@'%'")
        k, name, ab, size = map(q, ODD_COLUMNS)
        cur.execute(f"CREATE TABLE {q(ODD_DB)}.{q(ODD_TABLE)} ({k} VARCHAR(20) PRIMARY KEY, {name} VARCHAR(40), "
                    f"{ab} INT, {size} DECIMAL(8,2)) DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_general_ci")
        rng = random.Random(5)
        rows = [(f"k{i:04d}`'\"", f"n'{i}\"`", rng.randint(0, 99), i / 4) for i in range(300)]
        cur.executemany(f"INSERT INTO {q(ODD_DB)}.{q(ODD_TABLE)} VALUES (%s, %s, %s, %s)", rows)
    yield TableId(ODD_DB, ODD_TABLE)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {q(ODD_DB)}")


def test_odd_identifiers_through_snapshot_stream_and_mirror(mysql_server, odd_table, spark, tmp_path, monkeypatch):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    monkeypatch.setenv(MYSQL_PASSWORD_ENV, settings.password)
    store_url = str(tmp_path / "chunks.db")
    output = str(tmp_path / "lake")
    with ChunkStore(store_url) as store:
        plans = plan_tables(settings, store, [f"{ODD_DB}.we'ird*"], chunk_size=70)
    assert [p.table for p in plans] == [odd_table] and len(plans[0].chunks) >= 4
    q = quote_ident
    k, name, ab, _ = map(q, ODD_COLUMNS)
    table_sql = f"{q(ODD_DB)}.{q(ODD_TABLE)}"

    def write(statement: str, *params) -> None:
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute(statement, params)

    write(f"UPDATE {table_sql} SET {name} = 'before snapshot' WHERE {ab} < 10")
    options = SnapshotOptions(mysql_url=settings.redacted_url(), table=str(odd_table), output=output,
                              chunk_store=store_url,
                              password_file=password_file(tmp_path, settings))
    result = run_chunk_group(spark, options)
    assert result.ok and result.rows == 300
    # changes after the snapshot, including a key change and a delete, then the stream
    write(f"UPDATE {table_sql} SET {name} = %s, {ab} = {ab} + 100 WHERE {ab} BETWEEN 10 AND 30", "after `'\"")
    write(f"UPDATE {table_sql} SET {k} = CONCAT({k}, ' moved') WHERE {ab} > 90")
    write(f"DELETE FROM {table_sql} WHERE {ab} BETWEEN 40 AND 45")
    write(f"INSERT INTO {table_sql} VALUES (%s, %s, %s, %s)", "new `key`", "ü ö", 7, 1.5)
    config = StreamConfig(mysql_url=settings.redacted_url(), tables=(f"{ODD_DB}.we'ird*",),
                          chunk_store=store_url,
                          output=output, checkpoint=str(tmp_path / "ckpt"),
                          password_file=password_file(tmp_path, settings))
    from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh

    with mirror_refresh(config) as hook:
        run_stream(spark, config, on_batch_committed=hook)
    assert_mirror_equals_source(settings, output, [odd_table], min_rows=250)
    # the output directories are percent-encoded identifiers: no stray path segments
    table_dir = Path(output) / "odd%20%60db%60%20%C3%BC"
    assert table_dir.is_dir() and [p.name for p in table_dir.iterdir()] == ["we%27ird%20%22t%22%20%60x%60.y"]


def test_unknown_tables_and_databases_are_named(mysql_server, tmp_path):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with ChunkStore(str(tmp_path / "chunks.db")) as store:
        for pattern in ("no_such_db.t", "mysql.no_such_table_*"):
            with pytest.raises(CdcError, match="no_such") as info:
                plan_tables(settings, store, [pattern])
            assert settings.password not in str(info.value)
        assert store.tables() == []


def test_cli_plan_of_an_unknown_table_fails_with_exit_2(mysql_server, tmp_path, capsys, monkeypatch):
    from airflow_provider_mysqlcdc.cli import main as cli

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    monkeypatch.setenv(MYSQL_PASSWORD_ENV, settings.password)
    code = cli.main(["plan", "--mysql-url", settings.redacted_url(), "--tables", "nowhere.nothing",
                     "--chunk-store", str(tmp_path / "c.db")])
    err = capsys.readouterr().err
    assert code == 2 and "nowhere.nothing" in err, err


def test_unwritable_output_fails_before_reading(mysql_server, odd_table, spark, tmp_path, monkeypatch):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    monkeypatch.setenv(MYSQL_PASSWORD_ENV, settings.password)
    store_url = str(tmp_path / "chunks.db")
    with ChunkStore(store_url) as store:
        plan_tables(settings, store, [str(odd_table)], chunk_size=100)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    output = str(blocker / "lake")
    options = SnapshotOptions(mysql_url=settings.redacted_url(), table=str(odd_table), output=output, chunk_store=store_url)
    with pytest.raises(CdcError, match=r"output .*a-file/lake.* is not writable"):
        run_chunk_group(spark, options)
    with ChunkStore(store_url) as store:
        states = store.chunks(str(odd_table))
    assert all(s.status == "planned" and s.attempts == 0 for s in states), "nothing may start"
    config = StreamConfig(mysql_url=settings.redacted_url(), tables=(str(odd_table),), chunk_store=store_url,
                          output=output, checkpoint=str(tmp_path / "ckpt"))
    with pytest.raises(CdcError, match="is not writable"):
        run_stream(spark, config)
    assert json.dumps(str(blocker.read_text())) == '"not a directory"'


def test_table_patterns_match_database_and_table_apart():
    from airflow_provider_mysqlcdc.engine.model.table_names import matching_tables

    planned = ["shop.orders_2025", "shop.orders_2026", "shop.items", "shopx.orders_1", "we.ird.name"]
    assert [str(t) for t in matching_tables(planned, ["shop.orders_*"])] == [
        "shop.orders_2025", "shop.orders_2026"]
    assert [str(t) for t in matching_tables(planned, ["shop*.orders_*", "we.ird.*"])] == [
        "shop.orders_2025", "shop.orders_2026", "shopx.orders_1", "we.ird.name"]
    assert matching_tables(planned, ["*.items"]) == [TableId("shop", "items")]
    with pytest.raises(CdcError, match="database.table"):
        matching_tables(planned, ["shop_orders"])  # a pattern without a database part is refused
