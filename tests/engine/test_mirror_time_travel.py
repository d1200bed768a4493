"""Time travel on the mirror: the table as of a recorded binlog position, time or Delta version equals the
source as it was at that position (dumped there, in the test), while writers change the tables in between.

Real parts: the session's MariaDB with binlog, concurrent writers with fixed seeds, the engine's pipeline
writing the documented layout (``tests/support/layout_pipeline.py``), the mirror refresh committing Delta
versions; each read goes through ``mirror_reader.read_mirror`` and, independently, delta-rs.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cli.main import main as mysqlcdc
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids, read_batch
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.mirror_reader import (
    MirrorVersion,
    mirror_version_at,
    mirror_versions,
    read_mirror,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from tests.support.engine_harness import assert_same_rows
from tests.support.layout_pipeline import LayoutPipeline, drain_and_refresh, stream_while_writing
from tests.support.workload import TABLE_SPECS, Workload, create_tables, seed_rows

SPECS = [s for s in TABLE_SPECS if s.name in ("t_int", "t_dt", "t_comp", "t_nopk")]
SEED = 41
WRITES_PER_BATCH = 30  # transactions written before each stream batch: every table changes per round


@dataclass(frozen=True)
class Checkpoint:
    """A mirror version recorded while the writers were paused, and the source dumped right then."""

    table: TableId
    version: MirrorVersion
    source: list[tuple]


def _rows(table: pa.Table, names: list[str]) -> list[tuple]:
    return [tuple(r[c] for c in names) for r in values.canonical_pylist(table)]


def _delta_rows(root: str, table: TableId, version: int, names: list[str]) -> list[tuple]:
    """The version as delta-rs alone reads it (TIME stays microseconds: these tables have none)."""
    return _rows(DeltaTable(mirror_table_uri(root, table), version=version).to_pyarrow_table(), names)


def test_time_travel_to_recorded_positions_equals_the_source_then(mysql_server, mysql_db, tmp_path, capsys):
    rng = random.Random(SEED)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    with mysql_server.admin() as conn:
        create_tables(conn, mysql_db, SPECS)
        seed_rows(conn, mysql_db, rows_per_table=300, seed=SEED, specs=SPECS)
    root = str(tmp_path / "out")
    pipe = LayoutPipeline(settings, ChunkStore(str(tmp_path / "chunks.db")), mysql_db, root=root,
                          chunk_size=90)
    refresher = MirrorRefresher(root, pipe.store, settings=settings)

    def writers(seed: int) -> Workload:
        return Workload(lambda: mysql_server.admin(), mysql_db, seed=seed, writers=2, specs=SPECS).start()

    workload = writers(SEED)
    try:
        plans = pipe.plan([f"{mysql_db}.t_*"], chunk_keys={f"{mysql_db}.t_nopk": "ck"})
        tables = [p.table for p in plans]
        pipe.tables = tables
        for plan in plans:
            for chunk in plan.chunks:
                pipe.snapshot(plan, chunk.chunk_id)
        pipe.open_stream(tables)
        stream_while_writing(pipe, refresher, rng, workload, batches=3, transactions=WRITES_PER_BATCH)
        checkpoints: list[Checkpoint] = []
        for round_ in range(3):
            workload.stop()
            # the stream passes every write: each table's latest version is exact now
            drain_and_refresh(pipe, refresher)
            for table in tables:
                latest = mirror_versions(root, table)[-1]
                assert latest.as_of is not None, f"{table}: the mirror is not consistent after draining"
                checkpoints.append(Checkpoint(table, latest, pipe.source(table)))
            workload = writers(SEED + 1 + round_)
            stream_while_writing(pipe, refresher, rng, workload, batches=3, transactions=WRITES_PER_BATCH)
    finally:
        stats = workload.stop()
    assert stats.transactions > 10, stats
    drain_and_refresh(pipe, refresher)

    names = {t: pipe.schemas[t].column_names for t in tables}
    for point in checkpoints:
        table, version = point.table, point.version
        # a position the mirror recorded: exactly the source as dumped there
        at_position = read_mirror(root, table, as_of=version.as_of)
        assert_same_rows(_rows(at_position, names[table]), point.source, f"{table} as of {version.as_of}")
        assert_same_rows(_delta_rows(root, table, version.version, names[table]), point.source, table)
        # the Delta version number and the time it was written name the same state
        assert mirror_version_at(root, table, version.version) == version
        assert mirror_version_at(root, table, version.written_at).version == version.version
        # a position inside the next batch, before its end: still that version (the next ends after it)
        inside = BinlogPosition(version.as_of.file, version.as_of.pos + 1)
        following = [v for v in mirror_versions(root, table) if v.version > version.version and v.as_of]
        if following and following[0].as_of > inside:
            assert mirror_version_at(root, table, inside).version == version.version
    # the tables did change between the recorded points: time travel was put to the test
    for table in tables:
        own = [p for p in checkpoints if p.table == table]
        assert (any(a.source != b.source for a, b in itertools.pairwise(own))
                or own[0].source != pipe.source(table)), table
        current = read_mirror(root, table)
        assert_same_rows(_rows(current, names[table]), pipe.source(table), table)

    # status says where the Delta tables readers open stand
    report = collect_status(pipe.store, root, tables)
    for table, status in zip(tables, report.tables):
        latest = mirror_versions(root, table)[-1]
        assert status.mirror["delta_version"] == latest.version, status.mirror
        assert status.mirror["delta_as_of"] == str(latest.as_of)
        with_changes = [b for b in committed_batch_ids(root, table) if read_batch(root, table, b).files]
        assert status.mirror["changelog_delta_batch"] == with_changes[-1]

    table = tables[0]
    versions = mirror_versions(root, table)
    first = next(v for v in versions if v.as_of is not None)
    with pytest.raises(CdcError, match="before the earliest position"):
        read_mirror(root, table, as_of=BinlogPosition(first.as_of.file, 4))
    far = BinlogPosition(first.as_of.file.rsplit(".", 1)[0] + ".999999", 4)
    with pytest.raises(CdcError, match="is past it"):
        read_mirror(root, table, as_of=far)
    with pytest.raises(CdcError, match="no mirror version was written at or before"):
        read_mirror(root, table, as_of=versions[0].written_at - timedelta(days=1))
    with pytest.raises(CdcError, match="no Delta version"):
        read_mirror(root, table, as_of=versions[-1].version + 5)

    # the CLI: --as-of a position prints that state, and says which version it read
    point = next(p for p in checkpoints if p.table.table == "t_int")
    capsys.readouterr()
    assert mysqlcdc(["mirror", "--table", str(point.table), "--output", root, "--as-of",
                     str(point.version.as_of), "--print"]) == 0
    out, err = capsys.readouterr()
    printed = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["id"] for r in printed) == sorted(r[0] for r in point.source)
    assert (f"mirror version {point.version.version} " in err
            and f"as of binlog position {point.version.as_of}" in err)
    assert mysqlcdc(["mirror", "--table", str(point.table), "--output", root, "--as-of",
                     str(point.version.version), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["as_of"] == str(point.version.as_of)
    assert mysqlcdc(["mirror", "--table", str(point.table), "--output", root, "--no-refresh", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["delta_version"]["version"] == mirror_versions(root, point.table)[-1].version
    with pytest.raises(SystemExit):
        mysqlcdc(["mirror", "--table", str(point.table), "--output", root, "--as-of", "yesterday"])
    assert "neither a binlog position" in capsys.readouterr().err


def test_read_mirror_without_a_delta_table_refuses_time_travel(tmp_path):
    with pytest.raises(CdcError, match="no mirror Delta table"):
        read_mirror(str(tmp_path), "db.t", as_of=datetime.now(UTC))
