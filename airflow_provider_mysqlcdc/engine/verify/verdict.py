"""A chunk's verdict: what verify found for one chunk, as the CLI prints it and the chunk store records it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.engine.chunk_store import Verification
from airflow_provider_mysqlcdc.engine.chunks.plan import ChunkPlan
from airflow_provider_mysqlcdc.engine.verify.canonical_arrow import Digest


@dataclass(frozen=True)
class ChunkVerdict:
    table: str
    generation: int
    chunk_id: int
    result: str  # match | mismatch | repaired | unverified
    position: str | None  # the read view's position, or its window "low..high"
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


def key_range(plan: ChunkPlan, chunk_id: int) -> str:
    """The chunk's key range as a mismatch names it: ``id in [(5120,), (5952,))``."""
    chunk = plan.chunk(chunk_id)
    low = "-inf" if chunk.start is None else repr(tuple(chunk.start))
    high = "+inf" if chunk.end is None else repr(tuple(chunk.end))
    return f"{', '.join(plan.key_columns)} in [{low}, {high})"
