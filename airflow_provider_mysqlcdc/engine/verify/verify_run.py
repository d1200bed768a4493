"""``verify``: each selected chunk's digest on the source, compared with the lake's rows of that chunk as of
the same binlog position; the verdicts recorded in the chunk store.

A run verifies a table in two steps, which a caller may also take apart (the Airflow operator waits for the
stream in the triggerer between them: ``taken_digests``):

1. ``take``: the chunks' source digests (``source_digest``: one read slot, a chunk at a time, under the
   source limits), each in a read view whose binlog position is known;
2. ``judge``: once the stream has committed past their positions (``stream_reach``), each chunk's verdict from
   the lake's snapshot and changelog (``lake_chunks``, ``chunk_judge``), recorded.

``verify_table`` takes and judges until every chunk has a verdict: a chunk without an exact position (Oracle
MySQL) that matches no state of its read view's window is digested again in a fresh view, up to
``attempts`` views, before it is a mismatch. A run resumes where it stopped: a run given an earlier run's
``verify_id`` skips the chunks that matched there and verifies the others again; a chunk that differed and
matches now (re-snapshotted in between: ``repair``) is *repaired*.
"""
from __future__ import annotations

import dataclasses
import logging
import random
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.chunk_store.verifications import MATCH, MISMATCH, REPAIRED
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.limits import (
    RateLimiter,
    SourceLimits,
    read_slot,
    set_query_timeout,
)
from airflow_provider_mysqlcdc.engine.source.server import server_info
from airflow_provider_mysqlcdc.engine.verify.chunk_diff import first_differences
from airflow_provider_mysqlcdc.engine.verify.chunk_judge import ChunkJudge
from airflow_provider_mysqlcdc.engine.verify.lake_chunks import LakeTable
from airflow_provider_mysqlcdc.engine.verify.source_digest import SourceDigest, SourceDigester
from airflow_provider_mysqlcdc.engine.verify.stream_reach import StreamReach
from airflow_provider_mysqlcdc.engine.verify.verdict import ChunkVerdict

log = logging.getLogger(__name__)

__all__ = ["ChunkVerdict", "TableDigests", "VerifyOptions", "VerifyRun", "digest_columns"]
_RETAKES = 3  # more digest rounds than read views: a table re-planned or its lake columns changed meanwhile


@dataclass(frozen=True)
class VerifyOptions:
    chunks: Sequence[int] | None = None  # only these chunk ids (of each table)
    sample: float | None = None  # a seeded random share of the chunks, 0 < sample <= 1
    seed: int = 0
    explain: bool = False  # name the first differing keys of a mismatch (reads that chunk's keys and hashes)
    attempts: int = 3  # fresh read views for a chunk without an exact position before it is a mismatch
    wait_s: float = 600.0  # how long to wait for the stream to pass the digests' positions
    limits: SourceLimits = field(default_factory=SourceLimits)


@dataclass(frozen=True)
class TableDigests:
    """One table's source digests, taken in one plan generation over ``columns`` (names)."""

    table: TableId
    generation: int
    flavor: str
    columns: tuple[str, ...]
    digests: tuple[SourceDigest, ...]

    @property
    def highest(self) -> BinlogPosition | None:
        """The position the stream must pass before the lake can be judged."""
        return max((d.high for d in self.digests), default=None)


@dataclass
class VerifyRun:
    settings: MySQLSettings
    store: ChunkStore
    root: str
    options: VerifyOptions = field(default_factory=VerifyOptions)
    verify_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    run_id: str | None = None
    on_verdict: Callable[[ChunkVerdict], None] | None = None
    views: Counter[tuple[str, int]] = field(default_factory=Counter)  # read views taken per chunk

    def verify_table(self, table: TableId, chunk_ids: Sequence[int] | None = None) -> list[ChunkVerdict]:
        """Verdicts for the table's selected chunks (or ``chunk_ids``) this run has no match for yet."""
        verdicts: list[ChunkVerdict] = []
        pending = chunk_ids
        for _ in range(self.options.attempts + _RETAKES):  # bounded: DDL or re-plans cannot keep it going
            taken = self.take(table, pending)
            if taken is None:
                break
            done, again = self.judge(taken)
            verdicts += done
            if again == []:
                break
            pending = again  # None: the table was re-planned in between: the selection of the new plan
        return sorted(verdicts, key=lambda v: v.chunk_id)

    def take(self, table: TableId, chunk_ids: Sequence[int] | None = None) -> TableDigests | None:
        """The source digests of the selected chunks (or ``chunk_ids``) that this run has no match for yet
        (None: none left)."""
        view = self._view(table)
        earlier = self.earlier(table, view.generation)
        plan = ChunkPlan.from_dict(self.store.plan(str(table), view.generation).plan)
        wanted = self.selected(plan) if chunk_ids is None else [plan.chunk(c) for c in chunk_ids]
        ids = [c.chunk_id for c in wanted if earlier.get(c.chunk_id) not in (MATCH, REPAIRED)]
        if not ids:
            return None
        schema, columns, kept = self._columns(table)
        digests, flavor = self._source_digests(plan, schema, columns, kept, ids)
        for d in digests:
            self.views[(str(table), d.chunk_id)] += 1
        return TableDigests(table, view.generation, flavor, tuple(c.name for c in columns), tuple(digests))

    def judge(self, taken: TableDigests) -> tuple[list[ChunkVerdict], list[int] | None]:
        """Once the stream has passed ``taken``'s positions (waiting up to the run's wait), each chunk's
        verdict, recorded; and the chunks to digest again: those without an exact position that matched
        nothing, while views are left; all of them when the lake's columns changed in between; None when the
        table was re-planned in between (its new plan's selection, then)."""
        table = taken.table
        view = self._view(table)
        if view.generation != taken.generation:
            return [], None
        schema, columns, kept = self._columns(table)
        if tuple(c.name for c in columns) != taken.columns:
            return [], [d.chunk_id for d in taken.digests]
        highest = taken.highest
        reached = None if highest is None else StreamReach(self.settings, self.root).wait(
            table, highest, self.options.wait_s)
        earlier = self.earlier(table, view.generation)
        verdicts: list[ChunkVerdict] = []
        again: list[int] = []
        with MirrorRefresher(self.root, self.store, settings=self.settings) as refresher:
            lake = LakeTable.load(refresher, table)
        judge = ChunkJudge(lake, view.generation, columns, kept, taken.flavor, self.verify_id)
        for sd in taken.digests:
            verdict = judge.judge(sd, reached)
            if (verdict.result == MISMATCH and not sd.exact
                    and self.views[(str(table), sd.chunk_id)] < self.options.attempts):
                log.info("%s chunk %d: no match in its read view's window %s; reading it again", table,
                         sd.chunk_id, verdict.position)
                again.append(sd.chunk_id)
                continue
            if verdict.result == MATCH and earlier.get(sd.chunk_id) == MISMATCH:
                verdict = dataclasses.replace(  # this run found it differing; it was re-snapshotted
                    verdict, result=REPAIRED,
                    why="; ".join(w for w in ("re-snapshotted after it differed; matches now", verdict.why)
                                  if w))
            if verdict.result == MISMATCH and self.options.explain:
                verdict = self._explained(verdict, lake, schema, columns, kept, taken.flavor)
            self.store.record_verification(verdict.record(self.verify_id, self.run_id))
            if self.on_verdict is not None:
                self.on_verdict(verdict)
            verdicts.append(verdict)
        return verdicts, again

    def earlier(self, table: TableId, generation: int) -> dict[int, str]:
        """This run's verdicts so far for ``table`` (chunk id -> result), of one plan generation."""
        return {v.chunk_id: v.result for v in self.store.verifications(str(table), self.verify_id)
                if v.generation == generation}

    def selected(self, plan: ChunkPlan) -> list[Any]:
        """The plan's chunks the options select (``chunks``, a seeded ``sample``)."""
        chunks = list(plan.chunks)
        if self.options.chunks is not None:
            wanted = set(self.options.chunks)
            unknown = sorted(wanted - {c.chunk_id for c in chunks})
            if unknown:
                raise CdcError(f"{plan.table} has no chunks {unknown} in plan generation {plan.generation} "
                               f"(chunks 0..{len(chunks) - 1})")
            chunks = [c for c in chunks if c.chunk_id in wanted]
        if self.options.sample is not None:
            rng = random.Random(f"{self.options.seed}:{plan.table}")
            count = max(1, round(len(chunks) * self.options.sample))
            chunks = sorted(rng.sample(chunks, min(count, len(chunks))), key=lambda c: c.chunk_id)
        return chunks

    # -- pieces ----------------------------------------------------------------------------------------------

    def _view(self, table: TableId) -> Any:
        view = self.store.mirror_view(str(table))
        if view is None:
            raise CdcError(f"{table}: no plan generation is fully committed: finish its snapshot before "
                           "verifying it (mysqlcdc status)")
        return view

    def _columns(self, table: TableId) -> tuple[TableSchema, list[Column], list[bool]]:
        with MirrorRefresher(self.root, self.store, settings=self.settings) as refresher:
            build = refresher.build_of(table)
        with connect(self.settings) as conn:
            schema = load_schema(conn, table)
        columns, kept = digest_columns(schema, build.data_schema.names)
        return schema, columns, kept

    def _source_digests(self, plan: ChunkPlan, schema: TableSchema, columns: list[Column], kept: list[bool],
                        chunk_ids: list[int]) -> tuple[list[SourceDigest], str]:
        limits = self.options.limits
        limiter = RateLimiter(limits.per_read_rows_per_second)
        out = []
        with connect(self.settings) as conn:
            info = server_info(conn)
            with read_slot(conn, limits, f"verify {plan.table}"):
                set_query_timeout(conn, info.flavor, limits.query_timeout_s)
                digester = SourceDigester(conn, info, schema, plan, columns, kept,
                                          read_view_mode=self.settings.read_view_mode)
                for cid in chunk_ids:
                    digest = digester.digest(plan.chunk(cid))
                    out.append(digest)
                    limiter.take(digest.digest.rows)
        return out, info.flavor

    def _explained(self, verdict: ChunkVerdict, lake: LakeTable, schema: TableSchema, columns: list[Column],
                   kept: list[bool], flavor: str) -> ChunkVerdict:
        at = BinlogPosition.parse(verdict.position.split("..")[0]) if verdict.position else None
        differences = first_differences(self.settings, lake.build.plan, schema, lake, verdict.chunk_id,
                                        columns, kept, flavor, at)
        return dataclasses.replace(verdict, differences=tuple(differences))


def digest_columns(schema: TableSchema, lake_names: Sequence[str]) -> tuple[list[Column], list[bool]]:
    """The columns both sides hold (an excluded column is in no lake file), and whether the lake keeps each
    one's zero dates (its companion is written)."""
    names = set(lake_names)
    columns = [c for c in schema.columns if c.name in names]
    kept = [values.zero_date_field(c.name) in names for c in columns]
    return columns, kept
