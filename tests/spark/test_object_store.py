"""The pipeline on an object store: snapshot, stream, mirror, time travel and garbage collection with an
``s3://`` output root on an S3-compatible server, credentials and endpoint from the standard AWS environment
variables (as the docs tell operators), and readers passing theirs as delta-rs ``storage_options``.

Real parts: the session's MariaDB with binlog and concurrent writers (fixed seed), the ``mysqlcdc`` CLI in
processes of its own (each with its own local Spark), an S3-compatible server (moto's,
``tests/support/s3_server``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import mirror_versions, read_mirror
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from tests.support.engine_harness import assert_mirror_equals_source, assert_same_rows
from tests.support.s3_server import S3Server
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_dt")]
SEED = 61
STEP = 40  # transactions the writers write into each step (a volume: a slow machine writes no more)


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


def _mysqlcdc(args: list[str], env: dict[str, str], log: Path) -> str:
    """One ``mysqlcdc`` command in a process of its own; its standard output."""
    cli = Path(sys.executable).parent / "mysqlcdc"
    result = subprocess.run([str(cli), *args], check=False, capture_output=True, text=True, env=env,
                            timeout=600)
    log.write_text(result.stdout + result.stderr)
    assert result.returncode == 0, (
        f"mysqlcdc {args[0]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    assert env[MYSQL_PASSWORD_ENV] not in result.stdout + result.stderr
    assert env["AWS_SECRET_ACCESS_KEY"] not in result.stdout + result.stderr
    return result.stdout


def test_pipeline_on_an_s3_output_root(s3, mysql_server, mysql_db, tmp_path, monkeypatch):
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=300, seed=SEED, specs=SPECS)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    root = s3.bucket("lake") + "/cdc"
    store = str(tmp_path / "chunks.db")
    env = {**os.environ, **s3.env, MYSQL_PASSWORD_ENV: settings.password, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    common = ["--mysql-url", settings.url_without_password(), "--chunk-store", store]
    tables = f"{mysql_db}.t_*"
    stream = ["stream", *common, "--tables", tables, "--output", root, "--checkpoint", str(tmp_path / "ckpt"),
              "--available-now", "--master", "local[2]", "--gc-retention", "1m"]

    workload = Workload(lambda: mysql_server.admin(), mysql_db, seed=SEED, writers=2, specs=SPECS,
                        pace=0.05, max_transactions=STEP, idle_at_bound=True).start()
    try:
        _mysqlcdc(["plan", *common, "--tables", tables, "--chunk-size", "120"], env, tmp_path / "plan.log")
        workload.allow_transactions(STEP)
        _mysqlcdc(["snapshot", *common, "--tables", tables, "--output", root, "--master", "local[2]"], env,
                  tmp_path / "snapshot.log")
        workload.allow_transactions(STEP)
        _mysqlcdc(stream, env, tmp_path / "stream1.log")
    finally:
        stats = workload.stop()
    assert stats.transactions > 5, stats
    _mysqlcdc(stream, env, tmp_path / "stream2.log")  # catches up with every write

    # nothing of the lake is on the local disk
    assert not any(p.suffix == ".parquet" for p in tmp_path.rglob("*"))
    ids = [TableId(mysql_db, s.name) for s in SPECS]
    for name, value in s3.env.items():  # this process reads as the docs say: the same variables
        monkeypatch.setenv(name, value)
    assert_mirror_equals_source(settings, root, ids)  # through the Delta tables, and they match our markers

    for name in s3.env:  # a reader that passes its settings as storage_options instead of the environment
        monkeypatch.delenv(name)
    options = s3.storage_options
    for table in ids:
        mirror = DeltaTable(mirror_table_uri(root, table), storage_options=options).to_pyarrow_table()
        changes = DeltaTable(changelog_table_uri(root, table), storage_options=options).to_pyarrow_table()
        ours = read_mirror(root, table, storage_options=options)
        assert mirror.num_rows == ours.num_rows > 0 and changes.num_rows > 0
        names = [n for n in ours.column_names if not n.endswith(values.ZERO_DATE_SUFFIX)]
        assert_same_rows([tuple(r[c] for c in names) for r in values.canonical_pylist(ours)],
                         [tuple(r[c] for c in names) for r in values.canonical_pylist(mirror)], table)
        versions = mirror_versions(root, table, storage_options=options)
        assert versions and versions[-1].as_of is not None
        # time travel to the first consistent version reads (its files are kept for the retention)
        first = next(v for v in versions if v.as_of is not None)
        old = read_mirror(root, table, as_of=first.as_of, storage_options=options)
        assert old.num_rows > 0
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)

    # garbage collection on the object store: a dry run lists, deletes nothing, and the readers still read
    with ChunkStore(store) as chunk_store:
        assert chunk_store.tables()
    report = json.loads(_mysqlcdc(["gc", "--chunk-store", store, "--output", root, "--dry-run", "--json"],
                                  env, tmp_path / "gc.log"))
    assert not report.get("errors"), report
    assert_mirror_equals_source(settings, root, ids)
