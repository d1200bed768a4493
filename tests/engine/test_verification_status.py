"""What ``status`` says about verify (issue 39): each table's last verification and its open mismatches, from
a real chunk store (SQLite) with recorded verifications; no MySQL, no lake.

A mismatch is open until the chunk is snapshotted again (then it is superseded: verify again) or repaired; the
text names the repair command, the JSON carries the same, and the chunk store is asked once per table.
"""
from __future__ import annotations

import argparse
import json
import logging

import sqlalchemy as sa

from airflow_provider_mysqlcdc.cli import status as cli_status
from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, Verification
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk, ChunkPlan
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.status.report import collect_status
from airflow_provider_mysqlcdc.engine.status.verification import OPEN, SUPERSEDED

TABLE = "shop.orders"
AT, WINDOW = "mysql-bin.000012:4567", "mysql-bin.000012:3000..mysql-bin.000012:3900"
WHY = ("the lake's rows of this chunk differ from the source's at mysql-bin.000012:4567: 100 source rows, "
       "99 in the lake by the mirror rule (snapshot and changelog); key range id in [(100,), (200,))")


def _committed_store(tmp_path, chunks: int = 4) -> tuple[ChunkStore, int]:
    """``shop.orders`` planned into chunks of 100 ids and every chunk committed."""
    store = ChunkStore(str(tmp_path / "chunks.db"))
    bounds = [None, *((100 * i,) for i in range(1, chunks)), None]
    parts = tuple(Chunk(i, bounds[i], bounds[i + 1]) for i in range(chunks))
    plan = ChunkPlan(TableId.parse(TABLE), 1, ("id",), parts, "even", 100, 100 * chunks)
    generation = store.create_plan(TABLE, plan.to_dict(), run_id="plan")
    for chunk_id in range(chunks):
        _commit(store, generation, chunk_id)
    return store, generation


def _commit(store: ChunkStore, generation: int, chunk_id: int, table: str = TABLE) -> None:
    attempt = store.start_chunk(table, generation, chunk_id, run_id="run").attempts
    store.commit_chunk(table, generation, chunk_id, rows=100, lw=BinlogPosition("mysql-bin.000012", 4),
                       hw=BinlogPosition("mysql-bin.000012", 10 + chunk_id), output_version=f"v{attempt}",
                       run_id="run", attempt=attempt)


def _verdict(verify_id: str, chunk_id: int, result: str, position: str = AT, generation: int = 1,
             source: int = 100, lake: int = 100, why: str = "") -> Verification:
    detail = {"why": why, "source_hash": "1", "lake_hash": "2"} if why else {}
    return Verification(verify_id, TABLE, generation, chunk_id, result, position, source, lake, detail,
                        run_id="verify_run")


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mysqlcdc")
    cli_status.add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_status_shows_the_last_verification_and_open_mismatches(tmp_path, capsys, monkeypatch):
    store, generation = _committed_store(tmp_path)
    t = collect_status(store, None, [TABLE]).tables[0]
    assert t.verification is None and "verified" not in collect_status(store, None, [TABLE]).render()

    # a first run: chunk 1 differs, chunk 2 could not be verified yet, chunk 3 was not selected
    store.record_verification(_verdict("v-old", 0, "mismatch", why="an older finding"))
    for v in (_verdict("v1", 0, "match"), _verdict("v1", 1, "mismatch", lake=99, why=WHY),
              _verdict("v1", 2, "unverified", WINDOW, lake=0, why="the stream has committed up to ...")):
        store.record_verification(v)
    report = collect_status(store, None, [TABLE])
    v = report.tables[0].verification
    assert v is not None and (v.verify_id, v.generation, v.chunks) == ("v1", generation, 4)
    assert (v.matched, v.differing, v.unverified, v.repaired, v.superseded, v.never) == (1, 1, 1, 0, 0, 1)
    assert (v.position, v.first_position) == (AT, "mysql-bin.000012:3900")  # a window counts by its end
    [m] = v.mismatches
    assert (m.chunk_id, m.state, m.key_range) == (1, OPEN, "id in [100, 200)")
    assert (m.source_rows, m.lake_rows) == (100, 99)
    assert m.why == WHY and m.position == AT and m.verify_id == "v1" and not m.rerun_pending
    text = report.render()
    when = f"{v.verified_at:%Y-%m-%d %H:%M} UTC"
    assert (f"{TABLE}: verified {when} at {AT} (verify v1, generation 1): 1 chunk match, 1 differs "
            "(chunk 1), 1 unverified, 1 not verified yet") in text, text
    assert f"  chunk 1 (id in [100, 200)): source 100 rows, lake 99 rows at {AT}: {WHY}" in text
    assert f"  repair: mysqlcdc verify --table {TABLE} --chunks 1 --repair" in text
    data = json.loads(json.dumps(report.as_dict()))["tables"][0]["verification"]
    assert (data["verify_id"], data["position"], data["differing"], data["matched"]) == ("v1", AT, 1, 1)
    assert data["mismatches"][0]["chunk_id"] == 1 and data["mismatches"][0]["state"] == OPEN
    assert data["verified_at"] == v.verified_at.isoformat(timespec="seconds")

    # a rerun of chunk 1 is running: still open, and says so; once it commits the mismatch is superseded
    store.start_chunk(TABLE, generation, 1, run_id="rerun")
    [m] = collect_status(store, None, [TABLE]).tables[0].verification.mismatches
    assert m.state == OPEN and m.rerun_pending
    _commit(store, generation, 1)
    report = collect_status(store, None, [TABLE])
    v = report.tables[0].verification
    assert (v.differing, v.superseded) == (0, 1) and v.mismatches[0].state == SUPERSEDED
    assert "1 differed but was snapshotted again since (chunk 1): verify again" in report.render()
    assert f"  verify again: mysqlcdc verify --table {TABLE} --chunks 1\n" in report.render() + "\n"
    assert "repair:" not in report.render()

    # the CLI, as text and as JSON
    monkeypatch.setattr(logging.getLogger("airflow_provider_mysqlcdc"), "propagate", False)
    capsys.readouterr()
    assert _cli(["status", "--chunk-store", str(tmp_path / "chunks.db"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["tables"][0]["verification"]
    assert (shown["superseded"], shown["mismatches"][0]["state"]) == (1, SUPERSEDED)
    assert _cli(["status", "--chunk-store", str(tmp_path / "chunks.db")]) == 0
    assert "differed but was snapshotted again" in capsys.readouterr().out

    # verify --repair: the chunk's latest verdict is "repaired", nothing is open; a later run's verdicts of
    # other chunks do not hide it
    store.record_verification(_verdict("v2", 1, "repaired", "mysql-bin.000013:120"))
    store.record_verification(_verdict("v3", 3, "match", "mysql-bin.000013:900"))
    v = collect_status(store, None, [TABLE]).tables[0].verification
    assert (v.verify_id, v.position, v.first_position) == ("v3", *["mysql-bin.000013:900"] * 2)
    assert (v.matched, v.differing, v.repaired, v.unverified, v.never, v.mismatches) == (2, 0, 1, 1, 0, ())


def test_status_asks_the_chunk_store_once_per_table_for_verifications(tmp_path):
    """However many verify runs a table has had: one query, which returns each chunk's latest verdict."""
    store, _ = _committed_store(tmp_path, chunks=3)
    for run in range(20):
        for chunk_id in range(3):
            result = "mismatch" if (run, chunk_id) == (19, 2) else "match"
            store.record_verification(_verdict(f"v{run:02d}", chunk_id, result, why="differs"))
    statements: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        v = collect_status(store, None, [TABLE]).tables[0].verification
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)
    assert (v.verify_id, v.matched, v.differing, [m.chunk_id for m in v.mismatches]) == ("v19", 2, 1, [2])
    assert sum("mysqlcdc_verifications" in s for s in statements) == 1, statements
    assert len(store.latest_verifications(TABLE)) == 3


def test_a_new_generation_is_not_covered_by_the_old_ones_verification(tmp_path):
    store, generation = _committed_store(tmp_path, chunks=2)
    store.record_verification(_verdict("v1", 0, "mismatch", why="differs"))
    plan = ChunkPlan(TableId.parse(TABLE), 2, ("id",), (Chunk(0, None, None),), "even", 100, 100)
    new = store.create_plan(TABLE, plan.to_dict(), run_id="replan")
    _commit(store, new, 0)
    t = collect_status(store, None, [TABLE]).tables[0]
    assert t.verification is None and new == generation + 1
    assert any("last verified generation 1 (verify v1); the mirror now uses generation 2: verify again" in n
               for n in t.notes), t.notes


def test_key_ranges_read_as_the_key_columns_and_bounds():
    from airflow_provider_mysqlcdc.engine.status.verification import _key_range

    assert _key_range(["id"], Chunk(0, None, (100,))) == "id in [-inf, 100)"
    assert _key_range(["a", "b"], Chunk(3, (1, "x"), None)) == "(a, b) in [(1, 'x'), +inf)"
