"""Snapshot garbage: chunk version directories no reader needs any more.

``snapshot/generation=<g>/chunk=<id>/version=<v>/`` is garbage when it is not the chunk store's current
committed version of that chunk and has not been needed for longer than the retention:

* a superseded version (a rerun committed a newer one): since the newer version committed (a reader that
  loaded the snapshot manifest before that may still read it);
* an attempt that never committed (a killed read): since it was last written (its own age), so an attempt
  still writing is never touched;
* every version of a plan generation older than the one the mirror uses, once the mirror manifest has moved
  to that newer generation: since the newer generation was fully committed. The mirror rebuilds chunks
  from snapshot files (a rerun, DDL), so a generation it still uses keeps its current versions.

Ages come from the chunk store's ``committed_at`` and the files' modification times.
"""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.gc.files import SNAPSHOT, Garbage, newest_mtime, subdirs
from airflow_provider_mysqlcdc.engine.lake.layout import SNAPSHOT as SNAPSHOT_DIR
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem, snapshot_dir, table_dir
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest
from airflow_provider_mysqlcdc.engine.lake.snapshot_manifest import read_snapshot_manifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId


def snapshot_garbage(root: str, store: ChunkStore, table: TableId, cutoff: float) -> list[Garbage]:
    """The table's snapshot version directories that are garbage at ``cutoff`` (epoch seconds)."""
    base = posixpath.join(table_dir(root, table), SNAPSHOT_DIR)
    numbered = {_number(name, "generation"): path for name, path in subdirs(base)}
    generations = {number: path for number, path in numbered.items() if number is not None}
    if not generations:
        return []
    view = store.mirror_view(str(table))
    manifest = read_manifest(root, table)
    # the generation the mirror uses, once the chunk store and the mirror manifest agree on it
    agreed = view is not None and manifest is not None and manifest.generation == view.generation
    used = view.generation if agreed and view is not None else None
    used_since = _latest_commit(store, table, used) if used is not None else None
    published = _published(root, table)  # what readers of the snapshot manifest may read: never deleted
    out: list[Garbage] = []
    for generation, gen_path in sorted(generations.items()):
        if not _planned(store, table, generation):
            continue  # not this chunk store's (a wrong --chunk-store): leave it alone
        states = {s.chunk_id: s for s in store.chunks(str(table), generation)}
        retired = used is not None and generation < used  # every version of it is garbage after the grace
        for chunk_name, chunk_path in subdirs(gen_path):
            chunk_id = _number(chunk_name, "chunk")
            state = states.get(chunk_id) if chunk_id is not None else None
            if chunk_id is None or state is None:
                continue
            current = _inner(_version_path(root, table, generation, chunk_id, state.output_version)) if (
                state.output_version) else None
            versions = [(n, p) for n, p in subdirs(chunk_path) if n.startswith("version=")]
            if current is not None and current not in {_inner(p) for _, p in versions}:
                continue  # the store's current version is not here: a store of another output root
            superseded_at = _seconds(state.committed_at)
            for _, version_path in versions:
                if _inner(version_path) in published:
                    continue
                if retired:
                    if used_since is None or used_since >= cutoff:
                        continue
                elif _inner(version_path) == current:
                    continue
                elif superseded_at is not None and superseded_at >= cutoff:
                    continue  # a reader that loaded the manifest before the newer version may still read it
                written, files = newest_mtime(version_path)
                if written >= cutoff:
                    continue  # written lately: an attempt in flight, or a version just superseded
                out.append(Garbage(str(table), SNAPSHOT, version_path, len(files), sum(f.size for f in files),
                                   is_dir=True, prune_parents=retired))
    return out


def retired_parents(root: str, table: TableId, garbage: list[Garbage]) -> list[str]:
    """Chunk and generation directories emptied by deleting ``garbage`` of retired generations (removed only
    if empty; see ``files.remove_if_empty``)."""
    parents = {posixpath.dirname(g.path) for g in garbage if g.kind == SNAPSHOT and g.prune_parents}
    return sorted(parents) + sorted({posixpath.dirname(p) for p in parents})


def _published(root: str, table: TableId) -> set[str]:
    """The version directories ``_snapshot_manifest.json`` names (the chunk store's export for readers)."""
    manifest = read_snapshot_manifest(root, table)
    if manifest is None:
        return set()
    return {_inner(c.directory(manifest.root)) for g in manifest.generations.values() for c in g.chunks}


def _planned(store: ChunkStore, table: TableId, generation: int) -> bool:
    latest = store.latest_generation(str(table))
    return latest is not None and generation <= latest


def _latest_commit(store: ChunkStore, table: TableId, generation: int) -> float | None:
    """When the generation became fully committed: its latest chunk commit."""
    times = [_seconds(s.committed_at) for s in store.chunks(str(table), generation)]
    known = [t for t in times if t is not None]
    return max(known) if known and len(known) == len(times) else None


def _version_path(root: str, table: TableId, generation: int, chunk_id: int, version: str) -> str:
    """The directory of a committed version: recorded as a directory (the Spark snapshot) or a version id."""
    return version if "/" in version else snapshot_dir(root, table, generation, chunk_id, version)


def _inner(path: str) -> str:
    return filesystem(path)[1].rstrip("/")


def _number(name: str, key: str) -> int | None:
    prefix = f"{key}="
    if not name.startswith(prefix):
        return None
    try:
        return int(name[len(prefix):])
    except ValueError:
        return None


def _seconds(value: datetime | None) -> float | None:
    """A chunk store time (naive UTC) as epoch seconds."""
    if value is None:
        return None
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()
