"""A chunk's rows in deletion-vector mode: the row ranges of its files (``FilePart``), minus the rows the
deletion vectors name; and where each key's live row sits (file, row number), to delete it by vector.

Locating keys must not read every touched file whole per batch: mirror files never change once written, so
their key columns are kept in a process-wide cache bounded by bytes (``KEY_CACHE_BYTES``; least recently
used first out). A batch then reads only the key columns of files it meets for the first time. A key of one
integer column (the common case) is found by binary search in the file's keys sorted once (cached with
them): a batch's cost per touched chunk is then its changed keys', not the chunk's rows (measured in
``bench/mirror_refresh.py``); other keys (strings, composite, temporal) by a hash join over the chunk's live
keys.
"""

from __future__ import annotations

import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap

from airflow_provider_mysqlcdc.engine.lake.file_types import engine_types
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.lake.mirror_apply import _join_keys
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import FilePart

KEY_CACHE_BYTES = 256 * 1024 * 1024  # the key columns of mirror files kept in memory, per process
_ROW = "__mysqlcdc_row"
_PART = "__mysqlcdc_part"


@dataclass(frozen=True)
class SortedKeys:
    """One integer key column of a file, sorted, and each sorted key's row number."""

    keys: np.ndarray
    rows: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.rows.nbytes)


@dataclass
class KeyCache:
    """Key columns of immutable mirror files, least recently used out past ``budget`` bytes."""

    budget: int = KEY_CACHE_BYTES
    reads: int = 0  # files whose key columns were read (misses), for tests and the bench

    def __post_init__(self) -> None:
        self._entries: OrderedDict[tuple[str, tuple[str, ...]], pa.Table | SortedKeys] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # tables refresh in a thread pool

    def keys(self, path: str, names: Sequence[str]) -> pa.Table:
        found = self._get((path, tuple(names)))
        if found is not None:
            assert isinstance(found, pa.Table)
            return found
        fs, inner = filesystem(path)
        table = engine_types(pq.read_table(inner, filesystem=fs, columns=list(names)))
        self._put((path, tuple(names)), table)
        return table

    def sorted_keys(self, path: str, name: str) -> SortedKeys:
        """The file's integer key column ``name``, sorted (read once, then cached)."""
        key = (path, (name, "<sorted>"))
        found = self._get(key)
        if found is not None:
            assert isinstance(found, SortedKeys)
            return found
        fs, inner = filesystem(path)
        column = pq.read_table(inner, filesystem=fs, columns=[name]).column(name)
        values = column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        order = np.argsort(values, kind="stable")
        entry = SortedKeys(values[order], order.astype(np.int64))
        self._put(key, entry)
        return entry

    def _get(self, key: tuple[str, tuple[str, ...]]) -> pa.Table | SortedKeys | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def _put(self, key: tuple[str, tuple[str, ...]], table: pa.Table | SortedKeys) -> None:
        with self._lock:
            self.reads += 1
            if table.nbytes <= self.budget:
                self._entries[key] = table
                self._bytes += table.nbytes
                while self._bytes > self.budget:
                    _, old = self._entries.popitem(last=False)
                    self._bytes -= old.nbytes


KEYS = KeyCache()


def live_rows(base: str, parts: Sequence[FilePart], deleted: dict[str, BitMap], schema: pa.Schema,
              read: Callable[[list[str], pa.Schema], pa.Table]) -> pa.Table:
    """The chunk's live rows in ``schema``: each part's range minus its file's deleted rows. ``read(paths,
    schema)`` reads whole files (``mirror_files.read_files``); overlay files are small, base files the
    chunk's own."""
    tables = []
    for part in parts:
        data = read([posixpath.join(base, part.file)], schema).slice(part.start, part.end - part.start)
        gone = deleted.get(part.file)
        if gone:
            keep = _keep_mask(part, gone)
            if keep is not None:
                data = data.filter(pa.array(keep))
        tables.append(data)
    return pa.concat_tables(tables) if tables else schema.empty_table()


def locate(base: str, parts: Sequence[FilePart], deleted: dict[str, BitMap], keys: pa.Table,
           primary_key: Sequence[str]) -> dict[str, list[int]]:
    """The live rows of the chunk whose primary key is one of ``keys``', as row numbers per file."""
    pk = list(primary_key)
    if keys.num_rows == 0:
        return {}
    if len(pk) == 1 and pa.types.is_integer(keys.schema.field(pk[0]).type) and not keys.column(
            pk[0]).null_count:
        return _locate_sorted(base, parts, deleted, keys.column(pk[0]), pk[0])
    pieces = []
    for i, part in enumerate(parts):
        data = KEYS.keys(posixpath.join(base, part.file), pk).slice(part.start, part.end - part.start)
        rows = np.arange(part.start, part.end, dtype=np.int64)
        gone = deleted.get(part.file)
        if gone:
            keep = _keep_mask(part, gone)
            if keep is not None:
                data, rows = data.filter(pa.array(keep)), rows[keep]
        pieces.append(_join_keys(data, pk).append_column(_ROW, pa.array(rows))
                      .append_column(_PART, pa.array(np.full(len(rows), i, dtype=np.int32))))
    if not pieces or keys.num_rows == 0:
        return {}
    live = pa.concat_tables(pieces, promote_options="permissive")
    wanted = _join_keys(keys, pk)
    live = live.cast(pa.schema([*(wanted.schema.field(n) for n in pk),
                                live.schema.field(_ROW), live.schema.field(_PART)]))
    hit = live.join(wanted, keys=pk, join_type="left semi", use_threads=False)
    out: dict[str, list[int]] = {}
    part_ids = hit.column(_PART).to_numpy()
    row_ids = hit.column(_ROW).to_numpy()
    for i in np.unique(part_ids):
        out.setdefault(parts[int(i)].file, []).extend(row_ids[part_ids == i].tolist())
    return out


def _locate_sorted(base: str, parts: Sequence[FilePart], deleted: dict[str, BitMap], keys: pa.ChunkedArray,
                   name: str) -> dict[str, list[int]]:
    """``locate`` for one integer key column: binary search in each file's sorted keys; a hit counts when
    its row is inside the part's range and not deleted (a key is live in at most one place)."""
    wanted = np.unique(keys.to_numpy().astype(np.int64, copy=False))
    out: dict[str, list[int]] = {}
    for part in parts:
        index = KEYS.sorted_keys(posixpath.join(base, part.file), name)
        if not len(index.keys):
            continue
        rows, _ = _rows_holding(index, wanted)
        if not len(rows):
            continue
        rows = rows[(rows >= part.start) & (rows < part.end)]
        gone = deleted.get(part.file)
        hits = [int(r) for r in rows if gone is None or int(r) not in gone]
        if hits:
            out.setdefault(part.file, []).extend(hits)
    return out


def _rows_holding(index: SortedKeys, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row numbers of every row holding one of ``keys`` (sorted, unique), in key order, and how many rows
    each key has (a file holds a key once, but nothing here relies on it)."""
    left = np.searchsorted(index.keys, keys, side="left")
    counts = np.searchsorted(index.keys, keys, side="right") - left
    starts = np.repeat(left, counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return index.rows[starts + offsets], counts


def locate_sorted_batch(
    base: str, wanted: Sequence[tuple[int, Sequence[FilePart], np.ndarray]],
    deleted: Callable[[str], BitMap | None], name: str,
) -> dict[int, dict[str, list[int]]]:
    """``locate`` for one integer key column over many chunks at once: ``wanted`` holds (chunk id, its parts,
    its wanted keys); the live rows found, per chunk, as row numbers per file. One binary search per *file*
    with every wanted key of the chunks that have rows in it (a batch's overlay file holds rows of many
    chunks: one search for all of them, not one per chunk and part); a hit counts when its row lies in a part
    of the chunk that wanted the key and is not deleted (``deleted(file)``)."""
    # per file: the parts of each chunk in it (chunk id, start, end)
    in_file: dict[str, list[tuple[int, int, int]]] = {}
    keys_of: dict[int, np.ndarray] = {}
    for cid, parts, keys in wanted:
        if not len(keys):
            continue
        keys_of[cid] = np.unique(keys.astype(np.int64, copy=False))
        for p in parts:
            in_file.setdefault(p.file, []).append((cid, p.start, p.end))
    out: dict[int, dict[str, list[int]]] = {}
    for file, spans in in_file.items():
        index = KEYS.sorted_keys(posixpath.join(base, file), name)
        if not len(index.keys):
            continue
        cids = list(dict.fromkeys(c for c, _, _ in spans))
        keys = keys_of[cids[0]] if len(cids) == 1 else np.concatenate([keys_of[c] for c in cids])
        owner = (np.full(len(keys), cids[0], dtype=np.int64) if len(cids) == 1 else
                 np.repeat(np.asarray(cids, dtype=np.int64), [len(keys_of[c]) for c in cids]))
        rows, counts = _rows_holding(index, keys)
        if not len(rows):
            continue
        who = np.repeat(owner, counts)
        if len(spans) == 1:  # a base file: one chunk's one part
            cid, lo, hi = spans[0]
            inside = (rows >= lo) & (rows < hi)
            rows, who = rows[inside], who[inside]
            gone = deleted(file)
            found = [r for r in rows.tolist() if gone is None or r not in gone]
            if found:
                out.setdefault(cid, {}).setdefault(file, []).extend(found)
            continue
        # the part each row lies in (parts of one file never overlap), and whether it is the wanting chunk's
        spans.sort(key=lambda s: s[1])
        span_start = np.fromiter((s[1] for s in spans), dtype=np.int64, count=len(spans))
        span_end = np.fromiter((s[2] for s in spans), dtype=np.int64, count=len(spans))
        span_cid = np.fromiter((s[0] for s in spans), dtype=np.int64, count=len(spans))
        at = np.searchsorted(span_start, rows, side="right") - 1
        ok = at >= 0
        at = np.where(ok, at, 0)
        ok &= (rows < span_end[at]) & (span_cid[at] == who)
        rows, who = rows[ok], who[ok]
        gone = deleted(file)
        for cid, row in zip(who.tolist(), rows.tolist()):
            if gone is None or row not in gone:
                out.setdefault(cid, {}).setdefault(file, []).append(row)
    return out


def _keep_mask(part: FilePart, gone: BitMap) -> np.ndarray | None:
    inside = gone & BitMap(range(part.start, part.end))
    if not inside:
        return None
    keep = np.ones(part.end - part.start, dtype=bool)
    keep[np.fromiter(inside, dtype=np.int64, count=len(inside)) - part.start] = False
    return keep


def deleted_in(part: FilePart, gone: BitMap | None) -> int:
    """How many of the part's rows are deleted (two rank look-ups, not a bitmap of the part's range: this
    runs for every part of every touched chunk)."""
    if not gone or part.end <= part.start:
        return 0
    return int(gone.rank(part.end - 1)) - (int(gone.rank(part.start - 1)) if part.start else 0)
