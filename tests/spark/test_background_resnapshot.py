"""A re-snapshot after DDL runs in the background: the stream keeps emitting every table while the table is
planned and read again, a second DDL during that re-snapshot replaces it with a newer plan, and the mirror
ends equal to the source, row by row.

``t_big`` is swapped for a copy (an online schema change's cut-over: RENAME TABLE) while seeded writers change
both tables; the re-snapshot reads under a rate limit, so it takes seconds, during which the stream must go on
committing batches of ``t_other``. While that re-snapshot is in flight, a TRUNCATE hits ``t_big``; while the
re-snapshot after it is in flight, the stream is stopped, and its next start takes the re-snapshot up.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import COMMITTED, ChunkStore
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import load_plan, plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.source.limits import SourceLimits
from airflow_provider_mysqlcdc.spark.stream.config import StreamConfig
from airflow_provider_mysqlcdc.spark.stream.job import mirror_refresh, run_stream, snapshot_table
from airflow_provider_mysqlcdc.spark.stream.resnapshots import ResnapshotLedger
from tests.support.engine_harness import assert_mirror_equals_source, password_file
from tests.support.servers import numbers
from tests.support.workload import SingleRowWriters

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run

SEED = 47
BIG_ROWS = 6000
PER_BATCH = 25  # statements each writer writes per committed batch: the volume follows the batches


def _setup(server, db: str) -> None:
    with server.admin(db) as conn, conn.cursor() as cur:
        for name in ("t_big", "t_other", "t_big_new"):
            cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, a INT)")
        cur.execute(f"INSERT INTO t_big SELECT seq, seq % 97 FROM {numbers(400)}")
        cur.execute(f"INSERT INTO t_other SELECT seq, seq % 89 FROM {numbers(300)}")
        # the cut-over copy: more rows, so its snapshot takes a while under the rate limit
        cur.execute(f"INSERT INTO t_big_new SELECT seq, seq % 83 FROM {numbers(BIG_ROWS)}")


class _Batches:
    """Wraps the mirror hook: records, per committed batch, the tables it changed and whether a re-snapshot
    of ``t_big`` was in flight (its latest plan not fully committed); fires the second DDL once three batches
    with other tables' changes committed during the first re-snapshot. Each batch lets the ``writers`` write
    ``PER_BATCH`` more statements (bounded by volume: a slow machine writes no more per batch)."""

    def __init__(self, hook, store_url: str, big: TableId, second_ddl, writers=()) -> None:
        self.hook, self.store_url, self.big, self.second_ddl = hook, store_url, big, second_ddl
        self.writers = writers
        self.log: list[tuple[int, set[str], bool, int]] = []
        self.fired = threading.Event()

    def __call__(self, batch_id: int, tables: list[TableId]) -> None:
        self.hook(batch_id, tables)
        for writer in self.writers:
            writer.allow(PER_BATCH)
        with ChunkStore(self.store_url) as store:
            generation = store.latest_generation(str(self.big)) or 0
            chunks = store.chunks(str(self.big), generation)
        in_flight = any(c.status != COMMITTED for c in chunks)
        self.log.append((batch_id, {str(t) for t in tables}, in_flight, generation))
        others = [e for e in self.log if e[2] and e[3] == 2 and len(e[1]) > (str(self.big) in e[1])]
        if len(others) >= 3 and in_flight and generation == 2 and not self.fired.is_set():
            self.fired.set()
            threading.Thread(target=self.second_ddl, daemon=True).start()


def _stop_query(spark, name: str, done: threading.Event) -> None:
    while not done.is_set():
        for query in spark.streams.active:
            if query.name == name:
                query.stop()
        done.wait(0.5)


def test_resnapshot_runs_in_the_background_and_a_second_ddl_replaces_it(mysql_server, mysql_db, tmp_path,
                                                                        spark):
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    _setup(mysql_server, mysql_db)
    big, other = TableId(mysql_db, "t_big"), TableId(mysql_db, "t_other")
    config = StreamConfig(
        mysql_url=settings.url_without_password(), tables=(str(big), str(other)),
        chunk_store=str(tmp_path / "chunks.db"), output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "ckpt"),
        password_file=password_file(tmp_path, settings), trigger="processing-time=1 second",
        query_name="background-resnapshot", lock_lease_seconds=20.0,
        # one read at a time at 500 rows/s: the re-snapshot of 6,000 rows takes >= 12 s
        source_limits=SourceLimits(max_concurrent_reads=1, rows_per_second=500),
    )
    with ChunkStore(config.chunk_store) as store:
        plan_tables(settings, store, [str(big), str(other)], chunk_size=300)
    for table in (big, other):
        assert snapshot_table(spark, config, table).ok

    second_ddl_done: list[float] = []
    failures: list[BaseException] = []

    def second_ddl() -> None:
        try:
            with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
                cur.execute("TRUNCATE TABLE t_big")
                cur.execute(f"INSERT INTO t_big SELECT seq + 20000, seq % 7 FROM {numbers(2000)}")
            second_ddl_done.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    big_writer = SingleRowWriters(lambda: mysql_server.admin(mysql_db), ("t_big",), "a", SEED,
                                  limit=PER_BATCH)
    other_writer = SingleRowWriters(lambda: mysql_server.admin(mysql_db), ("t_other",), "a", SEED + 1,
                                    limit=PER_BATCH)
    stopped = threading.Event()
    with mirror_refresh(config) as hook:
        batches = _Batches(hook, config.chunk_store, big, second_ddl, (big_writer, other_writer))

        def stream() -> None:
            try:
                run_stream(spark, config, on_batch_committed=batches)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                failures.append(exc)

        runner = threading.Thread(target=stream, daemon=True)
        big_writer.start()
        other_writer.start()
        try:
            runner.start()
            _wait(lambda: len(batches.log) >= 2 or failures, 120, "the stream's first batches")
            with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
                cur.execute("RENAME TABLE t_big TO t_big_old, t_big_new TO t_big")

            def replanned_again() -> bool:
                with ChunkStore(config.chunk_store) as store:
                    return bool(failures) or store.latest_generation(str(big)) == 3

            _wait(replanned_again, 240, "the second DDL and the plan after it")
        finally:
            big_writer.stop()
            other_writer.stop()
            # stop the stream while generation 3 is being read: its next start must take the re-snapshot up
            with ChunkStore(config.chunk_store) as store:
                open_at_stop = [c.chunk_id for c in store.chunks(str(big), 3) if c.status != COMMITTED]
            stopper = threading.Thread(target=_stop_query, args=(spark, config.query_name, stopped),
                                       daemon=True)
            stopper.start()
            runner.join(120)
            stopped.set()
        assert not failures, failures
        assert not runner.is_alive(), "the stream did not stop"
        assert open_at_stop and ResnapshotLedger(config.checkpoint).pending(), "nothing left to take up"
        # the next start takes the re-snapshot up, catches up with the last writes and waits for it
        run_stream(spark, dataclasses.replace(config, trigger="available-now"), on_batch_committed=hook)

    assert batches.fired.is_set() and second_ddl_done, "the second DDL never ran during the re-snapshot"
    assert not ResnapshotLedger(config.checkpoint).pending()
    with ChunkStore(config.chunk_store) as store:
        superseded = store.chunks(str(big), 2)
        assert store.latest_generation(str(big)) == 3
        assert all(c.status == COMMITTED for c in store.chunks(str(big), 3))
        # the new plans keep the table's plan settings (here its chunk size)
        assert {load_plan(store, big, g).chunk_size for g in (2, 3)} == {300}
    # the TRUNCATE landed while generation 2 was being read: it never fully committed, generation 3 replaced
    # it
    assert any(c.status != COMMITTED for c in superseded), [c.status for c in superseded]
    during = [entry for entry in batches.log if entry[2] and entry[3] == 2]
    assert len([entry for entry in during if str(other) in entry[1]]) >= 3, during
    assert read_manifest(config.output, big).generation == 3
    assert_mirror_equals_source(settings, config.output, [big, other], min_rows=100)


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_a_stream_killed_after_planning_a_resnapshot_takes_it_up_at_its_next_start(
    mysql_server, mysql_db, tmp_path, spark
):
    """The state a SIGKILL right after the re-plan leaves (a new generation planned, nothing of it read, the
    ledger naming it): the next available-now run reads it, switches the mirror, and owes nothing after."""
    from airflow_provider_mysqlcdc.engine.snapshot.replan import replan_table
    from airflow_provider_mysqlcdc.spark.stream.resnapshots import Pending

    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t_kill (id INT PRIMARY KEY, a INT)")
        cur.execute(f"INSERT INTO t_kill SELECT seq, seq FROM {numbers(200)}")
    table = TableId(mysql_db, "t_kill")
    config = StreamConfig(
        mysql_url=settings.url_without_password(),
        tables=(str(table),), chunk_store=str(tmp_path / "chunks.db"),
        output=str(tmp_path / "out"), checkpoint=str(tmp_path / "ckpt"),
        password_file=password_file(tmp_path, settings), lock_lease_seconds=20.0,
    )
    with ChunkStore(config.chunk_store) as store:
        plan_tables(settings, store, [str(table)], chunk_size=50)
    assert snapshot_table(spark, config, table).ok
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM t_kill WHERE id > 150")
    with mirror_refresh(config) as hook:
        run_stream(spark, config, on_batch_committed=hook)
        # nothing changes in the binlog from here on: the next run commits no batch of its own, so the mirror
        # must switch to the new generation from the sink's last batch of the earlier run
        with ChunkStore(config.chunk_store) as store:
            plan = replan_table(settings, store, table)
        ResnapshotLedger(config.checkpoint).put(Pending(str(table), plan.generation, "mysql-bin.000001:4"))
        run_stream(spark, config, on_batch_committed=hook)
    assert not ResnapshotLedger(config.checkpoint).pending()
    assert read_manifest(config.output, table).generation == plan.generation == 2
    assert_mirror_equals_source(settings, config.output, [table], min_rows=150)
