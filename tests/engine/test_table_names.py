"""Naming tables: an exact name always selects its table (glob characters and all), backticks quote any name
(commas, dots, backticks in it), and lists split only at the commas outside backticks."""
from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.table_names import (
    TablePattern,
    matching_tables,
    quote_table_name,
    split_table_list,
)
from airflow_provider_mysqlcdc.engine.model.tables import TableId, quote_ident
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import find_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.spark.stream.binlog_source import BinlogSourceOptions

ODD = 'special"[`]$\''  # the name from the bug report: a glob class, a backtick, quotes, a dollar
NAMES = [ODD, "a,b", "t1", "t2", "t[12]", "x`y.z", " padded"]


def test_an_exact_name_with_glob_characters_selects_its_table() -> None:
    tables = [TableId("db", n) for n in NAMES]
    assert matching_tables(tables, [f"db.{ODD}"]) == [TableId("db", ODD)]
    assert matching_tables(tables, ["db.t[12]"]) == [TableId("db", "t[12]")]  # the exact name wins
    assert matching_tables(tables, ["db.t[0-9]"]) == [TableId("db", "t1"), TableId("db", "t2")]
    assert matching_tables(tables, ["`db`.`t[0-9]`"]) == []  # quoted: literal, never a pattern
    assert matching_tables(tables, ["db.nope", "db.special*"]) == [TableId("db", ODD)]


def test_backticks_quote_any_name_and_lists_split_outside_them() -> None:
    text = f"db.{ODD}, `db`.`a,b` ,`db`.`x``y.z`, db.t*,, `d.b`.`t`"
    assert split_table_list(text) == [f"db.{ODD}", "`db`.`a,b`", "`db`.`x``y.z`", "db.t*", "`d.b`.`t`"]
    assert split_table_list([text, "db.t1"])[-1] == "db.t1"
    parsed = [TablePattern.parse(p) for p in split_table_list(text)]
    assert [p.exact for p in parsed] == [TableId("db", ODD), TableId("db", "a,b"), TableId("db", "x`y.z"),
                                         TableId("db", "t*"), TableId("d.b", "t")]
    assert [p.is_pattern for p in parsed] == [True, False, False, True, False]
    for bad in ("db", "`db`", "`db`.`t", "`db`t", "`db`.`t`x", ".t", "db."):
        with pytest.raises(ConfigurationError, match="database.table|not closed|unexpected"):
            TablePattern.parse(bad)


@pytest.mark.parametrize("name", NAMES + ["plain", "dot.ted", "*", "`"])
def test_quoted_names_read_back_exactly_also_inside_a_list(name: str) -> None:
    table = TableId("d.b" if "." in name else "db", name)
    written = ",".join([quote_table_name(table), "db.other"])
    first, second = split_table_list(written)
    assert TablePattern.parse(first).exact == table and second == "db.other"
    assert TablePattern.parse(first).select([table, TableId("db", "zzz")]) == [table]


def test_the_stream_source_option_carries_any_table_name() -> None:
    tables = tuple(TableId("db", n) for n in NAMES)
    options = BinlogSourceOptions("mysql://cdc@127.0.0.1:3306/", tables, "/tmp/chunks.db").to_options()
    assert BinlogSourceOptions.from_options(options).tables == tables
    plain = BinlogSourceOptions("mysql://cdc@127.0.0.1:3306/", (TableId("db", "t1"),), "/x").to_options()
    assert plain["tables"] == "db.t1"  # ordinary names are written as before


def test_odd_names_are_found_and_planned_on_the_server(mysql_server, mysql_db, tmp_path) -> None:
    with mysql_server.admin() as conn, conn.cursor() as cur:
        for name in NAMES:
            cur.execute(f"CREATE TABLE {quote_ident(mysql_db)}.{quote_ident(name)} (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO {quote_ident(mysql_db)}.{quote_ident(name)} VALUES (1), (2)")
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    db = mysql_db
    assert find_tables(settings, [f"{db}.{ODD}"]) == [TableId(db, ODD)]
    assert find_tables(settings, [f"{db}.t[12]"]) == [TableId(db, "t[12]")]
    assert find_tables(settings, split_table_list(f"`{db}`.`a,b`, `{db}`.`x``y.z`")) == [
        TableId(db, "a,b"), TableId(db, "x`y.z")]
    assert find_tables(settings, [f"`{db}`.` padded`"]) == [TableId(db, " padded")]
    with pytest.raises(ConfigurationError, match=r"table '`.*`\.`t\[0-9\]`' matches no table"):
        find_tables(settings, [f"`{db}`.`t[0-9]`"])
    with ChunkStore(tmp_path / "chunks.db") as store:
        plans = plan_tables(settings, store, split_table_list(f"{db}.{ODD}, `{db}`.`a,b`"), chunk_size=1)
        assert sorted(str(p.table) for p in plans) == sorted([f"{db}.{ODD}", f"{db}.a,b"])
        assert all(len(p.chunks) >= 2 for p in plans)
