"""One chunk's verdict from its source digest and the lake (``lake_chunks``).

* **The rule's state** at the digest's position (on Oracle MySQL: at each position of the read view's window
  where the chunk changed) must digest equal; a table held at-least-once must hold every source row's hash at
  least as often. Changelog files of batches after the chunk's HW that are gone make it a mismatch even when
  the rows agree: a mirror rebuilt from that changelog could lose changes.
* **The mirror's files** of the chunk must digest equal to the rule's state through the batch they were built
  to (unless they were built on an older snapshot of the chunk: then they are not compared, and the verdict
  says so).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.chunk_store.verifications import MATCH, MISMATCH, UNVERIFIED
from airflow_provider_mysqlcdc.engine.lake.mirror_records import POSITION
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import Column
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import Digest, lake_digest, row_hashes
from airflow_provider_mysqlcdc.engine.verify.lake_chunks import LakeTable
from airflow_provider_mysqlcdc.engine.verify.source_digest import SourceDigest
from airflow_provider_mysqlcdc.engine.verify.verdict import ChunkVerdict, key_range


@dataclass(frozen=True)
class ChunkJudge:
    lake: LakeTable
    generation: int
    columns: Sequence[Column]
    kept: Sequence[bool]  # per column: the lake keeps its zero dates
    flavor: str
    verify_id: str

    def judge(self, sd: SourceDigest, reached: BinlogPosition | None) -> ChunkVerdict:
        """``sd``'s verdict, the stream having reached ``reached``."""
        cid, where = sd.chunk_id, str(sd.low) if sd.exact else f"{sd.low}..{sd.high}"
        if reached is None or reached < sd.high:
            why = (f"the stream has committed up to {reached}, not past {sd.high} yet: start the stream "
                   f"(or let it catch up) and verify again with --resume {self.verify_id}"
                   if reached is not None else
                   "no stream has committed this table yet: start the stream, then verify again")
            return self._verdict(sd, UNVERIFIED, where, None, why)
        candidates = [sd.low] if sd.exact else [sd.low, *self.lake.change_points(cid, sd.low, sd.high)]
        missing = self.lake.missing_for(cid)
        first: Digest | None = None
        for at in candidates:
            state = self.lake.rule_state(cid, at=at)
            if sd.row_hashes is not None:
                verdict = self._at_least_once(sd, state, at)
                if verdict is not None:
                    return verdict
                first = first or self._digest(state)
                continue
            found = self._digest(state)
            if found == sd.digest and missing:
                return self._verdict(
                    sd, MISMATCH, where, found,
                    f"the chunk's rows are right, but changelog files of batches after its HW are missing "
                    f"({', '.join(missing[:3])}): the changelog is incomplete and a mirror rebuilt from it "
                    "could lose changes (--repair re-snapshots the chunk)")
            if found == sd.digest:
                return self._mirror_verdict(sd, at, found)
            first = first or found
        why = (f"the lake's rows of this chunk differ from the source's at {where}: {sd.digest.rows} source "
               f"rows, {first.rows if first else '?'} in the lake by the mirror rule (snapshot and "
               "changelog)")
        if missing:
            why += f"; changelog files of batches after its HW are missing: {', '.join(missing[:3])}"
        return self._verdict(sd, MISMATCH, where, first, f"{why}; key range {self._range(cid)}")

    def _at_least_once(self, sd: SourceDigest, state: pa.Table, at: BinlogPosition) -> ChunkVerdict | None:
        """A chunk held at-least-once matches when the lake holds every source row at least as often."""
        assert sd.row_hashes is not None
        lake_hashes = Counter(row_hashes(state, self.columns, self.flavor, self.kept))
        if Counter(sd.row_hashes) - lake_hashes:
            return None
        found = Digest(state.num_rows, sum(lake_hashes.elements()))
        verdict = self._mirror_verdict(sd, at, found)
        where = str(at)
        extra = state.num_rows - len(sd.row_hashes)
        if verdict.result != MATCH or not extra:
            return verdict
        return self._verdict(sd, MATCH, where, found,
                             "at-least-once (no primary key, no exact read view on this server): every "
                             f"source row is in the lake, with {extra} duplicate rows")

    def _mirror_verdict(self, sd: SourceDigest, at: BinlogPosition, found: Digest) -> ChunkVerdict:
        """The rule's state at ``at`` (digest ``found``) matches the source; the mirror files must hold the
        rule's state through the batch they were built to (the same state, and digest, when that batch's
        records of the chunk are those up to ``at``)."""
        entry = self.lake.mirror_entry(sd.chunk_id)
        where = str(at)
        if entry is None:
            return self._verdict(sd, MATCH, where, found, "the mirror has not been refreshed since the "
                                 "chunk's snapshot: its files were not compared")
        mirror = self._digest(self.lake.mirror_state(entry))
        built = self.lake.records_of(sd.chunk_id, through_batch=entry.through_batch).column(POSITION)
        if built.equals(self.lake.records_of(sd.chunk_id, at=at).column(POSITION)):
            rule = found
        else:
            rule = self._digest(self.lake.rule_state(sd.chunk_id, through_batch=entry.through_batch))
        if mirror == rule:
            return self._verdict(sd, MATCH, where, found)
        return self._verdict(sd, MISMATCH, where, mirror,
                             f"the mirror files ({entry.version}, through batch {entry.through_batch}) hold "
                             f"{mirror.rows} rows that differ from the snapshot and changelog they were "
                             f"built from ({rule.rows} rows): a mirror file was changed or replaced; key "
                             f"range {self._range(sd.chunk_id)}")

    def _digest(self, state: pa.Table) -> Digest:
        return lake_digest(state, self.columns, self.flavor, self.kept)

    def _range(self, chunk_id: int) -> str:
        return key_range(self.lake.build.plan, chunk_id)

    def _verdict(self, sd: SourceDigest, result: str, where: str, lake: Digest | None,
                 why: str = "") -> ChunkVerdict:
        return ChunkVerdict(str(self.lake.table), self.generation, sd.chunk_id, result, where, sd.digest,
                            lake, why)
