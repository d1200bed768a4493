"""The Airflow hook (a standard mysql connection -> engine settings, the CDC connection test) and the plan
task's pure parts (redo parsing, groups bounded by max_map_length, reader slots of concurrent groups)."""
from __future__ import annotations

import json

import pytest
from airflow.sdk import Connection

from airflow_provider_mysqlcdc.engine.chunks.groups import (
    DEFAULT_CHUNKS_PER_GROUP,
    ChunkGroup,
    TableChunks,
    chunk_groups,
    pack_groups,
)
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook, settings_from_connection
from airflow_provider_mysqlcdc.operators.plan import parse_chunk_keys, parse_redo_chunks, plan_groups
from airflow_provider_mysqlcdc.operators.snapshot import reader_slot_base
from tests.support.servers import with_query


def _conn(**kw) -> Connection:
    base = {"conn_id": "src", "conn_type": "mysql", "host": "db.example.com", "port": 3307, "login": "cdc",
            "password": "s3cr3t-pw", "schema": "shop"}
    base.update(kw)
    return Connection(**base)


def test_connection_fields_and_extras_become_engine_settings():
    extra = {"ssl": {"ca": "/etc/ca.pem", "verify": False}, "server_id": "6000-6099", "charset": "utf8mb3"}
    settings = settings_from_connection(_conn(extra=json.dumps(extra)))
    assert (settings.host, settings.port, settings.user, settings.password, settings.database) == (
        "db.example.com", 3307, "cdc", "s3cr3t-pw", "shop")
    assert settings.ssl == {"ca": "/etc/ca.pem", "check_hostname": False}
    assert settings.server_id_range == (6000, 6099) and settings.charset == "utf8mb3"
    url = settings.url_without_password()
    assert "s3cr3t-pw" not in url
    again = MySQLSettings.from_url(url, password="s3cr3t-pw")
    assert again == settings, "the URL handed to spark-submit must parse back to the same settings"
    plain = settings_from_connection(_conn(extra=json.dumps({"ssl": "true"})))
    assert plain.ssl == {"check_hostname": True}
    assert MySQLSettings.from_url(plain.url_without_password(), password="s3cr3t-pw") == plain


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"conn_type": "postgres"},
         "needs a connection of type mysqlcdc; recreate it: airflow connections delete src"),
        ({"conn_type": "generic"}, "stores --conn-type mysql as 'generic'"),
        ({"host": None}, "has no host"),
        ({"extra": json.dumps({"sslmode": "require"})}, "unknown extra"),
        ({"extra": json.dumps({"server_id": "abc"})}, "server_id must be a number"),
        ({"extra": json.dumps({"ssl": {"capath": "/x"}})}, "unknown ssl option"),
    ],
)
def test_bad_connections_say_what_to_fix(kw, message):
    with pytest.raises(ConfigurationError, match=message) as info:
        settings_from_connection(_conn(**kw))
    assert "s3cr3t-pw" not in str(info.value)


def test_connection_test_runs_the_cdc_check(mysql_server, monkeypatch):
    cdc = MySQLSettings.from_url(mysql_server.cdc_url)
    conn = {"conn_type": "mysql", "host": cdc.host, "port": cdc.port, "login": cdc.user,
            "password": cdc.password}
    monkeypatch.setenv("AIRFLOW_CONN_CDC_OK", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW_CONN_CDC_BAD", json.dumps({**conn, "password": "wrong-pw"}))
    ok, message = MySqlCdcHook("cdc_ok").test_connection()
    assert ok, message
    assert "binlog_format" in message and "ready for CDC" in message and cdc.password not in message
    ok, message = MySqlCdcHook("cdc_bad").test_connection()
    assert not ok and "access denied" in message and "wrong-pw" not in message


def test_redo_chunks_parsing():
    assert parse_redo_chunks("shop.orders=3,7; shop.items:0-2") == {
        "shop.orders": (3, 7), "shop.items": (0, 1, 2),
    }
    assert parse_redo_chunks({"shop.orders": [7, 3]}) == {"shop.orders": (3, 7)}
    assert parse_redo_chunks("") == {} and parse_redo_chunks(None) == {}
    with pytest.raises(ConfigurationError, match="db.table=3,7"):
        parse_redo_chunks("3,7")


def _plan(name: str, n: int) -> ChunkPlan:
    chunks = tuple(Chunk(i, None, None) for i in range(n))
    return ChunkPlan(TableId("db", name), 1, ("id",), chunks, "even", 100, n * 100)


def _covered(groups) -> list[tuple[str, int]]:
    return [(p.table, c) for g in groups for p in g.parts for c in p.chunk_ids]


def test_small_tables_share_groups_and_the_groups_fit_max_map_length():
    plans = [_plan("a", 300), _plan("b", 40), _plan("c", 20), _plan("d", 10)]
    everything = [(f"db.{p.table.table}", c.chunk_id) for p in plans for c in p.chunks]
    groups = plan_groups(plans, 64, 1024)
    assert _covered(groups) == everything  # each chunk once, table after table
    # a bigger table has balanced groups of its own; smaller ones share, each whole in one group
    assert [g.tables for g in groups] == [("db.a",)] * 5 + [("db.b", "db.c"), ("db.d",)]
    assert [g.chunk_count for g in groups] == [60] * 5 + [60, 10]
    assert groups[5].name == "db.b chunks 0-39 (plan generation 1); db.c chunks 0-19 (plan generation 1)"
    assert groups[5].redo_value == "db.b=0-39; db.c=0-19"
    apart = plan_groups(plans, 64, 1024, pack_tables=False)
    assert [g.tables for g in apart] == [("db.a",)] * 5 + [("db.b",), ("db.c",), ("db.d",)]
    groups = plan_groups(plans, 4, 20)
    assert len(groups) <= 20 and _covered(groups) == everything
    assert len(plan_groups([_plan(str(i), 2) for i in range(5)], 1, 3)) <= 3  # tables share groups to fit
    with pytest.raises(ConfigurationError, match="max_map_length"):
        plan_groups([_plan(str(i), 2) for i in range(5)], 1, 3, pack_tables=False)


def test_many_small_tables_are_one_group_named_briefly():
    [group] = plan_groups([_plan(f"t{i:03d}", 1) for i in range(500)], DEFAULT_CHUNKS_PER_GROUP, 1024)
    assert len(group.parts) == 500 and group.chunk_count == 500
    assert group.name == "500 tables db.t000 .. db.t499, 500 chunks (plan generation 1)"
    assert ChunkGroup.from_dict(json.loads(json.dumps(group.to_dict()))) == group
    one = ChunkGroup.of("db.a", 2, (3, 4))
    assert one.to_dict() == {"parts": [{"table": "db.a", "generation": 2, "chunk_ids": [3, 4]}],
                             "name": "db.a chunks 3-4 (plan generation 2)", "table": "db.a", "generation": 2,
                             "chunk_ids": [3, 4]}
    # a group as an earlier release's plan task returned it (a mapped task retried after an upgrade)
    assert ChunkGroup.from_dict({"table": "db.a", "generation": 2, "chunk_ids": [3, 4]}) == one
    assert chunk_groups(_plan("a", 10), 4) == pack_groups([TableChunks("db.a", 1, tuple(range(10)))], 4)


def test_concurrent_backfill_readers_claim_distinct_server_ids(mysql_server):
    """Chunk reads of many groups at once each hold their own binlog reader id (GET_LOCK), whatever their
    slot hint; the stream's slot 0 and the check's top id are never handed out."""
    import contextlib

    from airflow_provider_mysqlcdc.engine.binlog.server_ids import claimed_server_id
    from airflow_provider_mysqlcdc.engine.common.errors import ServerNotReady

    settings = MySQLSettings.from_url(with_query(mysql_server.cdc_url, server_id="7000-7005"))
    with contextlib.ExitStack() as stack:
        ids = [stack.enter_context(claimed_server_id(settings, prefer=reader_slot_base(i, 64)))
               for i in range(4)]
        assert sorted(ids) == [7001, 7002, 7003, 7004]
        with pytest.raises(ServerNotReady, match="in use: widen server_id"):
            stack.enter_context(claimed_server_id(settings))
    with claimed_server_id(settings, prefer=3) as again:
        assert again == 7003  # released with the claiming session


@pytest.mark.parametrize("page", ["docs/getting-started.md", "docs/dag-authors.md"])
def test_the_documented_connection_command_gives_a_working_source_connection(page, airflow_home, tmp_path):
    """The docs' own ``airflow connections add mysqlcdc_source ...`` line, run with the real Airflow CLI on
    this install (the MySQL provider absent, as for a new user), makes a connection the plan task accepts."""
    import re
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / page).read_text()
    found = re.search(r"airflow connections add mysqlcdc_source .*?(?<!\\)\n", text, re.DOTALL)
    assert found, f"{page} shows no `airflow connections add mysqlcdc_source` command"
    argv = shlex.split(found.group(0).replace("\\\n", " ").replace("'...'", "pw-from-docs"))
    conn_id = "docs_" + Path(page).stem.replace("-", "_")
    argv[3] = conn_id  # new in the session's fresh metadata DB: nothing to delete first
    airflow = [sys.executable, "-m", "airflow"]
    done = subprocess.run([*airflow, *argv[1:]], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    stored = subprocess.run([*airflow, "connections", "get", conn_id, "-o", "json"], capture_output=True,
                            text=True, cwd=tmp_path, check=False)
    assert stored.returncode == 0, stored.stderr
    row = json.loads(stored.stdout)[0]
    assert row["conn_type"] == "mysqlcdc", row
    settings = settings_from_connection(Connection(
        conn_id=conn_id, conn_type=row["conn_type"], host=row["host"], port=row["port"], login=row["login"],
        password=row["password"], extra=row["extra_dejson"] and json.dumps(row["extra_dejson"]),
    ))
    assert (settings.host, settings.port, settings.user) == ("db.example.com", 3306, "cdc")
    assert settings.server_id_range == (5400, 5499)


def test_chunk_keys_as_the_dag_param_renders_them():
    want = {"shop.events": "id", "shop.log": "ts"}
    assert parse_chunk_keys(want) == want  # a native rendering
    assert parse_chunk_keys('{"shop.events": "id", "shop.log": "ts"}') == want  # rendered as text
    assert parse_chunk_keys("shop.events=id; shop.log=ts") == want
    assert (parse_chunk_keys(None) == parse_chunk_keys("") == parse_chunk_keys("None")
            == parse_chunk_keys({}) == {})
    for bad in ('["shop.events"]', "shop.events", '{"shop.events": ""}', '{"shop.events": 3}', "{nope"):
        with pytest.raises(ConfigurationError, match="chunk_keys must map"):
            parse_chunk_keys(bad)
