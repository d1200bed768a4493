"""Startup modes on the real server: where each one begins (always a transaction start), the errors of a
start that cannot be found, and streams without a snapshot on Spark whose changelog holds exactly the changes
after their start (checked against the server's own mariadb-binlog)."""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_provider_mysqlcdc.engine.binlog.gtid import parse_gtid_state
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.changelog_reader import changelog_records
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.engine.stream.failover import server_identity, stamp_offset
from airflow_provider_mysqlcdc.engine.stream.startup import StartupError, StartupMode, resolve_start
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import run_stream
from tests.faults.test_stream_faults import _purge_all_but_current
from tests.support.binlog_audit import (
    TableExpectation,
    assert_clean,
    audit_changelog,
    entries_from_records,
    read_binlog,
)
from tests.support.engine_harness import password_file
from tests.support.servers import binlog_end

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run


def _status(cur) -> BinlogPosition:
    return binlog_end(cur.connection)


def _executed(cur, flavor: str) -> str:
    """What the server applied so far (an idle server: the GTID state at the end of its binlog)."""
    cur.execute("SELECT @@GLOBAL.gtid_binlog_pos" if flavor == "mariadb" else "SELECT @@GLOBAL.gtid_executed")
    return "".join(str(cur.fetchone()[0] or "").split())


def _into_next_second() -> None:
    """Sleep just past the next whole second of the clock: what the server stamps binlog events with."""
    now = time.time()
    time.sleep(math.floor(now) + 1.05 - now)


def _events(cur, file: str) -> list[tuple]:
    cur.execute("SHOW BINLOG EVENTS IN %s", (file,))
    return cur.fetchall()


@pytest.fixture
def settings(private_server) -> MySQLSettings:
    with private_server.admin() as admin, admin.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS modes")
        cur.execute("CREATE TABLE IF NOT EXISTS modes.t (id INT PRIMARY KEY, v INT)")
    return MySQLSettings.from_url(private_server.cdc_url)


def test_each_mode_begins_at_a_transaction_start(private_server, server_flavor, settings):
    with private_server.admin("modes") as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM t")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("INSERT INTO t VALUES (1, 1), (2, 2)")  # transaction A
        _into_next_second()  # binlog times have one-second resolution
        between = datetime.now(UTC)
        _into_next_second()
        before_b = _status(cur)
        gtid_before_b = _executed(cur, server_flavor)
        conn.begin()  # transaction B: several rows events
        cur.execute("INSERT INTO t VALUES (3, 3), (4, 4)")
        cur.execute("UPDATE t SET v = v + 10")
        conn.commit()
        end = _status(cur)
        gtid_at_end = _executed(cur, server_flavor)
        events = _events(cur, end.file)
        cur.execute("SHOW BINARY LOGS")
        oldest = cur.fetchall()[0][0]
    # B's first event (its GTID) starts where A's commit ended; pick a position inside B's rows
    b_rows = [e for e in events
              if before_b.pos <= int(e[1]) < end.pos and re.search(r"_rows(_v1)?$", str(e[2]))]
    assert b_rows, events
    inside_b = BinlogPosition(end.file, int(b_rows[-1][1]))

    latest = resolve_start(settings, StartupMode.parse("latest-offset"))
    assert latest.position == end  # idle server: the end of the binlog is a transaction boundary
    earliest = resolve_start(settings, StartupMode.parse("earliest-offset"))
    assert earliest.file == oldest
    specific = resolve_start(settings, StartupMode.parse(f"specific-offset:{inside_b.file}:{inside_b.pos}"))
    assert specific.position == before_b, "rounded down to the start of the transaction that holds it"
    at_time = resolve_start(settings, StartupMode.parse(f"timestamp:{between.isoformat()}"))
    assert at_time.position == before_b, "the first transaction that began at or after the time"
    future = resolve_start(settings, StartupMode.parse("timestamp:2999-01-01T00:00:00Z"))
    assert future.position == end
    # the GTID state just before B, as the server says it: MariaDB's GTID position there, MySQL's
    # gtid_executed read before B began
    if server_flavor == "mariadb":
        with private_server.admin() as conn, conn.cursor() as cur:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (before_b.file, before_b.pos))
            gtid_before_b = cur.fetchone()[0]
    by_gtid = resolve_start(settings, StartupMode.parse(f"specific-offset:gtid={gtid_before_b}"))
    assert by_gtid.position == before_b, "the first transaction the GTID set does not contain"
    # every start carries (once stamped, as the stream does) the GTID state at its position
    with connect(settings.with_database(None)) as conn:
        identity = server_identity(conn)
        for start, state in ((by_gtid, gtid_before_b), (latest, gtid_at_end)):
            stamped = stamp_offset(conn, start, identity)
            assert stamped.server == identity.token and stamped.gtid_position is not None, stamped
            assert parse_gtid_state(stamped.gtid_position, server_flavor) == parse_gtid_state(
                state, server_flavor), (start, state)
    with pytest.raises(CdcError, match="has not applied GTID"):  # ahead of this server
        ahead = "0-1-999999" if server_flavor == "mariadb" else f"{gtid_at_end.split(':')[0]}:1-999999"
        resolve_start(settings, StartupMode.parse(f"specific-offset:gtid={ahead}"))


def test_starts_that_cannot_be_found_are_named(private_server, settings):
    with pytest.raises(ConfigurationError, match="use initial .* timestamp"):
        StartupMode.parse("specific-offset:12")
    with pytest.raises(ConfigurationError, match="no time zone"):
        StartupMode.parse("timestamp:2026-11-21T08:00:00")
    purged_file, _ = _purge_all_but_current(private_server)
    with pytest.raises(StartupError, match=rf"no binlog file {purged_file} \(purged: the oldest is"):
        resolve_start(settings, StartupMode.parse(f"specific-offset:{purged_file}:4"))
    with pytest.raises(StartupError, match="is this offset from another server"):
        resolve_start(settings, StartupMode.parse("specific-offset:mysql-bin.999999:4"))


def test_streams_without_a_snapshot_on_spark(private_server, settings, spark, tmp_path):
    """latest-offset on a table that was never planned: the first run writes nothing of what came before;
    the next holds exactly the changes after the start. snapshot-only refuses to stream."""
    with private_server.admin("modes") as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM t")
        # before: not wanted
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(100, 200)])
    table = TableId("modes", "t")
    store, output, checkpoint = str(tmp_path / "chunks.db"), str(tmp_path / "lake"), tmp_path / "ckpt"
    config = StreamConfig(mysql_url=settings.url_without_password(), tables=("modes.t",), chunk_store=store,
                          output=output, checkpoint=str(checkpoint),
                          password_file=password_file(tmp_path, settings),
                          startup_mode="latest-offset")
    run_stream(spark, config)
    with connect(settings) as conn:
        schema = load_schema(conn, table)
    assert changelog_records(output, schema) == []
    started = resolve_start(settings, StartupMode.parse("latest-offset"))
    with private_server.admin("modes") as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET v = -v WHERE id < 120")
        cur.execute("DELETE FROM t WHERE id >= 190")
        cur.execute("INSERT INTO t VALUES (500, 5)")
        cur.execute("UPDATE t SET id = 501 WHERE id = 500")  # a key change: -D/+I
        end = _status(cur)
    run_stream(spark, config)
    records = changelog_records(output, schema)
    ops = sorted(r.op for r in records)
    assert ops.count("-U") == ops.count("+U") == 20 and ops.count("-D") == 11 and ops.count("+I") == 2, ops
    report = audit_changelog(
        read_binlog(settings, started.file), entries_from_records(records),
        [TableExpectation.from_plan(schema, schema.primary_key, {}, [])], start=started.position, end=end,
    )
    assert_clean(report, min_checked_after_max_hw=30)
    assert (checkpoint / "mysqlcdc" / "startup.json").exists()
    with ChunkStore(store) as chunk_store:
        status = collect_status(chunk_store, output)
    assert status.startup_mode == "latest-offset", status
    assert f"stream startup mode latest-offset: began at {started.file}:{started.pos}" in status.render()

    with ChunkStore(store) as chunk_store:
        plan_tables(settings, chunk_store, ["modes.t"])
    only = replace(config, checkpoint=str(tmp_path / "ckpt2"), startup_mode="snapshot-only")
    with pytest.raises(ConfigurationError, match="snapshot-only snapshots the tables and takes no stream"):
        run_stream(spark, only)
    assert not Path(tmp_path / "ckpt2" / "offsets").exists()


class _TaskInstance:
    """Collects what the plan task pushes to XCom (the operator is run directly, outside a DAG run)."""

    def __init__(self) -> None:
        self.pushed: dict = {}

    def xcom_push(self, key: str, value) -> None:
        self.pushed[key] = value


def test_operators_follow_the_startup_mode(private_server, settings, tmp_path, monkeypatch):
    """A mode without a snapshot plans nothing (the mapped snapshot task gets no instance) and records the
    tables for the stream; snapshot-only makes the stream task skip."""
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator
    from airflow_provider_mysqlcdc.operators.stream import MySqlCdcStreamOperator
    from airflow_provider_mysqlcdc.pipeline.record import XCOM_KEY

    monkeypatch.setenv("AIRFLOW_CONN_MODES_SRC", private_server.cdc_url)
    store = str(tmp_path / "chunks.db")
    plan = MySqlCdcPlanOperator(task_id="plan", tables="modes.*", output_path=str(tmp_path / "lake"),
                                chunk_store=store, mysql_conn_id="modes_src", startup_mode="latest-offset")
    ti = _TaskInstance()
    assert plan.execute({"run_id": "manual__modes", "ti": ti}) == []
    assert ti.pushed[XCOM_KEY]["tables"] == ["modes.t"]
    with ChunkStore(store) as chunk_store:
        assert chunk_store.tables() == [], "nothing may be planned"
    stream = MySqlCdcStreamOperator(task_id="stream", tables="modes.*", output_path=str(tmp_path / "lake"),
                                    chunk_store=store, mysql_conn_id="modes_src",
                                    startup_mode="snapshot-only")
    with pytest.raises(AirflowSkipException, match="snapshot-only"):
        stream.execute({"run_id": "manual__modes"})

    # a stream whose Spark driver stops: the task's error leads with the driver's own cause, not with
    # Airflow's "Cannot execute: <spark-submit command>"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    stream = MySqlCdcStreamOperator(task_id="stream", tables="modes.*", output_path=str(tmp_path / "lake"),
                                    chunk_store=store, mysql_conn_id="modes_src",
                                    startup_mode="specific-offset:mysql-bin.999999:4")
    with pytest.raises(CdcError) as failed:
        stream.execute({"run_id": "manual__modes", "dag": SimpleNamespace(dag_id="modes")})
    message = str(failed.value)
    assert message.startswith("the stream's Spark application stopped: spark-submit exit code 2: "
                              "binlog_stream: error: "), message
    assert "no binlog file mysql-bin.999999" in message and "clear this task to resume" in message, message
