"""Snapshot and available-now stream on a real Spark standalone cluster (master + worker), via spark-submit.

Nothing may depend on local mode: executors are separate JVMs with their own Python workers, the apps are
submitted with a password file (never the password on the command line), and the result must equal the source.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.mirror_manifest import read_mirror
from airflow_provider_mysqlcdc.engine.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.snapshot import plan_tables
from airflow_provider_mysqlcdc.engine.tables import TableId, load_schema
from airflow_provider_mysqlcdc.engine import values
from airflow_provider_mysqlcdc.testing.spark_cluster import SparkStandaloneCluster

from .engine_harness import assert_same_rows
from .workload import TABLE_SPECS, create_tables, seed_rows

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spark_cluster():
    with SparkStandaloneCluster(worker_cores=2, worker_memory="1g") as cluster:
        yield cluster


def _submit(cluster: SparkStandaloneCluster, app: str, args: list[str], password: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("MYSQLCDC_MYSQL_PASSWORD", None)
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", cluster.master_url,
           "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=700m",
           "--conf", "spark.sql.shuffle.partitions=2", str(REPO / "spark_apps" / app), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"{app} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert password not in result.stdout + result.stderr
    assert password not in " ".join(cmd)
    return result


def test_snapshot_and_stream_on_standalone_cluster(spark_cluster, mysql_server, mysql_db, tmp_path):
    specs = [s for s in TABLE_SPECS if s.name in ("t_int", "t_ci")]
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, specs)
        seed_rows(conn, mysql_db, rows_per_table=600, seed=31, specs=specs)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    password_file = tmp_path / "mysql.pw"
    password_file.write_text(settings.password)
    password_file.chmod(0o600)
    url = settings.redacted_url()
    store_path, output, checkpoint = tmp_path / "chunks.db", tmp_path / "out", tmp_path / "checkpoint"
    store = ChunkStore(str(store_path))
    plans = plan_tables(settings, store, [f"{mysql_db}.t_int", f"{mysql_db}.t_ci"], chunk_size=200)
    assert all(len(p.chunks) >= 2 for p in plans)

    for plan in plans:
        _submit(spark_cluster, "snapshot_chunks.py",
                ["--mysql-url", url, "--password-file", str(password_file), "--chunk-store", str(store_path),
                 "--table", str(plan.table), "--output", str(output)], settings.password)
        assert all(c.status == "committed" for c in store.chunks(str(plan.table)))

    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t_int SET v = v + 100 WHERE id % 7 = 0")
        cur.execute("DELETE FROM t_ci WHERE v < -500")
        cur.execute("INSERT INTO t_int (id, v) VALUES (-5000, 1), (99999, 2)")
        cur.execute("UPDATE t_int SET id = id + 100000 WHERE id BETWEEN 10 AND 40")  # key changes

    _submit(spark_cluster, "binlog_stream.py",
            ["--mysql-url", url, "--password-file", str(password_file), "--chunk-store", str(store_path),
             "--tables", ",".join(str(p.table) for p in plans), "--output", str(output),
             "--checkpoint", str(checkpoint), "--trigger", "available-now"], settings.password)

    refresher = MirrorRefresher(str(output), store, settings=settings)
    try:
        with connect(settings) as conn:
            for plan in plans:
                refresher.refresh(plan.table)
                schema = load_schema(conn, plan.table)
                normalize = values.snapshot_normalizer(schema)
                with conn.cursor() as cur:
                    cur.execute(f"SELECT {values.select_list(schema)} FROM {plan.table.quoted}")
                    source = [normalize(r) for r in cur.fetchall()]
                mirror = read_mirror(str(output), plan.table)
                got = [tuple(r[c] for c in schema.column_names) for r in mirror.to_pylist()]
                assert_same_rows(got, source, plan.table)
    finally:
        refresher.close()
