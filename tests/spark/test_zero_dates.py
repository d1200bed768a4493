"""Zero dates through the Spark snapshot, the Spark stream and the materialized mirror, in both layouts:
``zero_dates="keep"`` (the default: each zero date exactly, in its column's ``__zero_date`` companion) and
``"null"`` (NULL only, no companion, as most CDC tools do, except in key columns, whose zero dates keep rows
apart). The mode is stored in the plan, so both phases write the same layout; the mirror equals the source
(with the values' zero dates as NULL under "null").

Real parts: the session's MariaDB (legacy sql_mode, zero dates in the key and in values), local Spark for both
phases, the mirror refreshed after each stream batch, a seeded writer running throughout.
"""

from __future__ import annotations

import json
import random
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_mysqlcdc.cli.main import main as mysqlcdc
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan, plan_tables
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh, run_stream, snapshot_table
from tests.support.engine_harness import assert_same_rows, password_file

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

SEED = 1607
WRITES = 60  # statements the writer writes into the snapshot, and into the first stream run
ZERO_D = ["0000-00-00", "2020-00-15", "2019-07-00", "2022-02-02", "2023-03-03"]
ZERO_DT = ["0000-00-00 00:00:00.000", "2020-00-15 10:00:00.500", "2021-03-04 05:06:07.890", None]


def _statement(rng: random.Random, i: int) -> tuple[str, tuple]:
    kind = rng.random()
    row = (i % 40, rng.choice(ZERO_D), rng.randint(0, 99), rng.choice(ZERO_DT),
           rng.choice(ZERO_D[:3] + [None]))
    if kind < 0.35:
        return "INSERT IGNORE INTO zdn (id, d, v, dt, dd) VALUES (%s, %s, %s, %s, %s)", row
    if kind < 0.55:
        return "DELETE FROM zdn WHERE id = %s AND d = %s", (i % 40, rng.choice(ZERO_D))
    if kind < 0.75:  # a key move between zero dates
        return "UPDATE IGNORE zdn SET d = %s WHERE id = %s AND d = %s", (rng.choice(ZERO_D), i % 40,
                                                                         rng.choice(ZERO_D))
    return "UPDATE zdn SET v = v + 1, dt = %s, dd = %s WHERE id = %s", (rng.choice(ZERO_DT),
                                                                      rng.choice(ZERO_D[:3]), i % 40)


class _Writer(threading.Thread):
    """Seeded statements, ``limit`` of them at most until ``allow`` raises it (a volume, not a time)."""

    def __init__(self, server, db: str, limit: int) -> None:
        super().__init__(daemon=True)
        self.server, self.db, self.stopping, self.count, self.limit = server, db, threading.Event(), 0, limit
        self.written = threading.Condition()

    def run(self) -> None:
        rng = random.Random(SEED + 1)
        with self.server.admin(self.db) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            while not self.stopping.wait(0.01):
                if self.count >= self.limit:
                    with self.written:  # idle until allowed more, or stopped
                        self.written.wait(0.1)
                    continue
                cur.execute(*_statement(rng, self.count))
                with self.written:
                    self.count += 1
                    self.written.notify_all()

    def allow(self, more: int) -> None:
        with self.written:
            self.limit = self.count + more
            self.written.notify_all()

    def wait_written(self, timeout: float = 60.0) -> None:
        """Until the writer reached its limit."""
        with self.written:
            assert self.written.wait_for(lambda: self.count >= self.limit, timeout), (self.count, self.limit)

    def stop(self) -> int:
        self.stopping.set()
        self.join(timeout=30)
        return self.count


@pytest.mark.parametrize("mode", ["keep", "null"])
def test_zero_dates_in_key_and_values_reach_the_mirror_exactly(mode, mysql_server, mysql_db, tmp_path, spark,
                                                                capsys):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    table = TableId(mysql_db, "zdn")
    rng = random.Random(SEED)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("CREATE TABLE zdn (id INT, d DATE, v INT, dt DATETIME(3) NULL, dd DATE NULL, "
                    "PRIMARY KEY (id, d))")
        for i in range(200):
            cur.execute(*_statement(random.Random(i), i) if i % 5 else (
                "INSERT IGNORE INTO zdn VALUES (%s, %s, %s, %s, %s)",
                (i % 40, rng.choice(ZERO_D), i, "0000-00-00 00:00:00", "2020-00-00")))
    config = StreamConfig(
        mysql_url=settings.url_without_password(),
        tables=(str(table),), chunk_store=str(tmp_path / "chunks.db"),
        output=str(tmp_path / "out"), checkpoint=str(tmp_path / "ckpt"),
        password_file=password_file(tmp_path, settings), max_bytes_per_batch=20_000, lock_lease_seconds=20.0,
    )
    with ChunkStore(config.chunk_store) as store:
        with pytest.raises(ConfigurationError, match="zero_dates must be one of keep, null, got 'nul'"):
            plan_tables(settings, store, [str(table)], chunk_size=30, zero_dates="nul")
        plan_tables(settings, store, [str(table)], chunk_size=30, zero_dates=mode)
        plan = load_plan(store, table)
    assert plan.zero_dates == mode and len(plan.chunks) >= 3

    writer = _Writer(mysql_server, mysql_db, limit=WRITES)  # into the snapshot
    writer.start()
    try:
        assert snapshot_table(spark, config, table).ok
        with mirror_refresh(config) as hook:
            writer.allow(WRITES)  # into the first stream run
            run_stream(spark, config, on_batch_committed=hook)
            writer.wait_written()
            changes = writer.stop()
            run_stream(spark, config, on_batch_committed=hook)
    finally:
        writer.stop()
    assert changes > 50, changes

    # the files: the key's companion is always there, the values' only under "keep", in both phases alike
    files = list((tmp_path / "out").rglob("*.parquet"))
    assert any("snapshot" in str(f) for f in files) and any("changelog" in str(f) for f in files)
    value_companions = {"dt__zero_date", "dd__zero_date"}
    for path in files:
        names = set(pq.read_schema(path).names)
        if "_op" in names:
            assert "d__zero_date" in names, path
            assert (value_companions <= names if mode == "keep"
                    else not value_companions & names), (path, names)

    # the mirror: the source with the values' zero dates as NULL, the key's exact
    with connect(settings) as conn:
        schema = load_schema(conn, table)
        normalize = values.snapshot_normalizer(schema)
        with conn.cursor() as cur:
            cur.execute(f"SELECT {values.select_list(schema)} FROM {table.quoted}")
            source = [normalize(r) for r in cur.fetchall()]
    names = schema.column_names
    want = [tuple(None if mode == "null" and isinstance(v, values.ZeroDate) and n != "d" else v
                  for n, v in zip(names, r)) for r in source]
    mirror = read_mirror(config.output, table)
    assert "d__zero_date" in mirror.column_names
    assert ("dt__zero_date" in mirror.column_names) == (mode == "keep")
    got = [tuple(r[n] for n in names) for r in values.canonical_pylist(mirror)]
    assert sum(isinstance(r[1], values.ZeroDate) for r in got) > 10, "the key's zero dates were not kept"
    assert sum(isinstance(v, values.ZeroDate) for r in source for v in r[3:]) > 10, "too few zero values"
    assert_same_rows(got, want, table)

    # verify: the digests of zero dates agree on both sides, in either layout
    cli = ["verify", "--mysql-url", config.mysql_url, "--password-file", config.password_file, "--output",
           config.output, "--chunk-store", config.chunk_store, "--table", str(table), "--wait", "0", "--json"]
    code, report = _verify(cli, capsys)
    assert code == 0 and report["summary"]["match"] == len(plan.chunks), report
    if mode == "null":
        return
    # a zero date turned into NULL in a chunk's snapshot file: found, named, repaired on Spark
    damaged = _null_a_zero_date(tmp_path / "out", "dt__zero_date")
    code, report = _verify(cli, capsys)
    bad = [c for c in report["chunks"] if c["result"] == "mismatch"]
    assert code == 1 and [c["chunk_id"] for c in bad] == [damaged], report
    assert "key range" in bad[0]["why"]
    code, report = _verify([*cli, "--repair", "--master", "local[2]"], capsys)
    results = {c["chunk_id"]: c["result"] for c in report["chunks"]}
    assert code == 0 and results.pop(damaged) == "repaired" and set(results.values()) == {"match"}, report
    code, report = _verify(cli, capsys)  # the mirror was rebuilt on the new snapshot: its files compared
    assert code == 0 and report["summary"]["match"] == len(plan.chunks), report
    assert not any("not compared" in c["why"] for c in report["chunks"]), report
    assert_same_rows([tuple(r[n] for n in names) for r in values.canonical_pylist(read_mirror(config.output,
                                                                                               table))],
                     want, table)


def _verify(argv: list[str], capsys) -> tuple[int, dict]:
    code = mysqlcdc(argv)
    out = capsys.readouterr().out
    return code, json.loads(out[out.index("{"):])


def _null_a_zero_date(output, companion: str) -> int:
    """Set ``companion`` NULL in the first snapshot file holding one (that chunk's zero dates become NULL);
    the chunk's id."""
    for path in sorted(output.rglob("snapshot/**/*.parquet")):
        data = pq.read_table(path)
        column = data.column(companion)
        if column.null_count < data.num_rows:
            index = data.schema.get_field_index(companion)
            pq.write_table(data.set_column(index, data.schema.field(index),
                                           pa.nulls(data.num_rows, column.type)), path)
            return int(str(path).split("chunk=")[1].split("/")[0])
    raise AssertionError(f"no snapshot file holds a {companion}")
