"""Two more snapshot cases of the suite's snapshot section, each against connectorx reading the same tables:

- ``types``: the conformance suite's six wide tables (every column type it has that the server takes, with
  its edge values and zero dates), ``rows`` rows each. Baseline: connectorx, one connection, each table's
  ``SELECT`` into Parquet, one table after another; a column connectorx cannot read at all is read as text
  (``CAST(c AS CHAR)``), and, failing that, as hex text (connectorx is not exact on all of these: the figure
  is its speed, not its values).
- ``many``: ``tables`` tables of ``rows`` rows (6 columns). Baseline: connectorx reading each table into
  its own Parquet file, one after another.

Ours, for both: the snapshot phase as a user runs it (``plan_tables`` then ``run_snapshot``: every table's
chunks in one Spark job), in a fresh driver process per executor count, Spark start-up measured apart.
The child verifies that every chunk committed and that the Parquet files hold every row.
"""
from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cpu import Measure, Timer
from spark_runs import child_session, run_child

TYPES_DB, MANY_DB = "bench_types", "bench_many"
SEED_ROWS = 500  # distinct random rows per wide table; the rest are copies with other keys


# --- loading ---------------------------------------------------------------------------------------------


def load_types(server: Any, rows: int, seed: int) -> list[str]:
    """The six wide tables of every conformance column type, ``rows`` rows each; returns their names."""
    from tests.conformance.catalogue import TYPE_CASES, WIDE_TABLES
    from tests.conformance.specs import probe_types

    rng = random.Random(seed)
    names = []
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {TYPES_DB}")
    with server.admin(TYPES_DB) as conn, conn.cursor() as cur:
        skipped = probe_types(conn)  # the cases this server refuses, as the conformance suite skips them
        for key, wide in WIDE_TABLES.items():
            cases = [c for c in TYPE_CASES if c.table == key and c.id not in skipped]
            cols = ", ".join(f"`{c.column}` {c.ddl}" for c in cases)
            if wide.sql_mode is None:  # the table's mode for its DDL too (a SET member with a comma)
                cur.execute("SET SESSION sql_mode = DEFAULT")
            else:
                cur.execute("SET SESSION sql_mode = %s", (wide.sql_mode,))
            cur.execute(f"CREATE TABLE {TYPES_DB}.{wide.name} (id BIGINT PRIMARY KEY, {cols}) "
                        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
            writable = [c for c in cases if c.writable]
            names_sql = ", ".join(["id", *(f"`{c.column}`" for c in writable)])
            seed_rows = min(rows, SEED_ROWS)
            for i in range(seed_rows):
                values = [c.edges[i] if i < len(c.edges) else c.gen(rng) for c in writable]
                # as the conformance writes
                cur.execute(f"INSERT IGNORE INTO {TYPES_DB}.{wide.name} ({names_sql}) "
                            f"VALUES ({i + 1}, {', '.join(values)})")
            have = seed_rows
            while have < rows:  # copies of the seed rows under new keys, server-side
                take = min(have, rows - have)
                copied = ", ".join(f"`{c.column}`" for c in writable)
                cur.execute(f"INSERT INTO {TYPES_DB}.{wide.name} ({names_sql}) SELECT id + {have}, {copied} "
                            f"FROM {TYPES_DB}.{wide.name} WHERE id <= {take}")
                have += take
            conn.commit()
            names.append(f"{TYPES_DB}.{wide.name}")
    return names


def load_many(server: Any, tables: int, rows: int) -> list[str]:
    """``tables`` tables of ``rows`` rows of 6 columns each; returns their names."""
    names = []
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {MANY_DB}")
        for i in range(tables):
            name = f"{MANY_DB}.t{i:04d}"
            cur.execute(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(32) NOT "
                        "NULL, c DECIMAL(12,2) NOT NULL, d DATETIME(6) NOT NULL, e TIMESTAMP(6) NULL)")
            cur.execute(f"INSERT INTO {name} SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 100, "
                        "'2024-01-01' + INTERVAL seq SECOND, '2024-06-01' + INTERVAL seq SECOND "
                        f"FROM {MANY_DB}.seq_1_to_{rows}")
            names.append(name)
        conn.commit()
    return names


# --- baseline: connectorx, one table after another -------------------------------------------------------


def readable_select(url: str, table: str) -> str:
    """``SELECT`` of every column, each as connectorx can read it: as it is, else as text, else as hex."""
    import connectorx as cx
    import pymysql

    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

    settings = MySQLSettings.from_url(url)
    db, name = table.split(".", 1)
    with pymysql.connect(host=settings.host, port=settings.port, user=settings.user,
                         password=settings.password, database=db) as conn, conn.cursor() as cur:
        cur.execute(f"SHOW COLUMNS FROM `{name}`")
        columns = [r[0] for r in cur.fetchall()]
    exprs = []
    for column in columns:
        for expr in (f"`{column}`", f"CAST(`{column}` AS CHAR) AS `{column}`",
                     f"HEX(`{column}`) AS `{column}`"):
            try:
                cx.read_sql(f"{url.rstrip('/')}/{db}", f"SELECT {expr} FROM `{name}` LIMIT 50",
                            return_type="arrow")
            except BaseException as exc:  # connectorx raises pyo3 panics too
                if isinstance(exc, KeyboardInterrupt):
                    raise
                continue
            exprs.append(expr)
            break
    return f"SELECT {', '.join(exprs)} FROM `{name}`"


def connectorx_tables(url: str, selects: dict[str, str], out: Path, server_pid: int) -> tuple[int, Measure]:
    """Each table's ``SELECT`` through connectorx (one connection each, binary protocol) into its Parquet."""
    import connectorx as cx

    out.mkdir(parents=True, exist_ok=True)
    rows = 0
    with Timer(server_pid) as t:
        for i, (table, sql) in enumerate(selects.items()):
            db = table.split(".", 1)[0]
            data = cx.read_sql(f"{url.rstrip('/')}/{db}", sql, return_type="arrow", protocol="binary")
            pq.write_table(data, out / f"t{i:05d}.parquet")
            rows += data.num_rows
    return rows, t.m


# --- ours: plan + one Spark job, in a fresh driver ----------------------------------------------------------


def spark_child(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, ChunkStore
    from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import read_snapshot_manifest
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.snapshot.options import SnapshotOptions
    from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.spark.snapshot.chunk_group import run_snapshot

    server_pid, root = cfg["server_pid"], cfg.get("client_root")
    with Timer(server_pid, root) as t_start:
        spark = child_session(cfg, f"mysqlcdc snapshot bench {cfg['label']}")
        p = cfg["parallelism"]
        assert spark.sparkContext.parallelize(range(p), p).map(lambda x: x + 1).sum() == p * (p + 1) // 2
    try:
        password = Path(cfg["password_file"]).read_text().strip()
        settings = MySQLSettings.from_url(cfg["mysql_url"], password=password)
        with Timer(server_pid, root) as t_run:
            with ChunkStore(cfg["store"]) as store:
                plans = plan_tables(settings, store, cfg["tables"], chunk_size=cfg["chunk_size"])
            options = [SnapshotOptions(mysql_url=cfg["mysql_url"], password_file=cfg["password_file"],
                                       table=str(plan.table), output=cfg["output"], chunk_store=cfg["store"])
                       for plan in plans]
            results = run_snapshot(spark, options)
    finally:
        spark.stop()
    rows = 0
    with ChunkStore(cfg["store"]) as store:
        for plan in plans:
            states = store.chunks(str(plan.table), plan.generation)
            assert all(s.status == COMMITTED for s in states), (plan.table, [s.status for s in states])
            manifest = read_snapshot_manifest(cfg["output"], TableId.parse(str(plan.table)))
            files = [f for fs in manifest.chunk_files().values() for f in fs]
            rows += sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    assert rows == sum(r.rows for r in results), (rows, sum(r.rows for r in results))
    Path(cfg["result"]).write_text(json.dumps({
        "rows": rows, "chunks": sum(len(p.chunks) for p in plans), "tables": len(plans),
        "startup": asdict(t_start.m), "run": asdict(t_run.m)}))
    return 0


def run_spark(work: Path, cfg: dict[str, Any], name: str, executors: int) -> dict[str, Any]:
    result = run_child(Path(__file__).resolve(), {**cfg, "parallelism": executors,
                                                  "store": str(work / f"{name}-{executors}" / "chunks.db"),
                                                  "output": str(work / f"{name}-{executors}" / "out")},
                       work / f"{name}-{executors}")
    for key in ("startup", "run"):
        result[key] = Measure(**result[key])
    return result


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(spark_child(sys.argv[2]))
    sys.exit("usage: snapshot_cases.py --child CONFIG (run by bench/suite.py)")
