"""Oracle MySQL's own features through snapshot + stream, under writes between every step: VECTOR columns
(bytes, as the SELECT returns them) and tables whose primary key the server generated and hid
(``sql_generate_invisible_primary_key``). The settings ``check`` refuses on MySQL (binlog compression, partial
JSON, ``binlog_order_commits``) are in test_readiness_check.py."""
from __future__ import annotations

import random

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from tests.support.engine_harness import Pipeline, assert_same_rows

pytestmark = pytest.mark.mysql_only


def _vector(rng: random.Random, n: int) -> str:
    picks = (rng.choice([0.0, -1.5, 3.25e38, rng.uniform(-1e6, 1e6)]) for _ in range(n))
    return "[" + ",".join(repr(p) for p in picks) + "]"


def _write(admin, rng: random.Random, count: int, next_id: list[int]) -> None:
    with admin.cursor() as cur:
        for _ in range(count):
            op = rng.random()
            if op < 0.4:
                next_id[0] += 1
                cur.execute("INSERT INTO vec VALUES (%s, STRING_TO_VECTOR(%s), NULL, %s)",
                            (next_id[0], _vector(rng, 3), f"r{next_id[0]}"))
                cur.execute("INSERT INTO hidden (a, b) VALUES (%s, %s)",
                            (rng.randint(0, 9), "x" * rng.randint(0, 9)))
            elif op < 0.7:
                cur.execute("UPDATE vec SET v = STRING_TO_VECTOR(%s), w = STRING_TO_VECTOR(%s) WHERE id = %s",
                            (_vector(rng, 3), _vector(rng, 1), rng.randint(1, next_id[0])))
                cur.execute("UPDATE hidden SET b = CONCAT(b, 'y') WHERE a = %s", (rng.randint(0, 9),))
            else:
                cur.execute("DELETE FROM vec WHERE id = %s", (rng.randint(1, next_id[0]),))
                cur.execute("DELETE FROM hidden WHERE a = %s LIMIT 1", (rng.randint(0, 9),))


def test_vectors_and_invisible_primary_keys_replicate_exactly(mysql_server, mysql_db, tmp_path):
    rng = random.Random(97)
    next_id = [0]
    with mysql_server.admin(mysql_db) as admin:
        with admin.cursor() as cur:
            cur.execute("CREATE TABLE vec (id INT PRIMARY KEY, v VECTOR(3) NOT NULL, w VECTOR(1) NULL, "
                        "s VARCHAR(20) CHARACTER SET latin1)")
            cur.execute("SET SESSION sql_generate_invisible_primary_key = ON")
            cur.execute("CREATE TABLE hidden (a INT, b VARCHAR(40))")
            cur.execute("SET SESSION sql_generate_invisible_primary_key = OFF")
            cur.executemany("INSERT INTO hidden (a, b) VALUES (%s, %s)",
                            [(i % 10, f"b{i}") for i in range(100)])
        _write(admin, rng, 120, next_id)
        pipe = Pipeline(MySQLSettings.from_url(mysql_server.cdc_url), ChunkStore(str(tmp_path / "chunks.db")),
                        mysql_db, chunk_size=20)
        plans = pipe.plan([f"{mysql_db}.vec", f"{mysql_db}.hidden"])
        assert {str(p.table): p.key_columns for p in plans} == {
            f"{mysql_db}.vec": ("id",), f"{mysql_db}.hidden": ("my_row_id",)}
        for plan in plans:
            assert len(plan.chunks) >= 2, plan
            for chunk in plan.chunks:
                _write(admin, rng, 5, next_id)  # between the chunk reads
                pipe.snapshot(plan, chunk.chunk_id)
        pipe.open_stream([p.table for p in plans])
        for _ in range(3):
            _write(admin, rng, 30, next_id)
            pipe.pump(rng, batches=2)
    pipe.catch_up()
    for table in (TableId(mysql_db, "vec"), TableId(mysql_db, "hidden")):
        source = pipe.source(table)
        assert len(source) > 20
        assert_same_rows(pipe.mirror(table), source, table)
