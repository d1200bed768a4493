"""``make demo``: run the pipeline end to end on embedded defaults and say what happened.

Starts a throwaway MariaDB with the binlog on, fills a demo table, validates the server with
``mysqlcdc check``, then runs the Airflow DAG (``airflow dags test``) that submits the Spark job with a local
master, and compares the Parquet output with the source row by row. Everything lives under ``demo-output/``.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

from .mariadb import MariaDBServer

REPO = Path(__file__).resolve().parents[2]
ROWS = 2000
_LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _environment(out: Path, server: MariaDBServer) -> dict[str, str]:
    home = out / "airflow-home"
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
                [
                    {"name": "dags-folder", "classpath": _LOCAL_BUNDLE, "kwargs": {}},
                    {"name": "tests-dags", "classpath": _LOCAL_BUNDLE,
                     "kwargs": {"path": str(REPO / "tests" / "dags")}},
                ]
            ),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "AIRFLOW_CONN_MYSQLCDC_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_MYSQLCDC_MYSQL": json.dumps(
                {"conn_type": "mysql", "host": "127.0.0.1", "port": server.port, "login": "cdc",
                 "password": server.cdc_url.split(":")[2].split("@")[0]}
            ),
        }
    )
    return env


def main() -> int:
    out = REPO / "demo-output"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()
    _step("starting a throwaway MariaDB with the binlog on (ROW, FULL image, FULL metadata)")
    with MariaDBServer() as server:
        print(f"MariaDB on 127.0.0.1:{server.port}, datadir {server.basedir}")
        rng = random.Random(42)
        rows = [(i, f"item-{i}", Decimal(rng.randint(0, 10**7)) / 100) for i in range(1, ROWS + 1)]
        with server.admin() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE demo")
            cur.execute("CREATE TABLE demo.items (id BIGINT PRIMARY KEY, name VARCHAR(64), amount DECIMAL(10,2))")
            cur.executemany("INSERT INTO demo.items VALUES (%s, %s, %s)", rows)
        print(f"created demo.items with {ROWS} rows")

        env = _environment(out, server)
        _step("mysqlcdc check (least-privilege user 'cdc'; password passed by environment)")
        env_check = {**env, "MYSQLCDC_MYSQL_PASSWORD": server.cdc_url.split(":")[2].split("@")[0]}
        check = subprocess.run(["mysqlcdc", "check", "--mysql-url", f"mysql://cdc@127.0.0.1:{server.port}/"],
                               env=env_check)
        if check.returncode != 0:
            return check.returncode

        _step("airflow db migrate (SQLite metadata DB under demo-output/airflow-home)")
        subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True,
                       stdout=subprocess.DEVNULL)

        output = out / "items.parquet"
        conf = {"database": "demo", "table": "items", "max_id": ROWS, "output": str(output)}
        _step(f"airflow dags test mysqlcdc_smoke -c '{json.dumps(conf)}' (Spark job, local[2] master)")
        run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "mysqlcdc_smoke", "-c",
                              json.dumps(conf)], env=env, capture_output=True, text=True)
        (out / "airflow-dags-test.log").write_text(run.stdout + run.stderr)
        if run.returncode != 0 or not output.exists():
            print(run.stdout[-3000:], run.stderr[-3000:])
            print(f"DAG run failed; full log in {out / 'airflow-dags-test.log'}")
            return 1

        _step("comparing the Parquet output with the source, row by row")
        import pyarrow.parquet as pq

        got = [(r["id"], r["name"], r["amount"]) for r in pq.read_table(output).sort_by("id").to_pylist()]
        if got != rows:
            print(f"MISMATCH: {len(got)} rows in the output, {len(rows)} in the source")
            return 1
        print(f"{len(got)} rows in {output} equal the source")
    print(f"\ndemo finished in {time.monotonic() - started:.0f}s; Airflow log: {out / 'airflow-dags-test.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
