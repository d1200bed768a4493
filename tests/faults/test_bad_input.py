"""Bad and odd input: identifiers with backticks, quotes, spaces, dots and non-ASCII letters go through the
whole pipeline (plan, Spark snapshot, Spark stream, mirror) exactly; input that cannot work fails early with
an error that names the thing and the fix, and writes nothing."""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import (
    CHUNK_STORE_URL_ENV,
    MYSQL_PASSWORD_ENV,
    MYSQL_URL_ENV,
)
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.tables import TableId, quote_ident
from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.pipeline.arguments import BadValue
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
        cur.execute(f"CREATE TABLE {q(ODD_DB)}.{q(ODD_TABLE)} "
                    f"({k} VARCHAR(20) PRIMARY KEY, {name} VARCHAR(40), {ab} INT, {size} DECIMAL(8,2)) "
                    "DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_general_ci")
        rng = random.Random(5)
        rows = [(f"k{i:04d}`'\"", f"n'{i}\"`", rng.randint(0, 99), i / 4) for i in range(300)]
        cur.executemany(f"INSERT INTO {q(ODD_DB)}.{q(ODD_TABLE)} VALUES (%s, %s, %s, %s)", rows)
    yield TableId(ODD_DB, ODD_TABLE)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {q(ODD_DB)}")


@pytest.mark.both_flavors
def test_odd_identifiers_through_snapshot_stream_and_mirror(mysql_server, odd_table, spark, tmp_path,
                                                            monkeypatch):
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
    options = SnapshotOptions(mysql_url=settings.url_without_password(), table=str(odd_table), output=output,
                              chunk_store=store_url,
                              password_file=password_file(tmp_path, settings))
    result = run_chunk_group(spark, options)
    assert result.ok and result.rows == 300
    # changes after the snapshot, including a key change and a delete, then the stream
    write(f"UPDATE {table_sql} SET {name} = %s, {ab} = {ab} + 100 WHERE {ab} BETWEEN 10 AND 30", "after `'\"")
    write(f"UPDATE {table_sql} SET {k} = CONCAT({k}, ' moved') WHERE {ab} > 90")
    write(f"DELETE FROM {table_sql} WHERE {ab} BETWEEN 40 AND 45")
    write(f"INSERT INTO {table_sql} VALUES (%s, %s, %s, %s)", "new `key`", "ü ö", 7, 1.5)
    config = StreamConfig(mysql_url=settings.url_without_password(), tables=(f"{ODD_DB}.we'ird*",),
                          chunk_store=store_url,
                          output=output, checkpoint=str(tmp_path / "ckpt"),
                          password_file=password_file(tmp_path, settings))
    from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh

    with mirror_refresh(config) as hook:
        run_stream(spark, config, on_batch_committed=hook)
    assert_mirror_equals_source(settings, output, [odd_table], min_rows=250)
    # the output directories are @-escaped identifiers (no "%": delta-rs could not open a Delta table there):
    # no stray path segments
    table_dir = Path(output) / "odd@20@60db@60@20@C3@BC"
    assert table_dir.is_dir() and [p.name for p in table_dir.iterdir()] == ["we@27ird@20@22t@22@20@60x@60.y"]


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
    code = cli.main(["plan", "--mysql-url", settings.url_without_password(), "--tables", "nowhere.nothing",
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
    options = SnapshotOptions(mysql_url=settings.url_without_password(), table=str(odd_table), output=output,
                              chunk_store=store_url)
    with pytest.raises(CdcError, match=r"output .*a-file/lake.* is not writable"):
        run_chunk_group(spark, options)
    with ChunkStore(store_url) as store:
        states = store.chunks(str(odd_table))
    assert all(s.status == "planned" and s.attempts == 0 for s in states), "nothing may start"
    config = StreamConfig(mysql_url=settings.url_without_password(),
                          tables=(str(odd_table),), chunk_store=store_url,
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


# --- bad arguments: one line naming the argument and the fix, exit code 2, nothing written ----------------
#
# Every argument of every mysqlcdc command, operator and DAG param, given empty, malformed, out-of-range and
# hostile values, against a real server and a real planned pipeline: the bad call must leave every file as it
# was (no chunk store, output, checkpoint or export created; the existing chunk store untouched).

SECRET = "S3cret-pw-never-shown"
NUL = "\x00"


@dataclass(frozen=True)
class Pipeline:
    """A planned table on the real server, and the files of its pipeline (``root`` holds every one)."""

    root: Path
    url: str  # without the password (it is in $MYSQLCDC_MYSQL_PASSWORD)
    password: str
    db: str
    table: str
    store: str  # planned
    output: str
    checkpoint: str
    a_file: str  # a plain file, where directories are expected
    password_file: str

    def argv(self, words: list[str]) -> list[str]:
        """``words`` with @ROOT@, @DB@, @TABLE@, @FILE@, @STORE@, @URL@ filled in, and @NEW@ with a chunk
        store path of its own (so that a store one call wrongly created cannot hide another call's)."""
        fills = {"@ROOT@": str(self.root), "@DB@": self.db, "@TABLE@": self.table, "@FILE@": self.a_file,
                 "@STORE@": self.store, "@URL@": self.url,
                 "@NEW@": str(self.root / f"new-{uuid.uuid4().hex}.db")}
        out = []
        for word in words:
            for token, value in fills.items():
                word = word.replace(token, value)
            out.append(word)
        return out


BASE = {
    "check": ["check", "--mysql-url", "@URL@"],
    "plan": ["plan", "--mysql-url", "@URL@", "--tables", "@TABLE@", "--chunk-store", "@NEW@"],
    "remove-table": ["remove-table", "--chunk-store", "@STORE@", "@TABLE@"],
    "snapshot": ["snapshot", "--mysql-url", "@URL@", "--chunk-store", "@STORE@", "--tables", "@TABLE@",
                 "--output", "@ROOT@/lake"],
    "stream": ["stream", "--mysql-url", "@URL@", "--chunk-store", "@STORE@", "--tables", "@TABLE@",
               "--output", "@ROOT@/lake", "--checkpoint", "@ROOT@/ckpt"],
    "status": ["status", "--chunk-store", "@STORE@", "--output", "@ROOT@/lake"],
    "mirror": ["mirror", "--chunk-store", "@STORE@", "--table", "@TABLE@", "--output", "@ROOT@/lake"],
    "gc": ["gc", "--chunk-store", "@STORE@", "--output", "@ROOT@/lake", "--dry-run"],
    "verify": ["verify", "--mysql-url", "@URL@", "--chunk-store", "@STORE@", "--table", "@TABLE@",
               "--output", "@ROOT@/lake"],
}

# (command, what is added to its valid command line, the argument the error must name)
BAD_ARGUMENTS = [
    # the MySQL URL and password file, shared by every command that reaches the server
    ("plan", ["--mysql-url", ""], "--mysql-url"),
    ("plan", ["--mysql-url", "   "], "--mysql-url"),
    ("plan", ["--mysql-url", "db.example.com:3306"], "--mysql-url"),
    ("plan", ["--mysql-url", "postgresql://cdc@db/x"], "--mysql-url"),
    ("plan", ["--mysql-url", f"mysql://cdc:{SECRET}@127.0.0.1:99999/"], "--mysql-url"),
    ("plan", ["--mysql-url", f"mysql://cdc:{SECRET}@127.0.0.1:abc/"], "--mysql-url"),
    ("plan", ["--mysql-url", f"mysql://cdc:{SECRET[:4]}/{SECRET[4:]}@127.0.0.1/"], "--mysql-url"),
    ("plan", ["--mysql-url", f"mysql://cdc:{SECRET[:4]}?{SECRET[4:]}@127.0.0.1/"], "--mysql-url"),
    ("plan", ["--mysql-url", "mysql://cdc@127.0.0.1/?connect_timeout=abc"], "--mysql-url"),
    ("plan", ["--mysql-url", "mysql://cdc@127.0.0.1/?server_id=9-1"], "--mysql-url"),
    ("plan", ["--mysql-url", "mysql://cdc@127.0.0.1/?evil=1;DROP"], "--mysql-url"),
    ("plan", ["--mysql-url", "mysql://cdc@127.0.0.1/" + NUL], "--mysql-url"),
    ("stream", ["--mysql-url", f"mysql://cdc:{SECRET}@127.0.0.1/", "--available-now"], "--mysql-url"),
    ("check", ["--mysql-url", "mysql://"], "--mysql-url"),
    ("plan", ["--password-file", "@ROOT@/no-such-file"], "--password-file"),
    ("plan", ["--password-file", "@ROOT@"], "--password-file"),
    ("plan", ["--password-file", ""], "--password-file"),
    ("check", ["--min-binlog-retention-hours", "-1"], "--min-binlog-retention-hours"),
    ("check", ["--min-binlog-retention-hours", "nan"], "--min-binlog-retention-hours"),
    ("check", ["--min-binlog-retention-hours", "1e999"], "--min-binlog-retention-hours"),
    ("check", ["--min-binlog-retention-hours", "a day"], "--min-binlog-retention-hours"),
    # tables
    ("plan", ["--tables", ""], "--tables"),
    ("plan", ["--tables", " , ,"], "--tables"),
    ("plan", ["--tables", "orders"], "--tables"),
    ("plan", ["--tables", "@DB@."], "--tables"),
    ("plan", ["--tables", "`@DB@.orders"], "--tables"),
    ("plan", ["--tables", "`@DB@`.`orders` DROP"], "--tables"),
    ("plan", ["--tables", "../../etc/passwd"], "--tables"),
    ("plan", ["--tables", "@DB@." + "t" * 65], "--tables"),
    ("plan", ["--tables", "@DB@.a" + NUL + "b"], "--tables"),
    ("plan", ["--tables", "@DB@.\U0001F600"], "--tables"),
    ("remove-table", [""], "DB.TABLE"),
    ("remove-table", ["no_dot"], "DB.TABLE"),
    ("status", ["--table", "@DB@.*"], "--table"),
    ("status", ["--table", "nodot"], "--table"),
    ("mirror", ["--table", ""], "--table"),
    ("snapshot", ["--watermark-table", "@DB@.wm_*"], "--watermark-table"),
    ("snapshot", ["--watermark-table", "wm"], "--watermark-table"),
    # numbers: not a number, negative, zero, fractional, huge, another script's digits
    ("plan", ["--chunk-size", "0"], "--chunk-size"),
    ("plan", ["--chunk-size", "-5"], "--chunk-size"),
    ("plan", ["--chunk-size", "abc"], "--chunk-size"),
    ("plan", ["--chunk-size", "1.5"], "--chunk-size"),
    ("plan", ["--chunk-size", "1e3"], "--chunk-size"),
    ("plan", ["--chunk-size", "9" * 30], "--chunk-size"),
    ("plan", ["--chunk-size", "\u0661\u0662"], "--chunk-size"),
    ("plan", ["--chunk-size", ""], "--chunk-size"),
    ("plan", ["--chunks-per-group", "0"], "--chunks-per-group"),
    ("plan", ["--chunks-per-group", "99999999999"], "--chunks-per-group"),
    ("snapshot", ["--generation", "0"], "--generation"),
    ("snapshot", ["--generation", "x"], "--generation"),
    ("snapshot", ["--batch-rows", "0"], "--batch-rows"),
    ("snapshot", ["--rows-per-file", "-1"], "--rows-per-file"),
    ("snapshot", ["--reader-slot-base", "0"], "--reader-slot-base"),
    ("snapshot", ["--max-concurrent-reads", "-1"], "--max-concurrent-reads"),
    ("snapshot", ["--rows-per-second", "-1"], "--rows-per-second"),
    ("snapshot", ["--rows-per-second", "nan"], "--rows-per-second"),
    ("snapshot", ["--query-timeout", "inf"], "--query-timeout"),
    ("snapshot", ["--query-timeout", "9999999999"], "--query-timeout"),
    ("stream", ["--max-bytes-per-batch", "-1", "--available-now"], "--max-bytes-per-batch"),
    ("stream", ["--catchup-partitions", "-1", "--available-now"], "--catchup-partitions"),
    ("stream", ["--catchup-partition-bytes", "0", "--available-now"], "--catchup-partition-bytes"),
    ("stream", ["--rows-per-read", "0", "--available-now"], "--rows-per-read"),
    ("stream", ["--server-id-slot", "-1", "--available-now"], "--server-id-slot"),
    ("stream", ["--server-id-slot", "99", "--available-now"], "--server-id-slot"),  # the range has 99 ids
    ("stream", ["--reconnect-timeout", "-1", "--available-now"], "--reconnect-timeout"),
    ("stream", ["--reconnect-timeout", "NaN", "--available-now"], "--reconnect-timeout"),
    ("stream", ["--lock-lease-seconds", "0", "--available-now"], "--lock-lease-seconds"),
    ("mirror", ["--limit", "-1"], "--limit"),
    ("verify", ["--sample", "0%"], "--sample"),
    ("verify", ["--sample", "150%"], "--sample"),
    ("verify", ["--sample", "some"], "--sample"),
    ("verify", ["--chunks", "5-3"], "--chunks"),
    ("verify", ["--resume", "x; DROP TABLE t"], "--resume"),
    ("verify", ["--resume", "a" * 65], "--resume"),
    ("verify", ["--wait", "-1"], "--wait"),
    ("verify", ["--seed", "-1"], "--seed"),
    ("verify", ["--table", "@DB@.*"], "--table"),
    ("gc", ["--retention", "3"], "--retention"),
    ("gc", ["--retention", "-1d"], "--retention"),
    ("gc", ["--mirror-retention", "3"], "--mirror-retention"),
    ("stream", ["--gc-retention", "forever", "--available-now"], "--gc-retention"),
    ("stream", ["--gc-interval-minutes", "-1", "--available-now"], "--gc-interval-minutes"),
    ("stream", ["--gc-mirror-retention", "0m", "--available-now"], "--gc-mirror-retention"),
    # chunk ids, chunk keys, column exclusions, Spark settings: malformed and hostile
    ("snapshot", ["--chunks", "abc"], "--chunks"),
    ("snapshot", ["--chunks", "5-3"], "--chunks"),
    ("snapshot", ["--chunks", "-1"], "--chunks"),
    ("snapshot", ["--chunks", "0-99999999999"], "--chunks"),
    ("snapshot", ["--chunks", ","], "--chunks"),
    ("plan", ["--chunk-key", "nokey"], "--chunk-key"),
    ("plan", ["--chunk-key", "@TABLE@="], "--chunk-key"),
    ("plan", ["--chunk-key", "=id"], "--chunk-key"),
    ("plan", ["--chunk-key", "@DB@.*=id"], "--chunk-key"),
    ("plan", ["--chunk-key", "@TABLE@=" + "c" * 65], "--chunk-key"),
    ("plan", ["--chunk-key", "@TABLE@=id" + NUL], "--chunk-key"),
    ("plan", ["--chunk-key", "@DB@.other=id"], "--chunk-key"),  # a table --tables does not select
    ("plan", ["--chunk-key", "@TABLE@=id", "--chunk-key", "@TABLE@=v"], "--chunk-key"),
    ("snapshot", ["--exclude-columns", "v"], "--exclude-columns"),
    ("snapshot", ["--exclude-columns", "@TABLE@=,"], "--exclude-columns"),
    ("snapshot", ["--exclude-columns", "@TABLE@=v", "--exclude-columns", "@TABLE@=id"], "--exclude-columns"),
    ("stream", ["--exclude-columns", "@TABLE@=", "--available-now"], "--exclude-columns"),
    ("snapshot", ["--conf", "spark.executor.memory"], "--conf"),
    ("snapshot", ["--conf", "=2g"], "--conf"),
    ("snapshot", ["--master", ""], "--master"),
    ("snapshot", ["--read-view-mode", "dirty"], "--read-view-mode"),
    ("plan", ["--zero-dates", "drop"], "--zero-dates"),
    # free text stored in the chunk store
    ("plan", ["--run-id", ""], "--run-id"),
    ("plan", ["--run-id", "r" * 251], "--run-id"),
    ("plan", ["--run-id", "run\n1"], "--run-id"),
    ("remove-table", ["--reason", ""], "--reason"),
    ("remove-table", ["--reason", "a\x1b[31mred"], "--reason"),
    # chunk store: missing directory, not writable, a directory, in memory, unknown kind, secrets hidden
    ("plan", ["--chunk-store", "/proc/nope/x.db"], "--chunk-store"),
    ("plan", ["--chunk-store", "/proc/x.db"], "--chunk-store"),
    ("plan", ["--chunk-store", "@ROOT@/missing/x.db"], "--chunk-store"),
    ("plan", ["--chunk-store", "@FILE@/x.db"], "--chunk-store"),
    ("plan", ["--chunk-store", "@ROOT@"], "--chunk-store"),
    ("plan", ["--chunk-store", ""], "--chunk-store"),
    ("plan", ["--chunk-store", "sqlite://"], "--chunk-store"),
    ("plan", ["--chunk-store", f"oracle://cdc:{SECRET}@db/x"], "--chunk-store"),
    ("plan", ["--chunk-store", f"postgresql://cdc:{SECRET}@db:port/x"], "--chunk-store"),
    ("remove-table", ["--chunk-store", "@ROOT@/never-planned.db"], "--chunk-store"),
    ("snapshot", ["--chunk-store", "@ROOT@/never-planned.db"], "--chunk-store"),
    ("stream", ["--chunk-store", "/proc/nope/x.db", "--available-now"], "--chunk-store"),
    ("status", ["--chunk-store", "@ROOT@/never-planned.db"], "--chunk-store"),
    ("mirror", ["--chunk-store", "@ROOT@"], "--chunk-store"),
    # output, checkpoint, export: empty, a file, under a file, no filesystem for the scheme
    ("snapshot", ["--output", ""], "--output"),
    ("snapshot", ["--output", "@FILE@"], "--output"),
    ("snapshot", ["--output", "@FILE@/lake"], "--output"),
    ("snapshot", ["--output", "ftp://host/lake"], "--output"),
    ("snapshot", ["--output", "s3:lake"], "--output"),
    ("snapshot", ["--output", "s3://"], "--output"),
    ("stream", ["--output", "@FILE@/lake", "--available-now"], "--output"),
    ("stream", ["--checkpoint", "", "--available-now"], "--checkpoint"),
    ("stream", ["--checkpoint", "@FILE@", "--available-now"], "--checkpoint"),
    ("status", ["--output", "@FILE@"], "--output"),
    ("mirror", ["--export", "@ROOT@/missing/x.parquet"], "--export"),
    ("mirror", ["--export", "@ROOT@"], "--export"),
    # stream start and trigger
    ("stream", ["--startup-mode", "", "--available-now"], "--startup-mode"),
    ("stream", ["--startup-mode", "latest", "--available-now"], "--startup-mode"),
    ("stream", ["--startup-mode", "specific-offset:mysql-bin", "--available-now"], "--startup-mode"),
    ("stream", ["--startup-mode", "specific-offset:mysql-bin.000001:" + "9" * 30, "--available-now"],
     "--startup-mode"),
    ("stream", ["--startup-mode", "timestamp:2026-11-21T08:00:00", "--available-now"], "--startup-mode"),
    ("stream", ["--startup-mode", "timestamp:" + "9" * 20, "--available-now"], "--startup-mode"),
    ("stream", ["--startup-mode", "timestamp:yesterday", "--available-now"], "--startup-mode"),
    ("stream", ["--interval", "10s"], "--interval"),
    ("stream", ["--interval", ""], "--interval"),
    ("stream", ["--interval", "1 month"], "--interval"),
    ("stream", ["--interval", "-5 seconds"], "--interval"),
    ("stream", ["--interval", "99999 weeks"], "--interval"),
    ("stream", ["--interval", "10 seconds; rm -rf /"], "--interval"),
    ("stream", ["--interval", "10 seconds", "--available-now"], "--available-now"),
    # commands and options that do not exist, and required ones left out
    ("plan", ["--chunksize", "10"], "--chunksize"),
    ("check", ["--json=yes"], "--json"),
]


def _files(root: Path) -> dict[str, tuple[int, int] | str]:
    """Every file (size and modification time) and directory under ``root``: what "nothing written" compares.
    (A directory's own time is left out: checking that a directory takes files creates one and removes it.)"""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def _run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``mysqlcdc argv`` in this process: its exit code (argparse exits, main returns), stdout, stderr."""
    from airflow_provider_mysqlcdc.cli import main as cli

    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line_error(command: str, code: int, out: str, err: str, named: str, *secrets: str) -> None:
    line = err.rstrip("\n")
    assert code == 2, (code, err)
    assert "\n" not in line and line.startswith(f"mysqlcdc{' ' + command if command else ''}: error: "), err
    assert named in line, f"{named} not named in: {line}"
    assert "Traceback" not in err and out == "", (out, err)
    for secret in secrets:
        assert secret not in line, line


@pytest.fixture(scope="module")
def pipeline(mysql_server, tmp_path_factory) -> Iterator[Pipeline]:
    """A table of the real server planned into a chunk store, the CLI's password in the environment."""
    from airflow_provider_mysqlcdc.cli import main as cli

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    root = tmp_path_factory.mktemp("bad-arguments")
    db = "bad_args"
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.orders (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.executemany(f"INSERT INTO {db}.orders VALUES (%s, %s)", [(i, f"v{i}") for i in range(50)])
    a_file = root / "a-file"
    a_file.write_text("not a directory")
    password_file = root / "mysql.password"
    password_file.write_text(settings.password)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(MYSQL_PASSWORD_ENV, settings.password)
        mp.delenv(CHUNK_STORE_URL_ENV, raising=False)
        mp.delenv(MYSQL_URL_ENV, raising=False)
        mp.chdir(root)  # a stray relative path would land here, where the comparison sees it
        store = root / "chunks.db"
        assert cli.main(["plan", "--mysql-url", settings.url_without_password(), "--tables", f"{db}.orders",
                         "--chunk-store", str(store), "--chunk-size", "20"]) == 0
        yield Pipeline(root=root, url=settings.url_without_password(), password=settings.password, db=db,
                       table=f"{db}.orders", store=str(store), output=str(root / "lake"),
                       checkpoint=str(root / "ckpt"), a_file=str(a_file), password_file=str(password_file))
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")


@pytest.mark.parametrize("command, extra, named", BAD_ARGUMENTS,
                         ids=[f"{c}-{' '.join(e)[:40]!r}" for c, e, _ in BAD_ARGUMENTS])
def test_a_bad_argument_is_one_line_naming_it_with_exit_2_and_nothing_written(pipeline, capsys, command,
                                                                            extra, named):
    with ChunkStore(pipeline.store) as store:
        chunks_before = store.chunks(pipeline.table)
    before = _files(pipeline.root)  # after reading the store (which may touch its WAL files)
    code, out, err = _run_cli(pipeline.argv([*BASE[command], *extra]), capsys)
    _assert_one_line_error(command if named != "--chunksize" else "", code, out, err, named, SECRET,
                           pipeline.password)
    assert _files(pipeline.root) == before, "a bad argument must write nothing"
    assert not Path("/proc/nope").exists()
    with ChunkStore(pipeline.store) as store:
        assert store.chunks(pipeline.table) == chunks_before and store.tables() == [pipeline.table]


def test_an_environment_default_is_checked_and_named_too(pipeline, capsys, monkeypatch):
    monkeypatch.setenv(CHUNK_STORE_URL_ENV, "/proc/nope/x.db")
    code, out, err = _run_cli(["plan", "--mysql-url", pipeline.url, "--tables", pipeline.table], capsys)
    _assert_one_line_error("plan", code, out, err, "--chunk-store")
    assert f"${CHUNK_STORE_URL_ENV}" in err
    monkeypatch.setenv(MYSQL_URL_ENV, f"mysql://cdc:{SECRET}@127.0.0.1:abc/")
    code, out, err = _run_cli(["status", "--chunk-store", pipeline.store], capsys)
    _assert_one_line_error("status", code, out, err, "--mysql-url", SECRET)
    assert f"${MYSQL_URL_ENV}" in err


def test_errors_only_the_server_finds_are_one_line_and_leave_no_chunk_store(pipeline, capsys, mysql_server):
    """A table that does not exist, a hostile chunk key column, a wrong password: the server says so; the
    command ends with one line and exit code 2, and the chunk store it would have created is not left
    behind."""
    new_store = pipeline.root / "server-errors.db"
    common = ["plan", "--mysql-url", pipeline.url, "--chunk-store", str(new_store)]
    before = _files(pipeline.root)
    cases = [
        ([*common, "--tables", f"{pipeline.db}.no_such_table"], "no_such_table"),
        ([*common, "--tables", f"{pipeline.table}`; DROP TABLE {pipeline.table}; --"], "matches no table"),
        ([*common, "--tables", pipeline.table, "--chunk-key", f"{pipeline.table}=v`; DROP TABLE x; --"],
         "is not a column"),
        (["plan", "--mysql-url", f"mysql://cdc:{SECRET}@127.0.0.1:{mysql_server.port}/", "--chunk-store",
          str(new_store), "--tables", pipeline.table], "credentials"),
    ]
    for argv, says in cases:
        code, out, err = _run_cli(argv, capsys)
        _assert_one_line_error("plan", code, out, err, says, SECRET, pipeline.password)
        assert _files(pipeline.root) == before, f"{argv}: the new chunk store must not stay behind"
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {pipeline.db}.orders")
        assert cur.fetchone()[0] == 50  # and no name was run as SQL


def test_the_real_command_line_gives_one_line_and_exit_2_without_a_traceback(pipeline):
    """Through the installed ``mysqlcdc`` script (what users run): the two cases of the issue, and a URL
    whose password a stray slash pushed out of the user info."""
    import os

    env = {**os.environ, MYSQL_PASSWORD_ENV: pipeline.password}
    cases = [
        (["plan", "--mysql-url", pipeline.url, "--tables", pipeline.table, "--chunk-store",
          "/proc/nope/x.db"], "--chunk-store"),
        (["plan", "--mysql-url", pipeline.url, "--tables", "", "--chunk-store", str(pipeline.root / "t.db")],
         "--tables"),
        (["stream", "--mysql-url", f"mysql://cdc:{SECRET[:4]}/{SECRET[4:]}@127.0.0.1/", "--tables",
          pipeline.table, "--chunk-store", pipeline.store, "--output", pipeline.output, "--checkpoint",
          pipeline.checkpoint], "--mysql-url"),
    ]
    before = _files(pipeline.root)
    for argv, named in cases:
        result = subprocess.run(["mysqlcdc", *argv], check=False, capture_output=True, text=True, env=env,
                                timeout=120)
        _assert_one_line_error(argv[0], result.returncode, result.stdout, result.stderr, named, SECRET[4:],
                               pipeline.password)
    assert _files(pipeline.root) == before


# --- every option, any value: parsed, or one line naming it (a property over the parser's own options) ---

HOSTILE_TEXTS = [
    "", " ", "\t", "\n", NUL, "0", "-0", "-1", "+1", "1.5", "1e309", "-1e309", "nan", "inf", "9" * 40,
    "9" * 5000, "0x10", "1_000", "\u0661\u0662", "\u202e", "\U0001F600", "`; DROP TABLE x; --", "' OR 1=1 --",
    "a.b`; DROP TABLE c; --", "../../../etc/passwd", "/proc/nope/x.db", "/proc/x.db", "/dev/null", "~",
    "a" * 5000, "a" * 300, "a/" * 300, "db.t" + NUL, f"mysql://u:{SECRET}@h:99999/", "mysql://", "s3://",
    "file://", "ftp://h/x", "sqlite://", "db.*", "`a`.`b", "shop.orders=id", "=", ",", ";", "3-1",
    "0-999999999999", "processing-time=", "timestamp:", "specific-offset:", "interval 10 seconds",
    "10 seconds", "1 month", "$(reboot)", "%s%n", "{{ params.x }}", "None", "null",
]
hostile_text = st.one_of(st.text(max_size=60), st.sampled_from(HOSTILE_TEXTS), st.integers().map(str),
                         st.floats().map(str))
PROPERTY = settings(max_examples=1000, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _value_options() -> list[tuple[str, str]]:
    """(command, option) of every option of every mysqlcdc command that takes a value, read off the parser:
    an option added later is tried too."""
    from airflow_provider_mysqlcdc.cli import main as cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    found = []
    for command, sub in commands.items():
        for action in sub._actions:
            if action.nargs == 0 or isinstance(action, argparse._HelpAction):
                continue
            found.append((command, action.option_strings[0] if action.option_strings else action.metavar))
    return found


def test_every_option_that_takes_a_value_is_checked_while_parsing():
    """A new option without a check would reach the engine unchecked: each has a type or a fixed choice."""
    from airflow_provider_mysqlcdc.cli import main as cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    unchecked = [f"{command} {action.option_strings or action.metavar}" for command, sub in commands.items()
                 for action in sub._actions
                 if action.nargs != 0 and not isinstance(action, argparse._HelpAction)
                 and action.type is None and action.choices is None]
    assert unchecked == [], unchecked
    assert {c for c, _ in _value_options()} == set(BASE), "every command has a valid command line in BASE"


def test_any_value_of_any_option_parses_or_fails_with_one_line_naming_it(pipeline):
    """Property: whatever text an option gets, parsing the command line either accepts it or ends with exit
    code 2 and one line naming the option; never another exception, and nothing written."""
    import contextlib
    import io

    from airflow_provider_mysqlcdc.cli import main as cli

    parser = cli.build_parser()
    options = _value_options()
    before = _files(pipeline.root)

    @PROPERTY
    @given(option=st.sampled_from(options), value=hostile_text)
    def parse(option: tuple[str, str], value: str) -> None:
        command, name = option
        base = pipeline.argv(BASE[command])
        argv = [*base, "--", value] if not name.startswith("-") else [*base, f"{name}={value}"]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(argv)
        except SystemExit as exc:
            line = err.getvalue().rstrip("\n")
            assert exc.code == 2 and "\n" not in line and name in line, (argv, line)
            assert line.startswith(f"mysqlcdc {command}: error: "), line
            for secret in (SECRET, pipeline.password):  # a password in a URL is hidden (a bare one is text)
                if secret not in value or f":{secret}@" in value:
                    assert secret not in line, line

    parse()
    assert _files(pipeline.root) == before


# --- operators: literal values at construction (DAG parse), rendered ones at the start of execute -----------

def _operators():
    from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator
    from airflow_provider_mysqlcdc.operators.snapshot import MySqlCdcSnapshotOperator
    from airflow_provider_mysqlcdc.operators.stream import MySqlCdcStreamOperator

    return {"plan": MySqlCdcPlanOperator, "snapshot": MySqlCdcSnapshotOperator,
            "stream": MySqlCdcStreamOperator}


def _valid_kwargs(kind: str, pipeline: Pipeline) -> dict:
    group = {"table": pipeline.table, "generation": 1, "chunk_ids": [0, 1]}
    return {
        "plan": {"tables": pipeline.table, "output_path": str(pipeline.root / "op-lake"),
                 "mysql_conn_id": "bad_args_src"},
        "snapshot": {"chunk_group": group, "output_path": str(pipeline.root / "op-lake"),
                     "chunk_store": pipeline.store, "mysql_conn_id": "bad_args_src"},
        "stream": {"tables": pipeline.table, "output_path": str(pipeline.root / "op-lake"),
                   "chunk_store": pipeline.store, "mysql_conn_id": "bad_args_src"},
    }[kind]


# (operator, argument, a bad value): the message must start with the argument's name
OPERATOR_BAD_VALUES = [
    ("plan", "tables", ""), ("plan", "tables", " , "), ("plan", "tables", "orders"),
    ("plan", "tables", ["a.b", 3]),
    ("plan", "output_path", ""), ("plan", "output_path", "ftp://x/y"), ("plan", "output_path", "s3:x"),
    ("plan", "chunk_store", "sqlite://"), ("plan", "chunk_store", f"oracle://u:{SECRET}@h/x"),
    ("plan", "checkpoint", "s3://"), ("plan", "mysql_conn_id", "my conn"), ("plan", "mysql_conn_id", ""),
    ("plan", "chunk_size", 0), ("plan", "chunk_size", "abc"), ("plan", "chunk_size", 10**12),
    ("plan", "chunk_size", True), ("plan", "chunk_size", 1.5), ("plan", "chunks_per_group", -1),
    ("plan", "chunk_keys", {"shop.t": ""}), ("plan", "chunk_keys", "shop.t"), ("plan", "chunk_keys", ["a"]),
    ("plan", "chunk_keys", {"shop.t": "id`; DROP TABLE x; --" + "x" * 60}), ("plan", "chunk_keys", "{nope"),
    ("plan", "redo_chunks", "3,7"), ("plan", "redo_chunks", {"shop.t": "0-99999999999"}),
    ("plan", "redo_chunks", {"shop.t": None}), ("plan", "redo_chunks", 7), ("plan", "redo_chunks", "{bad"),
    ("plan", "startup_mode", "latest"), ("plan", "startup_mode", "timestamp:" + "9" * 20),
    ("plan", "only_new", "maybe"), ("plan", "remove_tables", "nodot"), ("plan", "zero_dates", "drop"),
    ("plan", "pack_tables", "sometimes"),
    ("snapshot", "chunk_group", {"table": "a.b"}), ("snapshot", "chunk_group", "shop.t chunks 0-7"),
    ("snapshot", "chunk_group", {"table": "a.b", "generation": 0, "chunk_ids": [1]}),
    ("snapshot", "chunk_group", {"table": "a.b", "generation": 1, "chunk_ids": []}),
    ("snapshot", "chunk_group", {"parts": []}),
    ("snapshot", "chunk_group", {"parts": [{"table": "a.b", "generation": 1, "chunk_ids": [0]},
                                           {"table": "a.b", "generation": 1, "chunk_ids": [1]}]}),
    ("snapshot", "chunk_group", {"parts": [{"table": "a.b", "generation": 1, "chunk_ids": [0]},
                                           {"table": "nodot", "generation": 1, "chunk_ids": [1]}]}),
    ("snapshot", "read_view_mode", "dirty"), ("snapshot", "watermark_table", "a.*"),
    ("snapshot", "max_concurrent_reads", -1), ("snapshot", "rows_per_second", "nan"),
    ("snapshot", "query_timeout", "1e99"), ("snapshot", "exclude_columns", {"a.b": []}),
    ("snapshot", "exclude_columns", "secret"), ("snapshot", "spark_conn_id", ""),
    ("stream", "trigger", "sometimes"), ("stream", "trigger", "processing-time=10s"),
    ("stream", "trigger", "processing-time=1 month"), ("stream", "changelog_json", "maybe"),
    ("stream", "skip_if_running", "perhaps"), ("stream", "resnapshot", 2),
    ("stream", "max_bytes_per_batch", -1),
    ("stream", "reconnect_timeout", "inf"), ("stream", "catchup_partitions", -1),
    ("stream", "catchup_partition_bytes", 0), ("stream", "rows_per_read", 0),
    ("stream", "gc_retention", "3"), ("stream", "gc_retention", "0d"), ("stream", "gc_interval_minutes", -5),
    ("stream", "mirror_updates", "merge_on_read"), ("stream", "gc_mirror_retention", "an hour"),
    ("stream", "startup_mode", "specific-offset:x"), ("stream", "checkpoint", "s3:x"),
    ("stream", "exclude_columns", '{"a.b": "x", '), ("stream", "tables", None),
]


@pytest.mark.parametrize("kind, name, value", OPERATOR_BAD_VALUES,
                         ids=[f"{k}-{n}-{str(v)[:20]!r}" for k, n, v in OPERATOR_BAD_VALUES])
def test_an_operator_refuses_a_bad_literal_argument_when_the_dag_is_parsed(pipeline, kind, name, value):
    kwargs = {**_valid_kwargs(kind, pipeline), ("conn_id" if name == "spark_conn_id" else name): value}
    with pytest.raises(BadValue) as info:
        _operators()[kind](task_id=f"t_{kind}", **kwargs)
    message = str(info.value)
    assert message.startswith(name) and "\n" not in message and SECRET not in message, message


def test_a_rendered_bad_argument_fails_the_task_before_anything_is_written(pipeline, mysql_server,
                                                                           monkeypatch):
    """Templated arguments render at run time: the task fails at the start of execute naming the argument,
    before a chunk store, an output or a Spark application exists; with the bad value fixed the same task
    plans on the real server."""
    monkeypatch.setenv("AIRFLOW_CONN_BAD_ARGS_SRC", mysql_server.cdc_url)
    ops = _operators()
    names = ("tables", "output_path", "chunk_size", "chunk_keys", "redo_chunks", "only_new", "startup_mode")
    templated = {name: "{{ params." + name + " }}" for name in names}
    plan = ops["plan"](task_id="plan", mysql_conn_id="bad_args_src", **templated)
    rendered = {"tables": pipeline.table, "output_path": str(pipeline.root / "op-lake"), "chunk_size": "20",
                "chunk_keys": "{}", "redo_chunks": "", "only_new": "True", "startup_mode": "initial"}
    before = _files(pipeline.root)
    for name, bad in [("chunk_size", "8096; DROP TABLE x"), ("chunk_size", "0"), ("tables", ""),
                      ("only_new", "maybe"), ("chunk_keys", '{"bad_args.orders": 1}'),
                      ("redo_chunks", "bad_args.orders=x"), ("startup_mode", "from now on"),
                      ("output_path", pipeline.a_file)]:
        for key, value in {**rendered, name: bad}.items():
            setattr(plan, key, value)
        with pytest.raises(BadValue) as info:
            plan.execute({"run_id": "manual__bad"})
        assert str(info.value).startswith(name), str(info.value)
        assert _files(pipeline.root) == before, f"{name}={bad!r} wrote something"
    for key, value in rendered.items():
        setattr(plan, key, value)

    class TaskInstance:
        def __init__(self) -> None:
            self.pushed: dict = {}

        def xcom_push(self, key, value):
            self.pushed[key] = value

    groups = plan.execute({"run_id": "manual__good", "ti": TaskInstance()})
    assert groups and groups[0]["table"] == pipeline.table  # the same task with good values works

    group = {"table": pipeline.table, "generation": 1, "chunk_ids": [0]}
    snapshot = ops["snapshot"](task_id="snap", chunk_group=group, output_path=str(pipeline.root / "op-lake"),
                               chunk_store=pipeline.store, mysql_conn_id="bad_args_src",
                               max_concurrent_reads="{{ params.reads }}")
    stream = ops["stream"](task_id="stream", tables=pipeline.table,
                           output_path=str(pipeline.root / "op-lake"), chunk_store=pipeline.store,
                           mysql_conn_id="bad_args_src", trigger="{{ params.t }}")
    before = _files(pipeline.root)
    for task, name, bad in [(snapshot, "max_concurrent_reads", "four"),
                            (stream, "trigger", "processing-time=10")]:
        setattr(task, name, bad)
        with pytest.raises(BadValue, match=f"^{name}: "):
            task.execute({"run_id": "manual__bad"})
    assert _files(pipeline.root) == before


def test_any_operator_argument_is_accepted_or_refused_naming_it(pipeline):
    """Property: every argument of every operator, given any JSON-like value (what a rendered param can be),
    is accepted or refused with a one-line BadValue naming it; never another exception."""
    ops = _operators()
    tasks = {kind: ops[kind](task_id=f"prop_{kind}", **_valid_kwargs(kind, pipeline)) for kind in ops}
    checked = {kind: task.checked_arguments() for kind, task in tasks.items()}  # the valid ones pass
    names = [(kind, name) for kind, args in checked.items() for name in (args if isinstance(args, dict) else
                                                                          vars(args))]
    assert len(names) == len(set(names)) and ("stream", "rows_per_read") in names
    huge = st.builds(pow, st.just(-10), st.just(5001))  # too long to print: str() of it raises
    leaves = st.none() | st.booleans() | st.integers() | huge | st.floats() | hostile_text
    jsonish = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) |
                           st.dictionaries(hostile_text, inner, max_size=3), max_leaves=8)
    before = _files(pipeline.root)

    @PROPERTY
    @given(argument=st.sampled_from(names), value=jsonish)
    def check(argument: tuple[str, str], value) -> None:
        kind, name = argument
        task = tasks[kind]
        good = getattr(task, name)
        setattr(task, name, value)
        try:
            task.checked_arguments()
        except BadValue as exc:
            assert str(exc).startswith(name) and "\n" not in str(exc), str(exc)
        finally:
            setattr(task, name, good)

    check()
    assert _files(pipeline.root) == before


# --- the example DAG's params: the trigger form refuses what cannot work ---------------------------------

def test_the_example_dag_params_refuse_bad_values_in_the_trigger_form():
    import copy
    import importlib.util

    from airflow.sdk.definitions.param import ParamValidationError

    spec = importlib.util.spec_from_file_location("example_dag", Path(__file__).parents[2] / "dags" /
                                                  "mysqlcdc_replication.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    params = module.dag.params
    params.validate()  # the defaults are valid
    bad = {
        "tables": ["", " , ", "a\nb"], "output": ["", "   "], "chunk_store": [3, "x" * 5000],
        "chunk_size": [0, -1, 10**12, "8096", 1.5], "chunks_per_group": [0, 10**7],
        "stream_trigger": ["sometimes", "processing-time="], "startup_mode": ["latest", "timestamp:", ""],
        "redo_chunks": ["3,7", "shop.orders=a", "shop.orders=3; DROP"], "only_new": ["maybe", 1],
        "pack_tables": ["maybe", 0], "shared_spark_app": ["maybe", 0],
        "remove_tables": ["x" * 5000], "zero_dates": ["drop"],
        "chunk_keys": [{"shop.t": ""}, {"nodot": "id"}, {"shop.t": "c" * 65}, ["shop.t"]],
        "exclude_columns": [{"shop.t": []}, {"nodot": ["c"]}, "secret"],
        "max_concurrent_reads": [-1, 10**6], "rows_per_second": [-1, 1e13], "query_timeout": [-1, 1e10],
        "catchup_partitions": [-1, 10**6], "mysql_conn_id": ["", "my conn"], "spark_conn_id": ["a b", ""],
    }
    assert set(bad) == set(params.keys()), "every DAG param is tried"
    for name, values in bad.items():
        for value in values:
            trial = copy.deepcopy(params)
            with pytest.raises(ParamValidationError, match=name):
                trial[name] = value
                trial.validate()
    good = copy.deepcopy(params)
    good["redo_chunks"] = "demo.orders=3,7; demo.items=0-2"
    good["startup_mode"] = "timestamp:2026-11-21T08:00:00Z"
    good["stream_trigger"] = "processing-time=10 seconds"
    good["exclude_columns"] = {"demo.users": ["password_hash"], "demo.items": "blob,secret"}
    good.validate()
