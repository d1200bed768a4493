"""``verify``: each selected chunk's digest on the source, compared with the lake's rows of that chunk as of
the same binlog position; the verdicts recorded in the chunk store.

Per table: the chunks' source digests first (``source_digest``, one read slot, a chunk at a time), then a wait
until the stream has committed past the last digest's position (the lake cannot know the table there before),
then the lake's side from the table's snapshot and changelog (``lake_chunks``), in memory. A chunk *matches*
when the rule's state at the read view's position digests equal (on Oracle MySQL: at some position of the read
view's window where the chunk changed; a chunk that matches none is digested again in a fresh view, up to
``attempts`` times, before it is a mismatch), and its mirror files digest equal to the rule's state through
the batch they were built to. A run resumes where it stopped: a run given an earlier run's ``verify_id``
skips the chunks that matched there and verifies the others again; a chunk that differed and matches now
(re-snapshotted in between: ``repair``) is *repaired*.
"""
from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, Verification
from airflow_provider_mysqlcdc.engine.chunk_store.verifications import MATCH, MISMATCH, REPAIRED, UNVERIFIED
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.changelog import read_stream_progress
from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
from airflow_provider_mysqlcdc.engine.model import values
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number
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
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import Digest, lake_digest, row_hashes
from airflow_provider_mysqlcdc.engine.verify.chunk_diff import first_differences
from airflow_provider_mysqlcdc.engine.verify.lake_chunks import LakeTable
from airflow_provider_mysqlcdc.engine.verify.source_digest import SourceDigest, SourceDigester

log = logging.getLogger(__name__)
_NO_DATA_EVENTS = {"Binlog_checkpoint", "Gtid_list", "Format_desc", "Previous_gtids", "Rotate", "Stop",
                   "Heartbeat"}
_TRANSACTION_EVENTS = {"Gtid", "Anonymous_Gtid", "Xid", "Annotate_rows", "Rows_query", "Write_rows",
                       "Update_rows", "Delete_rows", "Write_rows_v1", "Update_rows_v1", "Delete_rows_v1"}
_QUIET_EVENTS = 500


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
class ChunkVerdict:
    table: str
    generation: int
    chunk_id: int
    result: str  # match | mismatch | repaired | unverified
    position: str | None
    source: Digest | None
    lake: Digest | None
    why: str = ""  # what differs, or why the chunk could not be verified
    differences: tuple[str, ...] = ()  # --explain: the first differing keys

    def record(self, verify_id: str, run_id: str | None) -> Verification:
        detail: dict[str, Any] = {"why": self.why} if self.why else {}
        if self.source is not None:
            detail["source_hash"] = str(self.source.hash_sum)
        if self.lake is not None:
            detail["lake_hash"] = str(self.lake.hash_sum)
        if self.differences:
            detail["differences"] = list(self.differences)
        return Verification(verify_id, self.table, self.generation, self.chunk_id, self.result, self.position,
                            self.source.rows if self.source else None, self.lake.rows if self.lake else None,
                            detail, run_id)

    def describe(self) -> str:
        counts = (f"source {self.source.rows} rows, lake {self.lake.rows} rows"
                  if self.source is not None and self.lake is not None else "")
        parts = [f"{self.table} chunk {self.chunk_id}: {self.result}", self.position or "", counts, self.why]
        text = "; ".join(p for p in parts if p)
        return text + "".join(f"\n    {d}" for d in self.differences)


@dataclass
class VerifyRun:
    settings: MySQLSettings
    store: ChunkStore
    root: str
    options: VerifyOptions = field(default_factory=VerifyOptions)
    verify_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    run_id: str | None = None
    on_verdict: Callable[[ChunkVerdict], None] | None = None

    def verify_table(self, table: TableId) -> list[ChunkVerdict]:
        view = self.store.mirror_view(str(table))
        if view is None:
            raise CdcError(f"{table}: no plan generation is fully committed: finish its snapshot before "
                           "verifying it (mysqlcdc status)")
        plan = ChunkPlan.from_dict(self.store.plan(str(table), view.generation).plan)
        earlier = {v.chunk_id: v.result for v in self.store.verifications(str(table), self.verify_id)
                   if v.generation == view.generation}
        done = {cid for cid, result in earlier.items() if result in (MATCH, REPAIRED)}
        chunk_ids = [c.chunk_id for c in self._selected(plan) if c.chunk_id not in done]
        if not chunk_ids:
            return []
        with MirrorRefresher(self.root, self.store, settings=self.settings) as refresher:
            build = refresher.build_of(table)
            with connect(self.settings) as conn:
                schema = load_schema(conn, table)
            columns, kept = _digest_columns(schema, build.data_schema.names)
            pending = {cid: self.options.attempts for cid in chunk_ids}
            verdicts: list[ChunkVerdict] = []
            while pending:
                digests = self._source_digests(plan, schema, columns, kept, sorted(pending))
                reached = self._wait_for_stream(table, max(d.high for d in digests))
                lake = LakeTable.load(refresher, table)
                for sd in digests:
                    verdict = self._judge(lake, view.generation, sd, columns, kept, reached)
                    pending[sd.chunk_id] -= 1
                    if verdict.result == MISMATCH and not sd.exact and pending[sd.chunk_id] > 0:
                        log.info("%s chunk %d: no match in its read view's window %s; reading it again",
                                 table, sd.chunk_id, verdict.position)
                        continue
                    del pending[sd.chunk_id]
                    if verdict.result == MATCH and earlier.get(sd.chunk_id) == MISMATCH:
                        verdict = dataclasses.replace(  # this run found it differing; it was re-snapshotted
                            verdict, result=REPAIRED,
                            why="; ".join(w for w in ("re-snapshotted after it differed; matches now",
                                                      verdict.why) if w))
                    if verdict.result == MISMATCH and self.options.explain:
                        verdict = self._explained(verdict, plan, schema, lake, columns, kept, sd)
                    self.store.record_verification(verdict.record(self.verify_id, self.run_id))
                    if self.on_verdict is not None:
                        self.on_verdict(verdict)
                    verdicts.append(verdict)
        return sorted(verdicts, key=lambda v: v.chunk_id)

    # -- pieces ----------------------------------------------------------------------------------------------

    def _selected(self, plan: ChunkPlan) -> list[Any]:
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

    def _source_digests(self, plan: ChunkPlan, schema: TableSchema, columns: list[Column], kept: list[bool],
                        chunk_ids: list[int]) -> list[SourceDigest]:
        limits = self.options.limits
        limiter = RateLimiter(limits.per_read_rows_per_second)
        out = []
        with connect(self.settings) as conn:
            info = server_info(conn)
            with read_slot(conn, limits, f"verify {plan.table}"):
                set_query_timeout(conn, info.flavor, limits.query_timeout_s)
                digester = SourceDigester(conn, info, schema, plan, columns, kept)
                for cid in chunk_ids:
                    digest = digester.digest(plan.chunk(cid))
                    out.append(digest)
                    limiter.take(digest.digest.rows)
        self._flavor = info.flavor
        return out

    def _wait_for_stream(self, table: TableId, position: BinlogPosition) -> BinlogPosition | None:
        """Wait until the stream has committed past ``position``; the position it reached (None: no
        stream)."""
        deadline = time.monotonic() + self.options.wait_s
        reached = None
        while True:
            progress = read_stream_progress(self.root)
            if progress is not None and progress.covers(table):
                reached = progress.end_offset.ordered_position
                if reached >= position or self._quiet_between(table, progress.end_offset.position, position):
                    return position
            if time.monotonic() >= deadline:
                return reached
            time.sleep(0.25)

    def _quiet_between(self, table: TableId, reached: BinlogPosition, position: BinlogPosition) -> bool:
        """Whether nothing between ``reached`` and ``position`` changes ``table``: only events of other
        tables, transaction bookkeeping, or events that change no data (a stream at the binlog's end rests
        before a binlog checkpoint, or at the end of a file the server rotated from; the watermark markers of
        a chunk read are rows of another table)."""
        if reached > position:
            return False
        with connect(self.settings) as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [str(r[0]) for r in cur.fetchall()]
            low, high = file_number(reached.file), file_number(position.file)
            between = [f for f in files if low <= file_number(f) <= high] if reached.file in files else []
            if not between or between[-1] != position.file:
                return False
            for file in between:
                start = reached.pos if file == reached.file else 4
                cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start)} LIMIT {_QUIET_EVENTS}", (file,))
                events = cur.fetchall()
                for event in events:
                    if file == position.file and int(event[1]) >= position.pos:
                        return True
                    if not _leaves_alone(str(event[2]), str(event[5] or ""), table):
                        return False
                if len(events) == _QUIET_EVENTS:
                    return False
        return True

    def _judge(self, lake: LakeTable, generation: int, sd: SourceDigest, columns: list[Column],
               kept: list[bool], reached: BinlogPosition | None) -> ChunkVerdict:
        cid = sd.chunk_id
        where = str(sd.low) if sd.exact else f"{sd.low}..{sd.high}"
        if reached is None or reached < sd.high:
            why = (f"the stream has committed up to {reached}, not past {sd.high} yet: start the stream "
                   f"(or let it catch up) and verify again with --resume {self.verify_id}"
                   if reached is not None else
                   "no stream has committed this table yet: start the stream, then verify again")
            return ChunkVerdict(str(lake.table), generation, cid, UNVERIFIED, where, sd.digest, None, why)
        flavor = self._flavor
        candidates = [sd.low] if sd.exact else [sd.low, *lake.change_points(cid, sd.low, sd.high)]
        lake_digest_at = None
        for at in candidates:
            state = lake.rule_state(cid, at=at)
            if sd.row_hashes is not None:
                verdict = self._at_least_once(lake, generation, sd, state, columns, kept, str(at))
                if verdict is not None:
                    return verdict
                lake_digest_at = lake_digest_at or lake_digest(state, columns, flavor, kept)
                continue
            found = lake_digest(state, columns, flavor, kept)
            if found == sd.digest and lake.missing:
                return ChunkVerdict(str(lake.table), generation, cid, MISMATCH, where, sd.digest, found,
                                    "the chunk's rows are right, but changelog files named by committed "
                                    f"batches are missing ({', '.join(lake.missing[:3])}): the changelog is "
                                    "incomplete and a mirror rebuilt from it could lose changes")
            if found == sd.digest:
                return self._mirror_verdict(lake, generation, sd, columns, kept, str(at), found)
            lake_digest_at = lake_digest_at or found
        why = (f"the lake's rows of this chunk differ from the source's at {where}: {sd.digest.rows} source "
               f"rows, {lake_digest_at.rows if lake_digest_at else '?'} in the lake by the mirror rule "
               "(snapshot and changelog)")
        if lake.missing:
            why += f"; changelog files named by committed batches are missing: {', '.join(lake.missing[:3])}"
        why += f"; key range {_key_range(lake.build.plan, cid)}"

        return ChunkVerdict(str(lake.table), generation, cid, MISMATCH, where, sd.digest, lake_digest_at, why)

    def _at_least_once(self, lake: LakeTable, generation: int, sd: SourceDigest, state: pa.Table,
                       columns: list[Column], kept: list[bool], where: str) -> ChunkVerdict | None:
        """A chunk held at-least-once matches when the lake holds every source row at least as often."""
        assert sd.row_hashes is not None
        lake_hashes = Counter(row_hashes(state, columns, self._flavor, kept))
        if Counter(sd.row_hashes) - lake_hashes:
            return None
        found = Digest(state.num_rows, sum(lake_hashes.elements()))
        verdict = self._mirror_verdict(lake, generation, sd, columns, kept, where, found)
        extra = state.num_rows - len(sd.row_hashes)
        if verdict.result != MATCH or not extra:
            return verdict
        return ChunkVerdict(verdict.table, generation, sd.chunk_id, MATCH, where, sd.digest, found,
                            "at-least-once (no primary key, no exact read view on this server): every "
                            f"source row is in the lake, with {extra} duplicate rows")

    def _mirror_verdict(self, lake: LakeTable, generation: int, sd: SourceDigest, columns: list[Column],
                        kept: list[bool], where: str, found: Digest) -> ChunkVerdict:
        """The rule's state matches the source; the mirror files must hold the rule's state too."""
        entry = lake.mirror_entry(sd.chunk_id)
        table = str(lake.table)
        if entry is None:
            return ChunkVerdict(table, generation, sd.chunk_id, MATCH, where, sd.digest, found,
                                "the mirror has not been refreshed since the chunk's snapshot: its files "
                                "were not compared")
        flavor = self._flavor
        mirror = lake_digest(lake.mirror_state(entry), columns, flavor, kept)
        rule = lake_digest(lake.rule_state(sd.chunk_id, through_batch=entry.through_batch), columns, flavor,
                           kept)
        if mirror == rule:
            return ChunkVerdict(table, generation, sd.chunk_id, MATCH, where, sd.digest, found)
        # (a chunk held at-least-once compares the same way: its files must be what they were built from)
        return ChunkVerdict(table, generation, sd.chunk_id, MISMATCH, where, sd.digest, mirror,
                            f"the mirror files ({entry.version}, through batch {entry.through_batch}) hold "
                            f"{mirror.rows} rows that differ from the snapshot and changelog they were built "
                            f"from ({rule.rows} rows): a mirror file was changed or replaced; key range "
                            f"{_key_range(lake.build.plan, sd.chunk_id)}")

    def _explained(self, verdict: ChunkVerdict, plan: ChunkPlan, schema: TableSchema, lake: LakeTable,
                   columns: list[Column], kept: list[bool], sd: SourceDigest) -> ChunkVerdict:
        at = BinlogPosition.parse(verdict.position.split("..")[0]) if verdict.position else None
        differences = first_differences(self.settings, plan, schema, lake, sd.chunk_id, columns, kept,
                                        self._flavor, at)
        return ChunkVerdict(verdict.table, verdict.generation, verdict.chunk_id, verdict.result,
                            verdict.position, verdict.source, verdict.lake, verdict.why, tuple(differences))

    _flavor: str = "mariadb"


def _digest_columns(schema: TableSchema, lake_names: Sequence[str]) -> tuple[list[Column], list[bool]]:
    """The columns both sides hold (an excluded column is in no lake file), and whether the lake keeps each
    one's zero dates (its companion is written)."""
    names = set(lake_names)
    columns = [c for c in schema.columns if c.name in names]
    kept = [values.zero_date_field(c.name) in names for c in columns]
    return columns, kept


def _key_range(plan: ChunkPlan, chunk_id: int) -> str:
    chunk = plan.chunk(chunk_id)
    low = "-inf" if chunk.start is None else repr(tuple(chunk.start))
    high = "+inf" if chunk.end is None else repr(tuple(chunk.end))
    return f"{', '.join(plan.key_columns)} in [{low}, {high})"


def _leaves_alone(kind: str, info: str, table: TableId) -> bool:
    """Whether a binlog event (as ``SHOW BINLOG EVENTS`` lists it) provably changes nothing of ``table``: its
    rows events follow a TABLE_MAP naming it, and any statement other than a transaction's bracket may be
    DDL."""
    if kind in _NO_DATA_EVENTS or kind in _TRANSACTION_EVENTS:
        return True
    if kind == "Table_map":
        return f"({table.database}.{table.table})" not in info
    if kind == "Query":
        return info.strip().upper() in ("BEGIN", "COMMIT", "ROLLBACK")
    return False
