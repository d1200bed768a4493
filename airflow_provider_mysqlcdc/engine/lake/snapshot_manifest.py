"""The snapshot manifest: which versioned directory holds each chunk's committed snapshot, for readers.

``<root>/<db>/<table>/_snapshot_manifest.json`` is an export of the chunk store. It is regenerated from the
store's rows *inside* the transaction that commits a chunk (``ChunkStore.commit_chunk(in_transaction=...)``),
so the store row and the manifest change in one step: if the manifest cannot be written, the commit rolls
back; and because it is rebuilt from the store (not read-modify-written), two chunk groups of one table
committing concurrently cannot drop each other's entries (the store serialises them: SQLite's write lock, or
the table's row lock taken here on MySQL/PostgreSQL).

A chunk's previous version directory is never deleted at commit: a reader that loaded the old manifest may
still be reading it. A rerun that dies leaves only an unreferenced directory behind.

The file is a pure function of the store's rows (no timestamps of its own), so rewriting it without a change
leaves the same bytes.

Readers: ``read_snapshot_manifest(root, table).current`` is the generation the mirror uses (the latest whose
every chunk is committed); each chunk lists its directory, files, rows, LW and HW. The manifest carries
``format_version`` (``record_format``); one without it (version 0) was written by an earlier release, with
the same fields. Where a snapshot run commits chunks with it: ``snapshot_commit``.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airflow_provider_mysqlcdc.engine.chunk_store import chunks_table, tables_table
from airflow_provider_mysqlcdc.engine.lake.layout import (
    SNAPSHOT_MANIFEST,
    read_json,
    table_dir,
    write_json_atomic,
)
from airflow_provider_mysqlcdc.engine.lake.record_format import FORMAT_VERSION, record_version
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId

MANIFEST_VERSION = 1  # 1: format_version added (version 0: the same fields without it)

@dataclass(frozen=True)
class ManifestChunk:
    chunk_id: int
    rows: int
    lw: BinlogPosition
    hw: BinlogPosition
    path: str  # the version directory, relative to the table directory when it lies under it
    files: tuple[str, ...]  # Parquet file names in that directory (empty: list the directory)
    start_key: str | None = None
    end_key: str | None = None
    committed_at: str | None = None

    def directory(self, table_root: str) -> str:
        if "://" in self.path or self.path.startswith("/"):
            return self.path
        return posixpath.join(table_root, self.path)

    def to_dict(self) -> dict[str, Any]:
        return {"chunk_id": self.chunk_id, "rows": self.rows, "lw": str(self.lw), "hw": str(self.hw),
                "path": self.path, "files": list(self.files), "start_key": self.start_key,
                "end_key": self.end_key, "committed_at": self.committed_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ManifestChunk:
        return cls(int(data["chunk_id"]), int(data["rows"]), BinlogPosition.parse(data["lw"]),
                   BinlogPosition.parse(data["hw"]), str(data["path"]), tuple(data.get("files") or ()),
                   data.get("start_key"), data.get("end_key"), data.get("committed_at"))


@dataclass(frozen=True)
class ManifestGeneration:
    generation: int
    chunk_count: int
    chunks: tuple[ManifestChunk, ...]  # committed chunks only, by chunk id

    @property
    def fully_committed(self) -> bool:
        return len(self.chunks) == self.chunk_count


@dataclass(frozen=True)
class SnapshotManifest:
    table: str
    root: str  # the table directory the relative paths start from
    latest_generation: int | None
    generations: dict[int, ManifestGeneration] = field(default_factory=dict)

    @property
    def current(self) -> ManifestGeneration | None:
        """The latest fully committed generation (what the mirror and consistent readers use)."""
        done = [g for g in self.generations.values() if g.fully_committed]
        return max(done, key=lambda g: g.generation) if done else None

    def chunk_files(self, generation: int | None = None) -> dict[int, list[str]]:
        """Per chunk id, the full paths of its committed Parquet files."""
        gen = self.current if generation is None else self.generations.get(generation)
        if gen is None:
            return {}
        return {c.chunk_id: [posixpath.join(c.directory(self.root), f) for f in c.files] for c in gen.chunks}


def manifest_path(root: str, table: TableId) -> str:
    return posixpath.join(table_dir(root, table), SNAPSHOT_MANIFEST)


def publish_snapshot_manifest(conn: Connection, root: str, table: TableId) -> SnapshotManifest:
    """Rebuild the manifest from the store rows visible in ``conn``'s (write) transaction and write it.

    Call it from ``commit_chunk(in_transaction=...)``: an error here rolls the chunk's commit back.
    """
    name = str(table)
    if conn.dialect.name != "sqlite":  # serialise the table's manifest writers (SQLite already is)
        conn.execute(sa.select(tables_table.c.table_name).where(tables_table.c.table_name == name)
                     .with_for_update())
    c = chunks_table.c
    latest, floor = conn.execute(sa.select(tables_table.c.latest_generation, tables_table.c.added_generation)
                                 .where(tables_table.c.table_name == name)).one_or_none() or (None, None)
    counts = conn.execute(
        sa.select(c.generation, sa.func.count(), sa.func.count(c.hw_pos)).where(c.table_name == name)
        .group_by(c.generation)
    ).all()
    # a table removed from the pipeline and planned again: its generations from before count no more
    complete = [g for g, total, done in counts if total == done and g >= (floor or 0)]
    wanted = {g for g in (latest, max(complete) if complete else None) if g is not None}
    totals = {g: total for g, total, _ in counts}
    rows = conn.execute(
        sa.select(chunks_table).where(c.table_name == name, c.generation.in_(wanted), c.hw_pos.is_not(None))
        .order_by(c.generation, c.chunk_id)
    ).mappings().all() if wanted else []
    root_dir = table_dir(root, table)
    generations = {g: ManifestGeneration(g, int(totals.get(g, 0)), ()) for g in wanted}
    by_generation: dict[int, list[ManifestChunk]] = {g: [] for g in wanted}
    for row in rows:
        by_generation[row["generation"]].append(_manifest_chunk(row, root_dir))
    for g, chunks in by_generation.items():
        generations[g] = ManifestGeneration(g, int(totals.get(g, 0)), tuple(chunks))
    manifest = SnapshotManifest(name, root_dir, latest, generations)
    write_json_atomic(manifest_path(root, table), _to_json(manifest))
    return manifest


def read_snapshot_manifest(root: str, table: TableId) -> SnapshotManifest | None:
    data = read_json(manifest_path(root, table))
    if data is None:
        return None
    record_version(data, f"the snapshot manifest of {table}", MANIFEST_VERSION)
    return SnapshotManifest(
        table=str(data["table"]),
        root=table_dir(root, table),
        latest_generation=data.get("latest_generation"),
        generations={
            int(g): ManifestGeneration(int(g), int(v["chunk_count"]),
                                       tuple(ManifestChunk.from_dict(c) for c in v["chunks"]))
            for g, v in data.get("generations", {}).items()
        },
    )


def _manifest_chunk(row: Any, root_dir: str) -> ManifestChunk:
    import json

    version = str(row["output_version"] or "")
    prefix = root_dir.rstrip("/") + "/"
    path = version.removeprefix(prefix)
    extra = json.loads(row["extra_json"]) if row["extra_json"] else {}
    committed = row["committed_at"]
    return ManifestChunk(
        chunk_id=int(row["chunk_id"]), rows=int(row["row_count"] or 0),
        lw=BinlogPosition(row["lw_file"], int(row["lw_pos"])),
        hw=BinlogPosition(row["hw_file"], int(row["hw_pos"])),
        path=path, files=tuple(extra.get("files") or ()), start_key=row["start_key"], end_key=row["end_key"],
        committed_at=committed.replace(tzinfo=UTC).isoformat() if isinstance(committed, datetime) else None,
    )


def _to_json(manifest: SnapshotManifest) -> dict[str, Any]:
    current = manifest.current
    return {
        FORMAT_VERSION: MANIFEST_VERSION,
        "table": manifest.table,
        "latest_generation": manifest.latest_generation,
        "current_generation": current.generation if current else None,
        "generations": {
            str(g.generation): {"chunk_count": g.chunk_count, "fully_committed": g.fully_committed,
                                "chunks": [c.to_dict() for c in g.chunks]}
            for g in sorted(manifest.generations.values(), key=lambda g: -g.generation)
        },
    }
