"""Verify in two steps for a caller that waits elsewhere (the Airflow operator defers to the triggerer
while the stream catches up): ``take_digests`` takes the source digests of a table's chunks now
(``VerifyRun.take``), ``stream_passed`` tells whether the stream has passed their positions, and
``judge_digests`` compares them with the lake later (``VerifyRun.judge``), recording the verdicts in the same
verify run.

A ``TakenDigests`` is small and plain (JSON: ``to_dict``): per chunk its row count, hash sum and read view
position; no row data. The chunks of a table held at-least-once (Oracle MySQL, no primary key) are compared
row hash by row hash, 8 bytes a row: those are not carried but digested again when judged (``again``), as are
the chunks that need a fresh read view, or a new plan's.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import Digest
from airflow_provider_mysqlcdc.engine.verify.source_digest import SourceDigest
from airflow_provider_mysqlcdc.engine.verify.stream_reach import StreamReach
from airflow_provider_mysqlcdc.engine.verify.verdict import ChunkVerdict
from airflow_provider_mysqlcdc.engine.verify.verify_run import TableDigests, VerifyRun

FORMAT = 1


@dataclass(frozen=True)
class TakenDigests:
    """One table's source digests, taken in one plan generation over ``columns``, as carried."""

    table: str
    generation: int
    flavor: str
    columns: tuple[str, ...]
    digests: tuple[SourceDigest, ...]
    again: tuple[int, ...] = ()  # chunks digested again when judged (held at-least-once: row hashes)

    @classmethod
    def of(cls, taken: TableDigests) -> TakenDigests:
        carried = tuple(d for d in taken.digests if d.row_hashes is None)
        again = tuple(d.chunk_id for d in taken.digests if d.row_hashes is not None)
        return cls(str(taken.table), taken.generation, taken.flavor, taken.columns, carried, again)

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
    taken = run.take(table)
    return None if taken is None else TakenDigests.of(taken)


def stream_passed(run: VerifyRun, taken: Sequence[TakenDigests]) -> bool:
    """Whether the stream has passed every digest's position (``stream_reach``): one look, no wait."""
    reach = StreamReach(run.settings, run.root)
    for t in taken:
        highest = t.highest
        if highest is None:
            continue
        reached = reach.wait(TableId.parse(t.table), highest, 0.0)
        if reached is None or reached < highest:
            return False
    return True


def judge_digests(run: VerifyRun, taken: TakenDigests) -> list[ChunkVerdict]:
    """Compare ``taken`` with the lake (waiting up to ``run.options.wait_s`` for the stream to pass its
    positions; a chunk it has not passed then is *unverified*), record each verdict in ``run``'s verify run,
    and return them by chunk id; the chunks to digest again are verified in place."""
    table = TableId.parse(taken.table)
    verdicts: list[ChunkVerdict] = []
    again: list[int] | None = list(taken.again)
    if taken.digests:
        judged = TableDigests(table, taken.generation, taken.flavor, taken.columns, taken.digests)
        verdicts, more = run.judge(judged)
        again = None if more is None else [*more, *taken.again]
    if again is None or again:
        verdicts += run.verify_table(table, again)
    return sorted(verdicts, key=lambda v: v.chunk_id)
