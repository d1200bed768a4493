"""What ``mysqlcdc verify`` last found for a table: when and where it verified, and the open mismatches.

From the chunk store's verifications (``engine/chunk_store/verifications.py``, one query per table: each
chunk's latest verdict), of the generation the mirror uses (what verify verifies). Per chunk, its latest
verdict counts: ``match``, ``mismatch``, ``repaired`` (re-snapshotted by ``verify --repair`` and verified
again), ``unverified`` (the stream had not passed the digest's position). A mismatch is *open* until the chunk
is re-snapshotted: a committed snapshot newer than the verdict (``committed_at`` after ``verified_at``)
*supersedes* it (the new snapshot has not been verified: verify again), and ``repaired`` closes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore, MirrorView, Verification
from airflow_provider_mysqlcdc.engine.chunk_store.verifications import MATCH, MISMATCH, REPAIRED, UNVERIFIED
from airflow_provider_mysqlcdc.engine.chunks.plan import Chunk
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition

OPEN, SUPERSEDED = "open", "superseded"
_WHY_LENGTH = 300  # of a mismatch's why in the status (the chunk store keeps it whole)


@dataclass(frozen=True)
class ChunkMismatch:
    """A chunk whose latest verdict is a mismatch."""

    chunk_id: int
    state: str  # OPEN, or SUPERSEDED: re-snapshotted since (committed after the verdict): verify again
    key_range: str | None  # ``id in [100, 200)`` from the plan
    source_rows: int | None
    lake_rows: int | None
    why: str
    position: str | None  # where it was verified (a binlog position, or ``low..high`` for a window)
    verified_at: datetime | None
    verify_id: str
    rerun_pending: bool = False  # a rerun of the chunk runs now (its snapshot is not replaced yet)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "verified_at": _iso(self.verified_at)}


@dataclass(frozen=True)
class VerificationStatus:
    """One table's verification: the latest verify run that verified a chunk of the mirror's generation, and
    each chunk's latest verdict, counted."""

    generation: int
    verify_id: str  # the run of the newest verdict
    verified_at: datetime | None  # the newest verdict
    position: str | None  # the latest position that run verified at (of a window: its high end)
    first_position: str | None  # its earliest (each chunk is digested in a read view of its own)
    chunks: int  # of the generation
    matched: int = 0
    differing: int = 0  # open mismatches
    superseded: int = 0  # mismatches of chunks re-snapshotted since: verify them again
    unverified: int = 0
    repaired: int = 0
    never: int = 0  # chunks without a verdict
    mismatches: tuple[ChunkMismatch, ...] = ()  # open and superseded, by chunk id

    @property
    def open_mismatches(self) -> tuple[ChunkMismatch, ...]:
        return tuple(m for m in self.mismatches if m.state == OPEN)

    @property
    def superseded_mismatches(self) -> tuple[ChunkMismatch, ...]:
        return tuple(m for m in self.mismatches if m.state == SUPERSEDED)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "mismatches"}
        out["verified_at"] = _iso(self.verified_at)
        out["mismatches"] = [m.as_dict() for m in self.mismatches]
        return out


def verify_command(table: str, chunk_ids: list[int], repair: bool = True) -> str:
    """``mysqlcdc verify --table db.t --chunks 3,7 --repair`` (connection options as for every command)."""
    ids = ",".join(str(c) for c in sorted(chunk_ids))
    return f"mysqlcdc verify --table {table} --chunks {ids}" + (" --repair" if repair else "")


def verification_status(store: ChunkStore, table: str, view: MirrorView | None,
                        pending: frozenset[int] = frozenset()) -> tuple[VerificationStatus | None, list[str]]:
    """The table's verification (None: never verified, or not its mirror's generation) and notes.
    ``pending``: chunk ids of the mirror's generation with a rerun running."""
    if view is None:
        return None, []
    latest = store.latest_verifications(table)
    if not latest:
        return None, []
    current = [v for v in latest if v.generation == view.generation]
    if not current:
        older = max(latest, key=_when)
        note = (f"last verified generation {older.generation} (verify {older.verify_id}); the mirror now "
                f"uses generation {view.generation}: verify again")
        return None, [note]
    committed_at = {c.chunk_id: c.committed_at for c in view.chunks}
    newest = max(current, key=_when)
    positions = [p for p in (_end(v.position) for v in current if v.verify_id == newest.verify_id) if p]
    counts = {MATCH: 0, MISMATCH: 0, UNVERIFIED: 0, REPAIRED: 0}
    mismatches: list[ChunkMismatch] = []
    for v in current:
        if v.chunk_id not in committed_at:
            continue
        if v.result != MISMATCH:
            counts[v.result] = counts.get(v.result, 0) + 1
            continue
        committed = committed_at[v.chunk_id]
        resnapshotted = committed is not None and v.verified_at is not None and committed > v.verified_at
        mismatches.append(_mismatch(v, SUPERSEDED if resnapshotted else OPEN, v.chunk_id in pending))
    mismatches = _with_key_ranges(store, table, view.generation, mismatches)
    superseded = sum(1 for m in mismatches if m.state == SUPERSEDED)
    judged = {v.chunk_id for v in current}
    return VerificationStatus(
        generation=view.generation, verify_id=newest.verify_id, verified_at=newest.verified_at,
        position=str(max(positions)) if positions else newest.position,
        first_position=str(min(positions)) if positions else newest.position,
        chunks=len(view.chunks), matched=counts[MATCH], differing=len(mismatches) - superseded,
        superseded=superseded, unverified=counts[UNVERIFIED], repaired=counts[REPAIRED],
        never=sum(1 for c in view.chunks if c.chunk_id not in judged), mismatches=tuple(mismatches),
    ), []


def _mismatch(v: Verification, state: str, pending: bool) -> ChunkMismatch:
    why = str(v.detail.get("why") or "")
    return ChunkMismatch(v.chunk_id, state, None, v.source_rows, v.lake_rows,
                         why if len(why) <= _WHY_LENGTH else why[:_WHY_LENGTH - 3] + "...", v.position,
                         v.verified_at, v.verify_id, pending)


def _with_key_ranges(store: ChunkStore, table: str, generation: int,
                     mismatches: list[ChunkMismatch]) -> list[ChunkMismatch]:
    """Each mismatch with its chunk's key range from the plan (read only when there is a mismatch)."""
    if not mismatches:
        return mismatches
    plan = store.plan(table, generation).plan
    wanted = {m.chunk_id for m in mismatches}
    chunks = {int(c["chunk_id"]): c for c in plan.get("chunks") or () if int(c["chunk_id"]) in wanted}
    columns = [str(c) for c in plan.get("key_columns") or ()]
    out = []
    for m in mismatches:
        data = chunks.get(m.chunk_id)
        key_range = _key_range(columns, Chunk.from_dict(data)) if data is not None else None
        out.append(ChunkMismatch(**{**m.__dict__, "key_range": key_range}))
    return out


def _key_range(columns: list[str], chunk: Chunk) -> str:
    """``id in [100, 200)``, ``(a, b) in [(1, 'x'), +inf)``."""
    def bound(key: Any, infinite: str) -> str:
        if key is None:
            return infinite
        values = tuple(key)
        return repr(values[0]) if len(values) == 1 else "(" + ", ".join(repr(v) for v in values) + ")"

    name = columns[0] if len(columns) == 1 else "(" + ", ".join(columns) + ")"
    return f"{name} in [{bound(chunk.start, '-inf')}, {bound(chunk.end, '+inf')})"


def _end(position: str | None) -> BinlogPosition | None:
    """A verdict's position, or the high end of its window; None when unreadable."""
    if not position:
        return None
    try:
        return BinlogPosition.parse(position.split("..")[-1])
    except CdcError:
        return None


def _when(v: Verification) -> datetime:
    return v.verified_at or datetime.min.replace(tzinfo=UTC)


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat(timespec="seconds")
