"""``make demo``: run the example DAG end to end on embedded defaults and say what happened.

Starts a throwaway MariaDB (``MYSQLCDC_DEMO_SERVER=mysql``, ``make demo SERVER=mysql``: Oracle MySQL) with the
binlog on, fills ``demo.orders`` and keeps writing to it, then runs
``mysqlcdc check`` and the example DAG with ``airflow dags test mysqlcdc_replication -c '{...}'`` (plan ->
snapshot groups on Spark local[2] -> available-now stream) while the writes go on. After the writer stops, the
CLI catches the stream up from the DAG's checkpoint and shows ``status`` and the ``mirror``; finally the
mirror is compared with the source row by row. Everything lives under ``demo-output/`` (its Airflow home
included); the password travels by environment (an Airflow connection in ``AIRFLOW_CONN_MYSQLCDC_SOURCE``)
only.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

from airflow_provider_mysqlcdc.engine.common.environment import (
    CHUNK_STORE_URL_ENV,
    MYSQL_PASSWORD_ENV,
    MYSQL_URL_ENV,
)
from airflow_provider_mysqlcdc.testing.mariadb import CDC_PASSWORD, MariaDBServer
from airflow_provider_mysqlcdc.testing.server_process import ThrowawayServer

DEMO_SERVER_ENV = "MYSQLCDC_DEMO_SERVER"  # mariadb (default) or mysql

REPO = Path(__file__).resolve().parents[2]
ROWS = 20_000
TABLE = "demo.orders"


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _run(args: list[str], env: dict[str, str]) -> None:
    print("$ mysqlcdc " + " ".join(args), flush=True)
    result = subprocess.run([str(Path(sys.executable).parent / "mysqlcdc"), *args], env=env, check=False)
    if result.returncode != 0:
        raise SystemExit(f"demo: `mysqlcdc {args[0]}` failed with exit code {result.returncode}")


def _airflow(args: list[str], env: dict[str, str], quiet: bool = False) -> None:
    """Run the Airflow CLI; with ``quiet``, show its task summary lines instead of every log line."""
    print("$ airflow " + " ".join(args), flush=True)
    # not from the checkout: its *.egg-info would make Airflow find the plugin entry point twice
    result = subprocess.run([sys.executable, "-m", "airflow", *args], env=env, capture_output=quiet,
                            text=True, cwd=env["AIRFLOW_HOME"], check=False)
    if quiet:
        lines = (result.stdout + result.stderr).splitlines()
        for line in lines:
            if any(k in line for k in ("Marking task as", "DagRun Finished", "Task failed", "ERROR",
                                       "chunk group:", "asset event", "rows, HW")):
                print("  " + line.strip()[:220])
    if result.returncode != 0 or (quiet and "state=failed" in result.stdout + result.stderr):
        tail = "" if not quiet else "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise SystemExit(f"demo: `airflow {args[0]} {args[1] if len(args) > 1 else ''}` failed\n{tail}")


def _create(server: ThrowawayServer) -> None:
    rng = random.Random(42)
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE demo")
        cur.execute(
            "CREATE TABLE demo.orders (id BIGINT UNSIGNED PRIMARY KEY, customer VARCHAR(40) NOT NULL, "
            "amount DECIMAL(12,2) NOT NULL, status ENUM('new','paid','shipped') NOT NULL, "
            "created DATETIME(6) NOT NULL, updated TIMESTAMP(6) NULL, note JSON NULL)"
        )
        rows = [
            (i, f"customer-{rng.randint(1, 500)}", Decimal(rng.randint(100, 10**6)) / 100,
             rng.choice(["new", "paid", "shipped"]), f"2026-01-01 00:00:00.{i % 1000000:06d}",
             None, '{"gift": false}' if i % 7 == 0 else None)
            for i in range(1, ROWS + 1)
        ]
        cur.executemany("INSERT INTO demo.orders VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)


class Writer(threading.Thread):
    """Keeps changing demo.orders while the snapshot runs: updates, deletes, inserts, key changes."""

    def __init__(self, server: ThrowawayServer) -> None:
        super().__init__(daemon=True)
        self.server, self.stop_event, self.transactions = server, threading.Event(), 0

    def run(self) -> None:
        rng = random.Random(7)
        with self.server.admin("demo") as conn, conn.cursor() as cur:
            while not self.stop_event.is_set():
                k = rng.randint(1, ROWS + 2000)
                op = rng.random()
                if op < 0.5:
                    cur.execute("UPDATE orders SET status = 'paid', amount = amount + 1, updated = NOW(6) "
                                "WHERE id = %s", (k,))
                elif op < 0.65:
                    cur.execute("DELETE FROM orders WHERE id = %s", (k,))
                elif op < 0.9:
                    cur.execute("INSERT IGNORE INTO orders (id, customer, amount, status, created) VALUES "
                                "(%s, 'new customer', 9.99, 'new', NOW(6))", (k,))
                else:
                    cur.execute("UPDATE IGNORE orders SET id = id + 100000 WHERE id = %s", (k,))
                self.transactions += 1
                time.sleep(0.005)


def main() -> int:
    out = REPO / "demo-output"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()
    flavor = os.environ.get(DEMO_SERVER_ENV, "mariadb").lower()
    if flavor not in ("mariadb", "mysql"):
        raise SystemExit(f"demo: {DEMO_SERVER_ENV} must be mariadb or mysql, got {flavor!r}")
    name = "Oracle MySQL" if flavor == "mysql" else "MariaDB"
    _step(f"starting a throwaway {name} with the binlog on (ROW, FULL image, FULL metadata)")
    server: ThrowawayServer
    extras: dict[str, str] = {}
    if flavor == "mysql":
        from airflow_provider_mysqlcdc.testing.mysql import WATERMARK_TABLE, MySQLServer

        server = MySQLServer()
        extras = {"watermark_table": WATERMARK_TABLE}  # Oracle MySQL's exact read view (source-server.md)
    else:
        server = MariaDBServer()
    with server:
        print(f"{name} on 127.0.0.1:{server.port}, datadir {server.basedir}")
        _create(server)
        print(f"created {TABLE} with {ROWS} rows")
        env = dict(os.environ)
        airflow_home = out / "airflow"
        env.update(
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
            **{MYSQL_URL_ENV: server.cdc_url.replace(f":{CDC_PASSWORD}@", "@"),
               MYSQL_PASSWORD_ENV: CDC_PASSWORD},
            AIRFLOW_HOME=str(airflow_home),
            AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{airflow_home / 'airflow.db'}",
            AIRFLOW_CONN_MYSQLCDC_SOURCE=json.dumps({"conn_type": "mysql", "host": "127.0.0.1",
                                                     "port": server.port, "login": "cdc",
                                                     "password": CDC_PASSWORD, "extra": extras}),
            AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        )
        lake = str(out / "lake")
        checkpoint = str(out / "lake" / "_mysqlcdc_checkpoint")
        env[CHUNK_STORE_URL_ENV] = str(out / "lake" / "_mysqlcdc_chunks.db")

        _step("mysqlcdc check (least-privilege user 'cdc'; password passed by environment)")
        _run(["check"], env)
        airflow_home.mkdir(parents=True, exist_ok=True)
        _step("airflow db migrate (a SQLite Airflow home in demo-output/airflow)")
        _airflow(["db", "migrate"], env, quiet=True)

        writer = Writer(server)
        writer.start()
        conf = {"tables": TABLE, "output": lake, "chunk_size": 2000, "chunks_per_group": 4}
        _step("airflow dags test mysqlcdc_replication: plan -> snapshot groups on Spark -> stream, "
              "under writes")
        _airflow(["dags", "test", "mysqlcdc_replication", "-c", json.dumps(conf)], env, quiet=True)
        time.sleep(1)
        writer.stop_event.set()
        writer.join()
        print(f"the writer committed {writer.transactions} transactions during the DAG run")

        _step("mysqlcdc stream --available-now: catch up what the writer did after the DAG's stream task")
        _run(["stream", "--tables", TABLE, "--output", lake, "--checkpoint", checkpoint, "--available-now"],
             env)
        _step("mysqlcdc status")
        _run(["status", "--output", lake], env)
        _step("mysqlcdc mirror: the current state of the table")
        _run(["mirror", "--table", TABLE, "--output", lake], env)

        _step("comparing the mirror with the source, row by row")
        from airflow_provider_mysqlcdc.engine.lake.mirror_reader import read_mirror
        from airflow_provider_mysqlcdc.engine.model import values
        from airflow_provider_mysqlcdc.engine.model.tables import TableId
        from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
        from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect

        settings = MySQLSettings.from_url(server.cdc_url)
        with connect(settings) as conn, conn.cursor() as cur:
            schema = load_schema(conn, TableId.parse(TABLE))
            normalize = values.snapshot_normalizer(schema)
            cur.execute(f"SELECT {values.select_list(schema)} FROM {schema.table.quoted}")
            source = Counter(normalize(r) for r in cur.fetchall())
        mirror = Counter(tuple(r[c] for c in schema.column_names)
                         for r in read_mirror(lake, TABLE).to_pylist())
        if mirror != source:
            print(f"MISMATCH: {sum((source - mirror).values())} rows missing, "
                  f"{sum((mirror - source).values())} extra")
            return 1
        print(f"{sum(mirror.values())} rows in the mirror equal the source, value for value")
    print(f"\ndemo finished in {time.monotonic() - started:.0f}s; output in {out}")
    print("read it as a Delta table: DeltaTable('demo-output/lake/demo/orders/mirror').to_pandas() (pip "
          "package deltalake), or pl.read_delta(...) in Polars; the changes are in "
          "demo-output/lake/demo/orders/changelog")
    return 0


if __name__ == "__main__":
    sys.exit(main())
