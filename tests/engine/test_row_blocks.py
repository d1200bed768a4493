"""The stream's columnar path (row blocks from the decoder through the filter to the Arrow the Spark source
yields) against the change-by-change path it replaced, on a real server: the same records, the same drops,
the same resume offsets at every row budget, the same Arrow, under a seeded workload of inserts, updates, key
moves and deletes in multi-statement transactions, with chunks committed at different HWs so the filter
drops some changes and keeps others."""
from __future__ import annotations

import random

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.binlog.changes import Heartbeat, RowChange, SchemaChange
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.records import UPDATE_BEFORE
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.phase import plan_tables
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.stream.change_stream import ChangeStream
from airflow_provider_mysqlcdc.engine.stream.transport import ROWS_OP, stream_batches, stream_changes
from tests.engine.test_binlog_reader import execute, status
from tests.support.servers import numbers

SEED = 1811


def _workload(conn, rng: random.Random, transactions: int, first_id: int) -> None:
    ids = {"k": list(range(1, 201)), "n": list(range(1, 201))}
    next_id = first_id
    for _ in range(transactions):
        statements = []
        for _ in range(rng.randint(1, 4)):
            table = rng.choice(["k", "n"])
            kind = rng.random()
            if kind < 0.35:
                rows = []
                for _ in range(rng.randint(1, 30)):
                    next_id += 1
                    ids[table].append(next_id)
                    rows.append(f"({next_id}, {rng.randint(0, 9)}, 'v{rng.randint(0, 99999)}')")
                statements.append(f"INSERT INTO {table} VALUES {', '.join(rows)}")
            elif kind < 0.75:
                low = rng.choice(ids[table])
                statements.append(f"UPDATE {table} SET g = g + 1, s = CONCAT(s, 'u') "
                                  f"WHERE id BETWEEN {low} AND {low + rng.randint(0, 40)}")
            elif kind < 0.85 and table == "k":  # key moves: the filter judges each half by its own chunk
                old = rng.choice(ids["k"])
                next_id += 1
                statements.append(f"UPDATE k SET id = {next_id} WHERE id = {old}")
                ids["k"] = [i for i in ids["k"] if i != old] + [next_id]
            else:
                low = rng.choice(ids[table])
                statements.append(f"DELETE FROM {table} "
                                  f"WHERE id BETWEEN {low} AND {low + rng.randint(0, 10)}")
        execute(conn, "BEGIN", *statements, "COMMIT")


def _reference_read(reader: BinlogReader, stream: ChangeStream, start: BinlogOffset, end, max_rows: int):
    """The change-by-change read the columnar path replaced: RowChanges, the row budget counted per image,
    ``StreamFilter.apply``."""
    pending: list[RowChange] = []
    offset, rows = start, 0
    for item in reader.read_with_heartbeats(start, end):
        if type(item) is SchemaChange:
            offset = item.offset
            continue
        if isinstance(item, Heartbeat):
            offset = item.offset
            if rows >= max_rows and not (pending and pending[-1].op == UPDATE_BEFORE):
                break
            continue
        pending.append(item)
        offset = item.offset_after
        rows += 1
        if rows >= max_rows and item.op != UPDATE_BEFORE:
            break
    else:
        offset = reader.last_offset or offset
    return stream._filter.apply(pending), offset, rows


def _arrow(batches) -> dict[str, pa.Table]:
    out: dict[str, list] = {}
    for batch in batches:
        for changes in stream_changes(batch):
            out.setdefault(changes.table, []).append(changes.batch)
    return {t: pa.Table.from_batches(b) for t, b in out.items()}


def test_columnar_stream_equals_the_change_by_change_path(mysql_server, mysql_db, tmp_path):
    rng = random.Random(SEED)
    settings = MySQLSettings.from_url(mysql_server.cdc_url)
    tables = [TableId(mysql_db, "k"), TableId(mysql_db, "n")]
    with mysql_server.admin(mysql_db) as conn:
        execute(conn, "CREATE TABLE k (id INT PRIMARY KEY, g INT, s VARCHAR(200))",
                "CREATE TABLE n (id INT, g INT, s VARCHAR(200))",  # no primary key: keyed by the chunk key
                f"INSERT INTO k SELECT seq, seq % 7, CONCAT('r', seq) FROM {numbers(200)}",
                f"INSERT INTO n SELECT seq, seq % 7, CONCAT('r', seq) FROM {numbers(200)}")
        # planned on the first 200 keys: 5 chunks of 40, the new keys in the last one
        store = ChunkStore(str(tmp_path / "chunks.db"))
        plans = plan_tables(settings, store, [str(t) for t in tables], chunk_size=40,
                            chunk_keys={str(tables[1]): "id"})
        start = status(conn)
        _workload(conn, rng, 60, first_id=1000)
        middle = status(conn)
        _workload(conn, rng, 60, first_id=100_000)
        end = status(conn)
    for plan in plans:  # HWs at the start, in the middle, or not committed: the filter keeps, drops, keeps
        for chunk in plan.chunks:
            hw = [start, middle, None][chunk.chunk_id % 3]
            store.start_chunk(plan.table, plan.generation, chunk.chunk_id)
            if hw is not None:
                store.commit_chunk(plan.table, plan.generation, chunk.chunk_id, rows=0, lw=hw, hw=hw,
                                   output_version="test")
    stream = ChangeStream(settings, store, tables, allocate_server_id(settings, 3))
    reference = ChangeStream(settings, store, tables, allocate_server_id(settings, 4))
    reader = BinlogReader(settings, allocate_server_id(settings, 5), set(tables), reference.schemas)
    offset, ref_offset = BinlogOffset.at(start), BinlogOffset.at(start)
    reads = dropped = 0
    columnar, change_by_change = [], []
    while offset.position.key < end.key or not offset.at_boundary:
        max_rows = rng.choice([1, 2, 3, 7, 13, 50, 150, 600])
        batch = stream.read(offset, end, max_rows=max_rows)
        records, ref_end, ref_rows = _reference_read(reader, reference, ref_offset, end, max_rows)
        assert batch.end == ref_end and batch.rows_read == ref_rows, (reads, max_rows, batch.end, ref_end)
        assert batch.records == records, reads
        assert batch.emitted == len(records)
        columnar += list(stream_batches(rows=batch.rows, schemas=batch.schemas))
        change_by_change += list(stream_batches(records, schemas=batch.schemas))
        dropped += batch.dropped
        offset = ref_offset = batch.end
        reads += 1
        assert reads < 2000, "the reads do not advance"
    got, want = _arrow(columnar), _arrow(change_by_change)
    assert set(got) == {str(t) for t in tables} and dropped > 0 and reads > 40, (reads, dropped)
    for table in want:
        assert got[table].equals(want[table]), table
        ops = set(got[table].column("_op").to_pylist())
        assert ops >= {"+I", "-U", "+U", "-D"}, (table, ops)
    assert "-D" in got[str(tables[0])].column("_op").to_pylist()
    assert all(b.column("_op")[0].as_py() != ROWS_OP or b.num_rows == 1 for b in columnar)
