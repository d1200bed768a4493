"""``status`` (engine and CLI) for a table mid-snapshot, after the snapshot, and while streaming; ``mirror``.

The CLI subcommands are tested through their own parser (``cli_status.add_parsers``), as ``cli/main.py`` wires
them.
"""

from __future__ import annotations

import argparse
import json
import logging

import pyarrow.parquet as pq
import pytest

from airflow_provider_mysqlcdc.cli import status as cli_status
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.engine.status.server_binlog import ServerBinlog
from airflow_provider_mysqlcdc.engine.status.table_status import NOT_PLANNED, SNAPSHOT, SNAPSHOT_DONE, STREAM
from tests.support.layout_pipeline import LayoutPipeline


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mysqlcdc")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_status.add_parsers(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_lag_counts_bytes_across_binlog_files():
    server = ServerBinlog(
        BinlogPosition("mysql-bin.000012", 500),
        (("mysql-bin.000010", 9000), ("mysql-bin.000011", 7000), ("mysql-bin.000012", 800)),
    )
    assert server.lag(BinlogPosition("mysql-bin.000012", 120)) == (380, 0)
    assert server.lag(BinlogPosition("mysql-bin.000010", 1000)) == (8000 + 7000 + 500, 2)
    assert server.lag(BinlogPosition("mysql-bin.000013", 4)) == (0, 0)  # ahead (a newer server position read)
    assert ServerBinlog(server.position, None).lag(BinlogPosition("mysql-bin.000011", 4)) == (None, 1)
    assert server.lag(BinlogPosition("mysql-bin.000009", 4)) == (None, 3)  # purged file: size unknown


def test_status_through_the_phases_and_the_cli(mysql_server, mysql_db, tmp_path, capsys, monkeypatch):
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{mysql_db}`.acct (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
        cur.executemany(
            f"INSERT INTO `{mysql_db}`.acct VALUES (%s, 0, 'seed')", [(i,) for i in range(1, 301)]
        )
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    store_path = str(tmp_path / "chunks.db")
    pipe = LayoutPipeline(
        settings, ChunkStore(store_path), mysql_db, chunk_size=75, root=str(tmp_path / "out")
    )
    plan = pipe.plan([f"{mysql_db}.acct"])[0]
    name = str(plan.table)
    pipe.tables = [plan.table]
    assert len(plan.chunks) >= 4
    ids = [c.chunk_id for c in plan.chunks]

    def write(statement: str) -> None:
        with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
            cur.execute(statement)

    def status(**kw):
        report = collect_status(pipe.store, pipe.root, [name], lambda: connect(settings), **kw)
        return report, report.tables[0]

    # mid-snapshot: one committed, one running, one failed, the rest planned
    pipe.snapshot(plan, ids[0])
    write("UPDATE acct SET v = 1 WHERE id = 300")
    pipe.store.start_chunk(name, plan.generation, ids[1])
    pipe.store.start_chunk(name, plan.generation, ids[2])
    pipe.store.fail_chunk(name, plan.generation, ids[2], RuntimeError("executor lost\ntraceback ..."))
    report, t = status()
    assert (t.phase, t.generation, t.chunks) == (SNAPSHOT, plan.generation, len(ids))
    assert (t.committed, t.running, t.failed, t.planned) == (1, 1, 1, len(ids) - 3)
    assert t.rows == 75 and t.min_hw == t.max_hw is not None
    assert t.consistent_from is None and not t.consistent and t.mirror is None and t.stream_position is None
    assert t.lag_from == "min_hw" and t.lag_bytes > 0 and t.lag_files == 0
    assert t.failures[0].chunk_id == ids[2] and t.failures[0].error == "RuntimeError: executor lost"
    text = report.render()
    assert name in text and "snapshot" in text and "1/" in text and "executor lost" in text
    assert "no generation is fully committed" in text

    # snapshot done: HWs differ (writes between chunk reads), so the mirror is not consistent yet
    for chunk_id in ids[1:]:
        pipe.snapshot(plan, chunk_id)
        write(f"UPDATE acct SET v = v + 1 WHERE id = {chunk_id + 1}")
    report, t = status()
    assert (t.phase, t.committed, t.failed, t.running) == (SNAPSHOT_DONE, len(ids), 0, 0)
    assert t.rows == 300 and t.min_hw < t.max_hw and t.consistent_from == t.max_hw and not t.consistent
    assert "mixes chunk HWs" in report.render()

    # streaming: position from the batch marker's end_offset; caught up, the mirror is consistent
    pipe.open_stream([plan.table])
    pipe.drain()
    report, t = status()
    assert t.phase == STREAM and t.stream_position == pipe.offset.position and t.stream_position_exact
    assert t.consistent and t.consistent_as_of == t.stream_position
    server = report.server_position
    assert t.lag_from == "stream" and t.lag_bytes == server.pos - t.stream_position.pos and t.lag_files == 0
    # behind again, across a binlog rotation
    write("UPDATE acct SET v = v + 1 WHERE id < 50")
    write("FLUSH BINARY LOGS")
    write("UPDATE acct SET v = v + 1 WHERE id > 250")
    report, t = status()
    assert t.lag_files >= 1 and t.lag_bytes > 0
    assert f"/{t.lag_files} file" in report.render()
    # without MySQL: no lag, the rest is there
    t_offline = collect_status(pipe.store, pipe.root, [name]).tables[0]
    assert t_offline.lag_bytes is None and t_offline.phase == STREAM and t_offline.consistent

    # the CLI: status as JSON and as a table; a table that is not planned. Log handlers that earlier tests in
    # this process installed (Airflow, Spark apps) must not mix log lines into the command's output.
    monkeypatch.setattr(logging.getLogger("airflow_provider_mysqlcdc"), "propagate", False)
    common = ["--chunk-store", store_path, "--output", pipe.root, "--mysql-url", mysql_server.cdc_url]
    capsys.readouterr()
    assert _cli(["status", *common, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = data["tables"][0]
    assert (row["table"], row["phase"], row["consistent"]) == (name, STREAM, True)
    assert row["stream_position"] == str(pipe.offset.position) and row["lag_files"] >= 1
    assert _cli(["status", *common, "--table", name, "--table", f"{mysql_db}.nothing"]) == 0
    out = capsys.readouterr().out
    assert name in out and NOT_PLANNED in out and "CONSISTENT" in out

    # mirror: refresh, then summary / rows / export
    pipe.drain()
    assert _cli(["mirror", *common, "--table", name]) == 0
    out = capsys.readouterr().out
    assert "300 rows" in out and "consistent as of" in out and "rebuilt from snapshot" in out
    assert _cli(["mirror", *common, "--table", name, "--print", "--limit", "5", "--json"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert len(lines) == 5 and set(lines[0]) == {"id", "v", "note"}
    summary = json.loads(captured.err.split("\n", 1)[1])  # after the "refreshing ..." progress line
    assert summary["consistent"] and summary["refresh"]["rewritten_chunks"] == [] and summary["rows"] == 300
    export = str(tmp_path / "acct.parquet")
    assert _cli(["mirror", *common, "--table", name, "--no-refresh", "--export", export]) == 0
    assert pq.read_table(export).num_rows == 300
    t = collect_status(pipe.store, pipe.root, [name]).tables[0]
    assert t.mirror["rows"] == 300 and t.mirror["consistent"] and t.primary_key == ("id",)

    # markers without end_offset (a stream that does not record it): the position is estimated, and says so
    pipe.end_offsets = False
    write("UPDATE acct SET v = 0 WHERE id = 7")
    pipe.stream_batch()
    assert _cli(["mirror", *common, "--table", name]) == 0
    report, t = status()
    assert not t.stream_position_exact and t.stream_position is not None
    assert "~" in report.render() and "estimated" in report.render()

    # errors the CLI explains
    with pytest.raises(CdcError,
                       match=rf"{mysql_db}.nothing: not in the pipeline: this chunk store has no plan"):
        _cli(["mirror", *common, "--table", f"{mysql_db}.nothing"])
    with pytest.raises(CdcError, match="no chunk store"):
        _cli(["status", "--chunk-store", str(tmp_path / "missing.db"), "--output", pipe.root])
    with pytest.raises(CdcError, match="has no mirror"):
        _cli(
            [
                "mirror",
                "--chunk-store",
                store_path,
                "--output",
                str(tmp_path / "empty"),
                "--table",
                name,
                "--no-refresh",
            ]
        )


def test_the_cli_finds_the_chunk_store_the_operators_default_to(tmp_path, capsys, monkeypatch):
    """Operators keep the chunk store in ``<output>/_mysqlcdc_chunks.db`` unless told otherwise: ``mysqlcdc
    status --output DIR`` (as the README shows it) and ``mysqlcdc gc`` find it there; a remote output has no
    such default, and the error says so."""
    from airflow_provider_mysqlcdc.cli import gc as cli_gc
    from airflow_provider_mysqlcdc.engine.common.environment import CHUNK_STORE_URL_ENV
    from airflow_provider_mysqlcdc.pipeline.settings import CHUNK_STORE_FILE, chunk_store_url

    monkeypatch.delenv(CHUNK_STORE_URL_ENV, raising=False)
    output = tmp_path / "lake"
    output.mkdir()
    assert chunk_store_url(None, str(output)) == str(output / CHUNK_STORE_FILE)
    with ChunkStore(str(output / CHUNK_STORE_FILE)) as store:
        store.create_plan("shop.orders", {"key_columns": ["id"]}, [(0, None, None)], run_id="plan")
    assert _cli(["status", "--output", str(output), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [t["table"] for t in report["tables"]] == ["shop.orders"], report

    parser = argparse.ArgumentParser(prog="mysqlcdc")
    cli_gc.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["gc", "--output", str(output), "--dry-run"])
    assert args.func(args) == 0
    with pytest.raises(CdcError, match="--output s3://lake/cdc is not a local path, so the chunk store has "
                                      "no default: pass --chunk-store or set"):
        _cli(["status", "--output", "s3://lake/cdc"])

    # a snapshot reads a plan: a default store that is not there is named, not created empty
    from airflow_provider_mysqlcdc.cli import main as cli

    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert cli.main(["snapshot", "--mysql-url", "mysql://cdc@127.0.0.1:1/", "--tables", "shop.orders",
                     "--output", str(empty)]) == 2
    error = capsys.readouterr().err
    assert "--chunk-store: no chunk store at '" in error and "plan the tables first" in error, error
    assert not any(empty.iterdir()), "nothing may be created"


def test_the_snapshot_rate_counts_the_time_chunks_were_read_not_the_idle_time_after():
    """Two tables read side by side for 10 s, then, an hour later, one chunk rerun in 2 s: the rate is the
    rows over the 12 s of reading (it fell to rows/3,600 s when measured from the first start to the latest
    commit), and it stays so however long after the snapshot the tab is looked at."""
    from datetime import UTC, datetime, timedelta

    from airflow_provider_mysqlcdc.engine.status.progress import snapshot_progress
    from airflow_provider_mysqlcdc.engine.status.table_status import TableStatus

    t0 = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    at = lambda s: t0 + timedelta(seconds=s)
    a = TableStatus("db.a", "stream", chunks=2, committed=2, rows=6000, first_started_at=t0,
                    last_committed_at=at(10), read_spans=((at(0), at(6)), (at(6), at(10))))
    b = TableStatus("db.b", "stream", chunks=2, committed=2, rows=6000, first_started_at=t0,
                    last_committed_at=at(3602), read_spans=((at(1), at(9)), (at(3600), at(3602))))
    for later in (3603, 86400):
        progress = snapshot_progress([a, b], now=at(later))
        assert progress.elapsed_s == 12 and progress.rows_per_second == 1000, progress
        assert progress.eta_s is None and progress.done
    # while chunks run: the rate is over what committed, the time left from it
    c = TableStatus("db.c", "snapshot", chunks=4, committed=1, running=1, rows=1000, first_started_at=t0,
                    last_committed_at=at(2), read_spans=((at(0), at(2)), (at(2), None)))
    progress = snapshot_progress([c], now=at(3))
    assert progress.rows_per_second == 500 and progress.elapsed_s == 3 and progress.eta_s == 5, progress
    assert "read_spans" not in c.as_dict()
