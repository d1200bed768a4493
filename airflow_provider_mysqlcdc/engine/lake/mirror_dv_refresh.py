"""A refresh in deletion-vector mode (``mirror_updates=deletion_vectors``): a batch writes its changes, not
the chunks they touch.

A chunk's rows are ranges of files (``FilePart``): its base file (written when the chunk is built from its
snapshot, or compacted) and the overlay files of the batches that changed it. A batch's refresh:

- keeps every base file; the live row of each key the batch changed (a delete, an update, either half of a
  key-changing update) is deleted by a deletion vector on the file that holds it (``mirror_parts.locate``);
- writes the rows the batch inserts or updates into *one* overlay file for the whole table, chunk after chunk,
  so each chunk's new rows are one known row range of it;
- writes the changed vectors into one vector file (``deletion_vectors``), and the manifest and the Delta
  commit follow (``delta_mirror``): a batch writes about its changed rows plus one small vector per touched
  file, whatever the table's size.

A chunk rebuilt from a new snapshot (a rerun, a new plan generation, a schema change that rewrites files) gets
a new base file as in rewrite mode; its rows in shared overlay files are deleted by vector, and a file none of
whose rows is live any more leaves the table (GC deletes it after the retention, like any removed file).
Tables without a primary key (multisets) rewrite each touched chunk from its live rows.

Compaction (``Compaction``): a chunk whose overlay and deleted rows reach ``ratio`` of its live rows (at least
``min_rows``), or whose rows lie in more than ``max_parts`` files, is rewritten into one clean base file by
the refresh that changes it next, at most ``chunks`` chunks per refresh (the most degraded first), so no batch
does more than a bounded amount of extra work; the rest wait for the next batches.
"""

from __future__ import annotations

import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap

from airflow_provider_mysqlcdc.engine.chunk_store import MirrorChunk
from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import DeletionVector, read_vector, write_vectors
from airflow_provider_mysqlcdc.engine.lake.file_types import to_file_types
from airflow_provider_mysqlcdc.engine.lake.layout import MIRROR, filesystem, new_version, table_dir
from airflow_provider_mysqlcdc.engine.lake.mirror_apply import (
    _ASSERTS,
    _join_keys,
    apply_latest,
    apply_multiset,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_files import PART_FILE, read_files, write_chunk
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import FilePart, MirrorChunkEntry, MirrorManifest
from airflow_provider_mysqlcdc.engine.lake.mirror_parts import (
    deleted_in,
    live_rows,
    locate,
    locate_sorted_batch,
)
from airflow_provider_mysqlcdc.engine.lake.mirror_records import CHUNK, OP, ChunkRecords
from airflow_provider_mysqlcdc.engine.model.tables import TableId

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorBuild

OVERLAY = "overlay"


@dataclass(frozen=True)
class Compaction:
    """When a chunk is rewritten into one clean file, and how many per refresh at most."""

    ratio: float = 0.25  # overlay + deleted rows over live rows
    min_rows: int = 1024  # below this many overlay + deleted rows a chunk is never compacted
    chunks: int = 4  # chunks compacted per refresh at most
    max_parts: int = 64  # or when a chunk's rows are spread over more files than this (each costs a lookup)
    everything: bool = False  # rewrite every changed chunk whole (rewrite mode over a mirror with vectors)


@dataclass
class DvResult:
    entries: list[MirrorChunkEntry]
    rewritten: list[int]  # chunks that got a new base file or overlay rows
    compacted: list[int]
    vectors: dict[str, DeletionVector]  # the manifest's new deletion vectors
    bytes_written: int = 0  # data and vector files this refresh wrote


@dataclass
class _Vectors:
    """Deleted rows per file (manifest-relative), read lazily from the previous manifest's vectors."""

    mirror_uri: str
    old: dict[str, DeletionVector]
    rows: dict[str, BitMap] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)

    def get(self, file: str) -> BitMap | None:
        if file not in self.rows and file in self.old:
            self.rows[file] = BitMap(_read_cached(self.mirror_uri, self.old[file]))  # a copy: it may grow
        return self.rows.get(file)

    def delete(self, file: str, rows: list[int] | range) -> None:
        current = self.get(file)
        if current is None:
            current = self.rows[file] = BitMap()
        before = len(current)
        current.update(rows)
        if len(current) != before:
            self.changed.add(file)

    def view(self, files: list[str]) -> dict[str, BitMap]:
        return {f: b for f in files if (b := self.get(f))}


def dv_entries(root: str, build: MirrorBuild, changes: ChunkRecords, through: int | None,
               old: MirrorManifest | None, compaction: Compaction,
               read_snapshot: Callable[[MirrorChunk], pa.Table]) -> DvResult:
    """Every chunk's manifest entry after applying ``changes`` (``mirror_records.ChunkRecords``) in
    deletion-vector mode; ``build`` is the refresh's ``MirrorBuild``, ``read_snapshot(chunk)`` a chunk's
    committed snapshot in the mirror's columns."""
    table, data_schema, primary_key = build.table, build.data_schema, build.primary_key
    base = table_dir(root, table)
    mirror_uri = posixpath.join(base, MIRROR)
    vectors = _Vectors(mirror_uri, dict(old.deletion_vectors) if old is not None and build.previous else {})
    entries: dict[int, MirrorChunkEntry] = {}
    rewritten: list[int] = []
    written = 0

    def retire(entry: MirrorChunkEntry | None) -> None:
        for part in _parts(base, entry):
            vectors.delete(part.file, range(part.start, part.end))

    def rewrite(chunk: MirrorChunk, state: pa.Table) -> None:
        nonlocal written
        retire(build.previous.get(chunk.chunk_id))
        entry = write_chunk(root, table, chunk, state, through)
        entries[chunk.chunk_id] = _with_parts(entry, (FilePart(entry.files[0], 0, state.num_rows),))
        written += _size(posixpath.join(base, entry.files[0]))
        rewritten.append(chunk.chunk_id)

    budget = _compaction_order(base, build, changes, vectors, compaction)
    compacted: list[int] = []
    plain: list[tuple[int, MirrorChunkEntry, pa.Table]] = []  # chunks updated by vectors and overlay rows
    for chunk in build.view.chunks:
        cid = chunk.chunk_id
        prev = build.previous.get(cid)
        records = changes.per_chunk.get(cid)
        if cid in build.rebuild:
            state = read_snapshot(chunk)
            if records is not None:
                state = apply_latest(state, records, primary_key) if primary_key else apply_multiset(
                    state, records)
            rewrite(chunk, state)
        elif prev is None:  # not rebuilt, so kept from the previous manifest
            raise AssertionError(f"{table} chunk {cid}: neither rebuilt nor in the previous manifest")
        elif records is None and cid not in budget:
            entries[cid] = prev  # nothing new: keep its files
        elif not primary_key or cid in budget:
            parts = _parts(base, prev)
            state = live_rows(base, parts, vectors.view([p.file for p in parts]), data_schema, read_files)
            if records is not None:
                state = apply_latest(state, records, primary_key) if primary_key else apply_multiset(
                    state, records)
            rewrite(chunk, state)
            if cid in budget:
                compacted.append(cid)
        else:
            assert records is not None
            plain.append((cid, prev, records))
    if plain:
        upserts, sizes, hits = _vector_updates(base, plain, vectors, primary_key, data_schema)
        file = ""
        if upserts.num_rows:
            file = _write_overlay(root, table, upserts)
            written += _size(posixpath.join(base, file))
        start = 0
        for cid, prev, _ in plain:
            found = hits.get(cid, {})
            for path, numbers in found.items():
                vectors.delete(path, numbers)
            deleted = sum(len(r) for r in found.values())
            parts = _parts(base, prev)
            if found:  # a part can only have emptied in a file this batch deleted rows from
                parts = tuple(p for p in parts if p.file not in found
                              or deleted_in(p, vectors.get(p.file)) < p.end - p.start)
            count = sizes.get(cid, 0)
            if count:
                parts = (*parts, FilePart(file, start, start + count))
                start += count
            entries[cid] = MirrorChunkEntry(cid, prev.version, tuple(dict.fromkeys(p.file for p in parts)),
                                            prev.rows - deleted + count, prev.high_watermark,
                                            prev.snapshot_version, through, parts)
            rewritten.append(cid)
    ordered = [entries[c.chunk_id] for c in build.view.chunks]
    live = {f for e in ordered for f in e.files}
    new_vectors = {f: v for f, v in vectors.old.items() if f in live and f not in vectors.changed}
    fresh = [(f.removeprefix(MIRROR + "/"), vectors.rows[f]) for f in sorted(vectors.changed) if f in live]
    if fresh:
        made = write_vectors(mirror_uri, fresh)
        for f, rows in fresh:
            new_vectors[MIRROR + "/" + f] = made[f]
            with _VECTORS_LOCK:
                _VECTORS[(mirror_uri, made[f])] = rows
        written += _size(posixpath.join(mirror_uri, next(iter(made.values())).file))
    return DvResult(ordered, rewritten, compacted, new_vectors, written)


_VECTORS: OrderedDict[tuple[str, DeletionVector], BitMap] = OrderedDict()
_VECTORS_KEPT = 20_000  # vectors kept in memory (a vector file never changes once written)
_VECTORS_LOCK = threading.Lock()


def _read_cached(mirror_uri: str, vector: DeletionVector) -> BitMap:
    key = (mirror_uri, vector)
    with _VECTORS_LOCK:
        found = _VECTORS.get(key)
        if found is not None:
            _VECTORS.move_to_end(key)
            return found
    found = read_vector(mirror_uri, vector)
    with _VECTORS_LOCK:
        _VECTORS[key] = found
        while len(_VECTORS) > _VECTORS_KEPT:
            _VECTORS.popitem(last=False)
    return found


def chunk_state(root: str, table: TableId, manifest: MirrorManifest, entry: MirrorChunkEntry,
                schema: pa.Schema) -> pa.Table:
    """A chunk's live rows as the manifest has them (its parts minus the deleted rows; an entry without
    parts: its files whole), for readers of one chunk (``engine/verify``)."""
    base = table_dir(root, table)
    if not entry.parts:
        return read_files([posixpath.join(base, f) for f in entry.files], schema)
    mirror_uri = posixpath.join(base, MIRROR)
    deleted = {f: _read_cached(mirror_uri, v) for f, v in manifest.deletion_vectors.items()
               if f in set(entry.files)}
    return live_rows(base, entry.parts, deleted, schema, read_files)


def _vector_updates(base: str, plain: list[tuple[int, MirrorChunkEntry, pa.Table]], vectors: _Vectors,
                    primary_key: tuple[str, ...], data_schema: pa.Schema,
                    ) -> tuple[pa.Table, dict[int, int], dict[int, dict[str, list[int]]]]:
    """For the chunks a batch updates by vectors (chunk id, previous entry, its records), in one pass over
    the whole batch rather than one per chunk: the overlay rows (the latest insert or update per key, chunk
    after chunk in ``plain``'s order), how many of them each chunk has, and the live rows each chunk's changed
    keys delete (per chunk, row numbers per file)."""
    latest = _latest(pa.concat_tables([  # each chunk's records carry its id (``mirror_records.CHUNK``)
        records if CHUNK in records.schema.names else
        records.append_column(CHUNK, pa.array(np.full(records.num_rows, cid, dtype=np.int32)))
        for cid, _, records in plain]), primary_key)
    cids = latest.column(CHUNK).to_numpy()
    pk = list(primary_key)
    key_type = latest.schema.field(pk[0]).type
    if len(pk) == 1 and pa.types.is_integer(key_type) and not latest.column(pk[0]).null_count:
        keys = latest.column(pk[0]).to_numpy().astype(np.int64, copy=False)
        bounds = _runs(cids)
        wanted = [(cid, _parts(base, prev), keys[bounds[cid][0]:bounds[cid][1]] if cid in bounds
                   else keys[:0]) for cid, prev, _ in plain]
        hits = locate_sorted_batch(base, wanted, vectors.get, pk[0])
    else:
        hits = {}
        bounds = _runs(cids)
        for cid, prev, _ in plain:
            if cid not in bounds:
                continue
            lo, hi = bounds[cid]
            parts = _parts(base, prev)
            found = locate(base, parts, vectors.view([p.file for p in parts]),
                           latest.slice(lo, hi - lo).select(pk), pk)
            if found:
                hits[cid] = found
    upserts = latest.filter(pc.is_in(latest.column(OP), value_set=_ASSERTS))
    sizes = {cid: hi - lo for cid, (lo, hi) in _runs(upserts.column(CHUNK).to_numpy()).items()}
    return upserts.select(data_schema.names).cast(data_schema), sizes, hits


def _runs(ids: np.ndarray) -> dict[int, tuple[int, int]]:
    """The [start, end) of each run of equal ids (``ids`` grouped: each id in one run)."""
    if not len(ids):
        return {}
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], len(ids)]
    return {int(ids[a]): (int(a), int(b)) for a, b in zip(starts, ends)}


def _latest(records: pa.Table, primary_key: tuple[str, ...]) -> pa.Table:
    """The latest record per chunk (``CHUNK``) and primary key (``records`` are grouped by chunk, each
    chunk's sorted by position), as ``apply_latest`` takes, in ``records``' order."""
    pk = list(primary_key)
    indexed = _join_keys(records, pk).append_column(CHUNK, records.column(CHUNK)).append_column(
        "_i", pa.array(np.arange(records.num_rows, dtype=np.int64)))
    last = indexed.group_by([CHUNK, *pk], use_threads=False).aggregate([("_i", "max")]).column("_i_max")
    return records.take(pa.array(np.sort(last.to_numpy())))


def _parts(base: str, entry: MirrorChunkEntry | None) -> tuple[FilePart, ...]:
    """An entry's row ranges; an entry written in rewrite mode is its files whole."""
    if entry is None:
        return ()
    if entry.parts:
        return entry.parts
    if len(entry.files) == 1:
        return (FilePart(entry.files[0], 0, entry.rows),)
    out = []
    for f in entry.files:
        fs, inner = filesystem(posixpath.join(base, f))
        out.append(FilePart(f, 0, pq.read_metadata(inner, filesystem=fs).num_rows))
    return tuple(out)


def _with_parts(entry: MirrorChunkEntry, parts: tuple[FilePart, ...]) -> MirrorChunkEntry:
    return MirrorChunkEntry(entry.chunk_id, entry.version, tuple(dict.fromkeys(p.file for p in parts)),
                            entry.rows, entry.high_watermark, entry.snapshot_version, entry.through_batch,
                            parts)


def _compaction_order(base: str, build: MirrorBuild, changes: ChunkRecords, vectors: _Vectors,
                      compaction: Compaction) -> set[int]:
    """The chunks this refresh compacts: among the chunks it changes anyway (their vectors are read), those
    past the threshold, the most degraded first, at most ``compaction.chunks``."""
    if compaction.everything:
        return {cid for cid in changes.per_chunk if cid in build.previous and cid not in build.rebuild}
    if compaction.chunks <= 0:
        return set()
    scored = []
    for cid in changes.per_chunk:
        prev = build.previous.get(cid)
        if prev is None or cid in build.rebuild or not prev.parts:
            continue
        waste = sum(p.end - p.start for p in prev.parts[1:]) + sum(
            deleted_in(p, vectors.get(p.file)) for p in prev.parts)
        if waste >= max(compaction.min_rows, compaction.ratio * max(prev.rows, 1)):
            scored.append((waste / max(prev.rows, 1), cid))
        elif len(prev.parts) > compaction.max_parts:
            scored.append((len(prev.parts) / compaction.max_parts * compaction.ratio, cid))
    return {cid for _, cid in sorted(scored, reverse=True)[:compaction.chunks]}


def _write_overlay(root: str, table: TableId, data: pa.Table) -> str:
    """One file with every changed chunk's new rows, chunk after chunk; its path (table-relative)."""
    base = table_dir(root, table)
    directory = posixpath.join(base, MIRROR, OVERLAY, f"version={new_version()}")
    fs, inner = filesystem(directory)
    fs.create_dir(inner, recursive=True)
    pq.write_table(to_file_types(data), posixpath.join(inner, PART_FILE), filesystem=fs)
    return posixpath.join(directory[len(base) + 1:], PART_FILE)


def _size(path: str) -> int:
    fs, inner = filesystem(path)
    return fs.get_file_info(inner).size or 0
