"""Verify in two steps, for a caller that waits elsewhere (the Airflow operator defers to the triggerer while
the stream catches up): ``take_digests`` takes the source digests of a table's chunks now, ``judge_digests``
compares them with the lake later, once the stream has passed their positions (``stream_passed``), and
records the verdicts in the same verify run.

A ``TakenDigests`` is small and plain (JSON: ``to_dict``): per chunk its row count, hash sum and read view
position; no row data. The chunks of a table held at-least-once (Oracle MySQL, no primary key) are compared
row hash by row hash, which would be 8 bytes a row to carry: they are not carried, but digested again when
judged (``VerifyRun.verify_table`` for just them, which waits in place for the stream). So are all chunks of
a table that was re-planned, or whose lake columns changed, in between.

Which chunks a step takes follows ``VerifyRun.verify_table``: those the verify run has no match (or repair)
for; a chunk that differed in the run and matches now is *repaired*.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.chunk_store.verifications import MATCH, MISMATCH, REPAIRED
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import connect
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import Digest
from airflow_provider_mysqlcdc.engine.verify.lake_chunks import LakeTable
from airflow_provider_mysqlcdc.engine.verify.source_digest import SourceDigest
from airflow_provider_mysqlcdc.engine.verify.verify_run import ChunkVerdict, VerifyRun, _digest_columns

FORMAT = 1


@dataclass(frozen=True)
class TakenDigests:
    """One table's source digests, taken in one plan generation over ``columns``."""

    table: str
    generation: int
    flavor: str
    columns: tuple[str, ...]
    digests: tuple[SourceDigest, ...]
    again: tuple[int, ...] = ()  # chunks digested again when judged (held at-least-once: row hashes)

    @property
    def highest(self) -> BinlogPosition | None:
        """The position the stream must pass before the lake can be judged (None: nothing to wait for)."""
        return max((d.high for d in self.digests), default=None)

    @property
    def chunk_ids(self) -> list[int]:
        return sorted([d.chunk_id for d in self.digests] + list(self.again))

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": FORMAT, "table": self.table, "generation": self.generation, "flavor": self.flavor,
            "columns": list(self.columns), "again": list(self.again),
            # chunk id, rows, hash sum (text: beyond JSON's safe integers), low, high, exact, seconds
            "digests": [[d.chunk_id, d.digest.rows, str(d.digest.hash_sum), str(d.low), str(d.high), d.exact,
                         round(d.seconds, 3)] for d in self.digests],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TakenDigests:
        if data.get("v") != FORMAT:
            raise CdcError(f"digests of format {data.get('v')!r}: this release reads format {FORMAT}; verify "
                           "again")
        digests = tuple(
            SourceDigest(int(cid), Digest(int(rows), int(total)), BinlogPosition.parse(low),
                         BinlogPosition.parse(high), bool(exact), float(seconds))
            for cid, rows, total, low, high, exact, seconds in data["digests"])
        return cls(str(data["table"]), int(data["generation"]), str(data["flavor"]),
                   tuple(map(str, data["columns"])), digests, tuple(int(c) for c in data.get("again", ())))


def take_digests(run: VerifyRun, table: TableId) -> TakenDigests | None:
    """The source digests of ``table``'s selected chunks that ``run`` has no match for yet (None: none
    left), under the run's source limits."""
    view = run.store.mirror_view(str(table))
    if view is None:
        raise CdcError(f"{table}: no plan generation is fully committed: finish its snapshot before "
                       "verifying it (mysqlcdc status)")
    plan = ChunkPlan.from_dict(run.store.plan(str(table), view.generation).plan)
    earlier = _earlier(run, table, view.generation)
    done = {cid for cid, result in earlier.items() if result in (MATCH, REPAIRED)}
    chunk_ids = [c.chunk_id for c in run._selected(plan) if c.chunk_id not in done]
    if not chunk_ids:
        return None
    with MirrorRefresher(run.root, run.store, settings=run.settings) as refresher:
        build = refresher.build_of(table)
    with connect(run.settings) as conn:
        schema = load_schema(conn, table)
    columns, kept = _digest_columns(schema, build.data_schema.names)
    digests = run._source_digests(plan, schema, columns, kept, chunk_ids)
    carried = tuple(d for d in digests if d.row_hashes is None)
    again = tuple(d.chunk_id for d in digests if d.row_hashes is not None)
    names = tuple(c.name for c in columns)
    return TakenDigests(str(table), view.generation, run._flavor, names, carried, again)


def stream_passed(run: VerifyRun, taken: Sequence[TakenDigests]) -> bool:
    """Whether the stream has committed past every digest's position (or rests at the binlog's end with only
    events that change no data before it): one look, no wait."""
    now = dataclasses.replace(run, options=dataclasses.replace(run.options, wait_s=0))
    for t in taken:
        highest = t.highest
        if highest is None:
            continue
        reached = now._wait_for_stream(TableId.parse(t.table), highest)
        if reached is None or reached < highest:
            return False
    return True


def judge_digests(run: VerifyRun, taken: TakenDigests) -> list[ChunkVerdict]:
    """Compare ``taken`` with the lake (waiting up to ``run.options.wait_s`` for the stream to pass its
    positions; a chunk it has not passed then is *unverified*), record each verdict in ``run``'s verify run,
    and return them by chunk id."""
    table = TableId.parse(taken.table)
    view = run.store.mirror_view(taken.table)
    if view is None or view.generation != taken.generation:  # re-planned in between: digest the new plan's
        return _again(run, table, taken.chunk_ids if view is None else None)
    plan = ChunkPlan.from_dict(run.store.plan(taken.table, view.generation).plan)
    earlier = _earlier(run, table, view.generation)
    pending = [d for d in taken.digests if earlier.get(d.chunk_id) not in (MATCH, REPAIRED)]
    again = list(taken.again)
    verdicts: list[ChunkVerdict] = []
    with MirrorRefresher(run.root, run.store, settings=run.settings) as refresher:
        build = refresher.build_of(table)
        with connect(run.settings) as conn:
            schema = load_schema(conn, table)
        columns, kept = _digest_columns(schema, build.data_schema.names)
        if tuple(c.name for c in columns) != taken.columns:  # the lake's columns changed: digest again
            return _again(run, table, taken.chunk_ids)
        run._flavor = taken.flavor
        highest = max((d.high for d in pending), default=None)
        reached = run._wait_for_stream(table, highest) if highest is not None else None
        lake = LakeTable.load(refresher, table) if pending else None
        for sd in pending:
            assert lake is not None
            verdict = run._judge(lake, view.generation, sd, columns, kept, reached)
            if verdict.result == MISMATCH and not sd.exact and run.options.attempts > 1:
                again.append(sd.chunk_id)  # no exact position: read again in a fresh view before it differs
                continue
            if verdict.result == MATCH and earlier.get(sd.chunk_id) == MISMATCH:
                verdict = dataclasses.replace(verdict, result=REPAIRED,
                                              why="re-snapshotted after it differed; matches now")
            if verdict.result == MISMATCH and run.options.explain:
                verdict = run._explained(verdict, plan, schema, lake, columns, kept, sd)
            run.store.record_verification(verdict.record(run.verify_id, run.run_id))
            if run.on_verdict is not None:
                run.on_verdict(verdict)
            verdicts.append(verdict)
    if again:
        verdicts += _again(run, table, again, attempts=run.options.attempts - 1)  # one view was read
    return sorted(verdicts, key=lambda v: v.chunk_id)


def _again(run: VerifyRun, table: TableId, chunk_ids: Sequence[int] | None,
           attempts: int | None = None) -> list[ChunkVerdict]:
    """``chunk_ids`` (None: the run's own selection) verified from fresh digests, waiting in place."""
    options = run.options
    if chunk_ids is not None:
        options = dataclasses.replace(options, chunks=tuple(chunk_ids), sample=None)
    if attempts is not None:
        options = dataclasses.replace(options, attempts=max(1, attempts))
    return dataclasses.replace(run, options=options).verify_table(table)


def _earlier(run: VerifyRun, table: TableId, generation: int) -> dict[int, str]:
    return {v.chunk_id: v.result for v in run.store.verifications(str(table), run.verify_id)
            if v.generation == generation}
